"""The whole flow across the real thing: HTTP to daphne, Postgres, Redis, a Celery worker."""

import time
import uuid

import httpx
import pytest

from tests.conftest import make_agent, user_message

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def live(live_each_mode):
    """Each test here runs against both modes: Celery workers, and the embedded mode's threads."""
    return live_each_mode


V1 = {"A2A-Version": "1.0"}


def call(live, path, method, params, key=None, timeout=30):
    headers = {**V1, **({"X-API-Key": key} if key else {})}
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    response = httpx.post(f"{live.url}{path}", json=body, headers=headers, timeout=timeout)
    assert response.status_code == 200, response.text
    return response.json()


def poll(live, path, task_id, key, until, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = call(live, path, "GetTask", {"id": task_id}, key)["result"]
        if until(task):
            return task
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached the expected state; last: {task['status']}")


def test_a_client_sends_a_message_and_reads_the_persisted_task_back(live, echo_agent, alice_key):
    sent = call(live, "/agents/acme/echo/", "SendMessage", {"message": user_message("over the wire")}, alice_key)
    task = sent["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "echo: over the wire"}]
    fetched = call(live, "/agents/acme/echo/", "GetTask", {"id": task["id"]}, alice_key)["result"]
    assert fetched["artifacts"] == task["artifacts"] and fetched["status"]["state"] == "TASK_STATE_COMPLETED"
    listed = call(live, "/agents/acme/echo/", "ListTasks", {}, alice_key)["result"]
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    assert "succeeded" in live.log("worker")


def test_return_immediately_hands_back_the_task_and_the_worker_finishes_it(live, echo_agent, alice_key):
    params = {"message": user_message("later"), "configuration": {"returnImmediately": True}}
    task = call(live, "/agents/acme/echo/", "SendMessage", params, alice_key)["result"]["task"]
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_COMPLETED")
    done = poll(
        live, "/agents/acme/echo/", task["id"], alice_key, lambda t: t["status"]["state"] == "TASK_STATE_COMPLETED"
    )
    assert done["artifacts"][0]["parts"] == [{"text": "echo: later"}]


def test_a_multi_turn_exchange_with_the_writer(live, writer_agent, alice_key):
    asked = call(live, "/agents/acme/writer/", "SendMessage", {"message": user_message("write")}, alice_key)
    task = asked["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    follow = {"message": user_message("a poem about rivers", taskId=task["id"])}
    done = call(live, "/agents/acme/writer/", "SendMessage", follow, alice_key)["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED" and done["contextId"] == task["contextId"]
    assert len(done["artifacts"][0]["parts"]) == 4


def test_a_runaway_agent_is_failed_by_the_time_limit(live, tenant, alice_key):
    make_agent(tenant, "slow-writer", "writer", settings={"delay": 10})  # far beyond the 3 s limit
    sent = call(
        live, "/agents/acme/slow-writer/", "SendMessage", {"message": user_message("a poem about time")}, alice_key
    )
    task = sent["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    from tasks_app.models import Task

    stored = Task.objects.get(pk=task["id"])
    assert stored.failure == "time-limit"
    assert "time limit of 3 s" in stored.status_changes.last().reason


def test_cancellation_reaches_the_running_executor(live, conformance_agent):
    params = {
        "message": user_message(messageId="test-resubscribe-message-id-1"),
        "configuration": {"returnImmediately": True},
    }
    path = "/agents/acme/conformance/"
    task = call(live, path, "SendMessage", params)["result"]["task"]
    poll(live, path, task["id"], None, lambda t: t["status"]["state"] == "TASK_STATE_WORKING")
    canceled = call(live, path, "CancelTask", {"id": task["id"]})["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    from tasks_app.models import TaskEvent

    # The executor polls `cancelled` every 0.1 s; it must stop without writing anything more.
    time.sleep(1.5)
    assert "'closed'" in live.log("worker")
    states = [e.payload.get("state") for e in TaskEvent.objects.filter(task_id=task["id"]).order_by("seq")]
    assert states == ["submitted", "working", "canceled"]


def test_the_sweeper_sends_again_work_that_was_committed_but_never_enqueued(live, echo_agent, monkeypatch, settings):
    from accounts.selectors import Principal
    from agentserver.celery import app
    from tasks_app import dispatch, services, tasks
    from tasks_app.domain import NewMessage
    from tasks_app.models import Task

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)  # the broker "was down" at commit
    message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "lost"}])
    task, _ = services.message_receive(agent=echo_agent, principal=Principal("alice", api_key_id=1), message=message)
    monkeypatch.undo()
    settings.SWEEP_UNCLAIMED_AFTER = 0
    app.conf.task_always_eager = False  # this time, really go through the broker to the live worker
    assert tasks.sweep_stuck_work() == {"requeued": 1, "failed": 0}
    deadline = time.monotonic() + 15
    while Task.objects.get(pk=task.pk).state != "completed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert Task.objects.get(pk=task.pk).artifacts.get().parts == [{"type": "text", "text": "echo: lost"}]


def test_blocking_waits_hold_no_thread_in_the_web_process(live, conformance_agent, echo_agent, alice_key):
    """30 blocking SendMessage calls wait at once while both worker processes are busy;
    the web process's thread count must not grow with them."""
    import concurrent.futures
    from pathlib import Path

    def threads() -> int:
        status = Path(f"/proc/{live.web_pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))

    slow = {
        "message": user_message(messageId="test-resubscribe-message-id-busy"),
        "configuration": {"returnImmediately": True},
    }
    for _ in range(2):  # the worker has two processes: occupy both for about 4 s
        call(live, "/agents/acme/conformance/", "SendMessage", slow)
    before = threads()
    with concurrent.futures.ThreadPoolExecutor(30) as pool:
        futures = [
            pool.submit(call, live, "/agents/acme/echo/", "SendMessage", {"message": user_message(f"n{i}")}, alice_key)
            for i in range(30)
        ]
        time.sleep(2)  # all 30 are parked waiting now
        during = threads()
        results = [f.result(timeout=30) for f in futures]
    assert all(r["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED" for r in results)
    assert during - before < 10, (before, during)


@pytest.mark.parametrize(
    "content_type, body",
    [
        ("multipart/form-data", b"no boundary, no parts"),
        ("multipart/form-data; boundary=x", b"--x\r\nnot a part"),
        ("application/x-www-form-urlencoded", b"a=b&%%%"),
    ],
)
def test_daphne_hands_form_bodies_to_the_endpoint_which_answers_in_json_rpc(
    live, echo_agent, alice_key, content_type, body
):
    # Twisted used to answer a multipart body it could not parse with an empty 400 itself.
    response = httpx.post(
        f"{live.url}/agents/acme/echo/",
        content=body,
        timeout=10,
        headers={**V1, "X-API-Key": alice_key, "Content-Type": content_type},
    )
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32005


def test_a_request_in_the_wrong_content_type_is_answered_with_its_id(live, echo_agent, alice_key):
    body = b'{"jsonrpc":"2.0","id":"mine","method":"GetTask","params":{"id":"x"}}'
    response = httpx.post(
        f"{live.url}/agents/acme/echo/",
        content=body,
        timeout=10,
        headers={**V1, "X-API-Key": alice_key, "Content-Type": "multipart/form-data"},
    )
    assert response.json()["id"] == "mine" and response.json()["error"]["code"] == -32005


def test_every_session_ended_as_by_a_postgres_restart_costs_no_request_and_no_run(live, echo_agent, alice_key):
    from tests.conftest import backend_pid, end_sessions

    path = "/agents/acme/echo/"
    for _ in range(4):  # every worker child and web thread holds a session now
        assert call(live, path, "SendMessage", {"message": user_message("before")}, alice_key)["result"]["task"]
    ended = end_sessions(
        "datname = current_database() AND backend_type = 'client backend' AND pid <> %s", backend_pid()
    )
    assert ended >= 2, "the web process and the worker each held a session"
    time.sleep(0.3)

    for n in range(8):
        task = call(live, path, "SendMessage", {"message": user_message(f"after {n}")}, alice_key, timeout=15)
        assert task["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert "store-unavailable" not in live.log("worker") and "Traceback" not in live.log("worker")


def test_a_run_whose_worker_is_killed_runs_again_and_completes(live, tenant, alice_key, settings):
    live.needs_workers("killing the process that runs the agent kills the server (docs/operations.md)")
    import os
    import signal

    from agentserver.celery import app
    from tasks_app import dispatch, services
    from tasks_app.models import Task

    make_agent(tenant, "slow-writer", "writer", settings={"delay": 1})
    params = {"message": user_message("a poem about rivers"), "configuration": {"returnImmediately": True}}
    task_id = call(live, "/agents/acme/slow-writer/", "SendMessage", params, alice_key)["result"]["task"]["id"]
    poll(live, "/agents/acme/slow-writer/", task_id, alice_key, lambda t: t["status"]["state"] == "TASK_STATE_WORKING")
    for child in live.worker_children():  # a deploy's SIGKILL, mid-run
        os.kill(child, signal.SIGKILL)
    time.sleep(1.5)

    # The sweeper, with the grace after the hard limit spent: the run is lost, and runs again.
    unclaimed, failed = services.sweep_stuck_work(unclaimed_after=30, lost_after=1, retries=2, rerunnable={"writer"})
    assert failed == 0 and [u[0] for u in unclaimed] == [uuid.UUID(task_id)]
    app.conf.task_always_eager = False  # through the broker to the live worker's new children
    for pk, token in unclaimed:
        dispatch.enqueue_run(task_id=pk, run_token=token)
    done = poll(
        live,
        "/agents/acme/slow-writer/",
        task_id,
        alice_key,
        lambda t: t["status"]["state"] == "TASK_STATE_COMPLETED",
        timeout=30,
    )
    assert done["artifacts"] and Task.objects.get(pk=task_id).run_retries == 1
    seqs = list(Task.objects.get(pk=task_id).events.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))  # the event log has no gap and no duplicate


def test_a_key_revoked_by_another_process_fails_on_the_next_request_to_every_web_process(live, echo_agent, alice_key):
    import subprocess
    import sys

    from tests.conftest import ROOT

    for url in live.urls:  # cached in both processes now
        for _ in range(2):
            response = httpx.post(
                f"{url}/agents/acme/echo/",
                json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
                headers={**V1, "X-API-Key": alice_key},
            )
            assert response.status_code == 200
    subprocess.run(
        [sys.executable, "manage.py", "revoke_api_key", alice_key], cwd=ROOT, env=live.env, check=True, timeout=60
    )
    for url in live.urls:
        response = httpx.post(
            f"{url}/agents/acme/echo/",
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
            headers={**V1, "X-API-Key": alice_key},
        )
        assert response.status_code == 401, url
