"""A webhook agent's task canceled while no request to its endpoint is open (it waited for
input) sends the endpoint a signed cancel notice (docs/executors.md, "The cancel notice"):
once per cancel, signed as a run's request, retried as one, under one webhook-id however often
it is sent. A task canceled while a request is open is told by that request's closing, not
by a notice. Against the test endpoint on 127.0.0.1 (tests/webhook_endpoint.py), in-process
(Celery eager: the job runs right after the cancel commits) and once across the live stack."""

from __future__ import annotations

import socket
import time
import uuid
from datetime import datetime

import httpx
import pytest

from accounts.selectors import Principal
from accounts.services import agent_secret_set
from protocols import contract
from tasks_app import dispatch, runner, selectors, services
from tasks_app.domain import NewMessage
from tasks_app.executors import webhook
from tasks_app.lifecycle import Dialect, TaskState
from tasks_app.models import Task
from tests.conftest import make_agent, user_message
from tests.webhook_endpoint import Reply, line, ndjson, run_until_working

pytestmark = pytest.mark.django_db(transaction=True)  # the notice's job is enqueued after the cancel commits
ALICE = Principal("alice", api_key_id=1)
FOLLOW_UP = contract.follow_up(Dialect.A2A_1_0)
ASK = ndjson({"type": "input-required", "message": "About what?"})
TAKEN = Reply(204, None)


@pytest.fixture
def hook(tenant, secret, endpoint):
    agent = make_agent(tenant, "hook", "webhook", settings={"url": endpoint.url(), "retries": 2})
    agent_secret_set(agent=agent, secret=secret)
    return agent


@pytest.fixture
def quick_retries(settings, monkeypatch):
    settings.WEBHOOK_RETRY_BACKOFF = 0.01
    waits: list[float] = []
    monkeypatch.setattr(webhook, "_sleep", lambda seconds: (waits.append(seconds), time.sleep(seconds)))
    return waits


def send(agent, text: str = "write a poem", task_id=None) -> Task:
    message = NewMessage(
        message_id=str(uuid.uuid4()),
        role="user",
        parts=[{"type": "text", "text": text}],
        task_id=str(task_id) if task_id else None,
    )
    task, _ = services.message_receive(agent=agent, principal=ALICE, message=message, follow_up=FOLLOW_UP)
    task.refresh_from_db()  # eager: its run is over
    return task


def cancel(agent, task: Task) -> None:
    services.task_cancel(agent=agent, principal=ALICE, task_id=str(task.pk))


def test_a_task_canceled_while_it_waits_for_input_sends_the_endpoint_one_signed_notice(hook, endpoint):
    endpoint.answer(ASK, TAKEN)
    task = send(hook)
    assert task.state == TaskState.INPUT_REQUIRED
    cancel(hook, task)
    endpoint.wait_finished(2)
    run, notice = endpoint.seen
    assert notice.verified  # by the reference library, with the agent's secret
    assert notice.json["type"] == "agentserver.task.canceled.v1"
    assert (notice.json["taskId"], notice.json["contextId"]) == (str(task.pk), task.context_id)
    assert abs(datetime.fromisoformat(notice.json["timestamp"]).timestamp() - time.time()) < 10
    assert set(notice.json) == {"type", "taskId", "contextId", "timestamp"}
    assert notice.headers["webhook-id"] == webhook.cancel_notice_id(str(task.pk)) != run.headers["webhook-id"]
    assert notice.headers["content-type"] == "application/json"
    assert selectors.task_state(task.pk) == TaskState.CANCELED
    assert len(endpoint.seen) == 2  # once


def test_the_notice_sent_again_has_the_same_webhook_id_for_the_endpoint_to_deduplicate(hook, endpoint):
    endpoint.answer(ASK, TAKEN, TAKEN)
    task = send(hook)
    cancel(hook, task)
    endpoint.wait_finished(2)
    assert runner.forward_cancel(task_id=task.pk).startswith("the endpoint took the cancel notice (HTTP 204")
    first, again = endpoint.seen[1:]
    assert again.verified and first.headers["webhook-id"] == again.headers["webhook-id"]
    assert first.json["taskId"] == again.json["taskId"]


def test_a_task_canceled_while_it_waits_after_a_follow_up_names_the_same_task(hook, endpoint):
    endpoint.answer(ASK, ndjson({"type": "input-required", "message": "Which river?"}), TAKEN)
    task = send(hook)
    assert send(hook, "rivers", task_id=task.pk).state == TaskState.INPUT_REQUIRED
    cancel(hook, task)
    endpoint.wait_finished(3)
    assert [s.json["type"] for s in endpoint.seen] == ["agentserver.run.v1"] * 2 + ["agentserver.task.canceled.v1"]


def test_an_endpoint_that_says_later_gets_the_notice_again_with_a_fresh_signature(hook, endpoint, quick_retries):
    later = Reply(503, "text/plain", [(0, b"busy")])
    endpoint.answer(ASK, later, later, TAKEN)
    task = send(hook)
    cancel(hook, task)
    endpoint.wait_finished(4)
    notices = endpoint.seen[1:]
    assert len(notices) == 3 and all(n.verified for n in notices)
    assert len({n.headers["webhook-id"] for n in notices}) == 1
    assert len(quick_retries) == 2


def test_an_endpoint_that_keeps_failing_gets_the_agent_s_retries_and_no_more(hook, endpoint, quick_retries):
    later = Reply(503, "text/plain", [(0, b"busy")])
    endpoint.answer(ASK, *[later] * 6)
    task = send(hook)
    cancel(hook, task)
    endpoint.wait_finished(4)
    assert runner.forward_cancel(task_id=task.pk) == "the endpoint answered HTTP 503 (3 attempts)"
    assert len(endpoint.seen) == 1 + 3 + 3  # the run, then each sending's three attempts


def test_an_endpoint_that_answers_500_is_not_sent_the_notice_again(hook, endpoint):
    endpoint.answer(ASK, Reply(500, "text/plain"))
    task = send(hook)
    cancel(hook, task)
    endpoint.wait_finished(2)
    time.sleep(0.2)  # nothing else comes
    assert len(endpoint.seen) == 2


def test_an_endpoint_that_cannot_be_reached_is_tried_the_agent_s_retries_times(secret, quick_retries):
    with socket.socket() as bound:  # bound, never listening: every connection is refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}/agent"
        plan = webhook.Plan.of({"url": url, "retries": 2})
        outcome = webhook.send_cancel_notice(plan, webhook.signing_key(secret), task_id="t", context_id="c")
    assert outcome.startswith("the endpoint could not be reached") and outcome.endswith("(3 attempts)")
    assert len(quick_retries) == 2


@pytest.mark.parametrize("host", ["127.0.0.2", "[::ffff:127.0.0.3]"])
def test_a_notice_to_an_address_the_guard_refuses_is_not_sent(secret, host):
    plan = webhook.Plan.of({"url": f"http://{host}:9/agent"})
    outcome = webhook.send_cancel_notice(plan, webhook.signing_key(secret), task_id="t", context_id="c")
    assert outcome.startswith("not sent: the webhook url is refused: this address is not allowed")


# --- when no notice is sent --------------------------------------------------------------------


def test_a_task_canceled_before_its_endpoint_saw_it_sends_nothing(hook, endpoint, monkeypatch):
    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)  # no run: the endpoint never hears of it
    task = send(hook)
    assert task.state == TaskState.SUBMITTED
    cancel(hook, task)
    assert runner.forward_cancel(task_id=task.pk) == "nothing to do"
    assert endpoint.seen == []


def test_a_task_that_completed_and_one_that_is_not_canceled_send_nothing(hook, endpoint):
    endpoint.answer(ndjson({"type": "complete", "message": "done"}), ASK)
    done = send(hook)
    waiting = send(hook)
    assert (done.state, waiting.state) == (TaskState.COMPLETED, TaskState.INPUT_REQUIRED)
    assert runner.forward_cancel(task_id=waiting.pk) == "not canceled"
    assert len(endpoint.seen) == 2


def test_a_task_canceled_while_a_request_is_open_is_told_by_its_closing_not_by_a_notice(hook, endpoint, monkeypatch):
    # The follow-up's run is open (the task works) when the cancel comes: the run sees it and
    # closes the connection; the task had waited before, and still no notice is sent.
    endpoint.answer(ASK, Reply(chunks=[(0, line({"type": "working"})), (1.5, line({"type": "complete"}))]))
    task = send(hook)
    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)  # this test runs the follow-up, in a thread
    follow_up = send(hook, "rivers", task_id=task.pk)
    worker, outcome = run_until_working(follow_up)
    cancel(hook, task)
    worker.join(10)
    assert outcome == ["closed"]
    endpoint.wait_finished(2)
    assert endpoint.cut_off == 1
    assert [s.json["type"] for s in endpoint.seen] == ["agentserver.run.v1"] * 2


# --- across the real thing ------------------------------------------------------------------------


@pytest.mark.live
def test_across_the_live_stack_a_client_s_cancel_of_a_waiting_task_reaches_the_endpoint(
    live, hook, endpoint, alice_key
):
    endpoint.answer(ASK, TAKEN)
    headers = {"A2A-Version": "1.0", "X-API-Key": alice_key}

    def call(method: str, params: dict) -> dict:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = httpx.post(f"{live.url}{hook.path}", json=body, headers=headers, timeout=30)
        return response.json()["result"]

    asked = call("SendMessage", {"message": user_message("write a poem")})["task"]
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    canceled = call("CancelTask", {"id": asked["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    endpoint.wait_finished(2)
    notice = endpoint.seen[1]
    assert notice.verified and notice.json["type"] == "agentserver.task.canceled.v1"
    assert notice.json["taskId"] == asked["id"]
