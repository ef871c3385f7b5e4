"""ACPs AIP (seed 004) in direct mode, RPC style, in-process: the seed's examples replayed,
every row of the state table driven through `rpc`, get's filters, the timeouts and
maxProductsBytes, and AIP's errors. Streams, notifications and the live stack are in
test_aip_stream.py and test_aip_notifications.py."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import orjson
import pytest
from django.utils import timezone

from protocols.dialects.aip import methods
from tasks_app import dispatch, services
from tasks_app.executors import REGISTRY, AgentContext, Executor
from tasks_app.models import StatusChange, Task
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db(transaction=True)

PLANNER = "/agents/acme/planner/aip"
LEADER = "agent-leader-aic"


class Planner(Executor):
    """A Partner whose answer the Leader's words decide: "ask" asks for input, "reject"
    declines, "fail" fails, "big <n>" makes an n-byte product, "slow" works a while; anything
    else is planned: a product, then awaiting the Leader's completion."""

    name = "aip-planner"

    def execute(self, ctx: AgentContext) -> None:
        text = ctx.text
        if text == "reject":
            ctx.reject("抱歉，我的能力范围不包含旅游行程规划")
            return
        if text == "fail":
            ctx.fail("处理任务时发生错误：无法连接到外部数据源。")
            return
        if text == "ask":
            ctx.require_input("需要更多信息：请提供预算范围")
            return
        if text.startswith("big "):
            ctx.complete(artifact="x" * int(text.split()[1]), artifact_id="product-1", name="big")
            return
        if text == "slow":
            ctx.working("working on it")
            time.sleep(1.5)
        ctx.complete(artifact=f"plan for: {text}", artifact_id="product-1", name="北京文化游行程安排")


@pytest.fixture
def planner(tenant, monkeypatch):
    monkeypatch.setitem(REGISTRY, Planner.name, Planner)
    return make_agent(tenant, "planner", Planner.name, streaming=True, push_notifications=True)


def message(command: str, task_id: str, text: str | None = None, **fields: Any) -> dict[str, Any]:
    """A Leader's message as the seed writes them."""
    return {
        "type": "message",
        "id": f"msg-{uuid.uuid4()}",
        "sentAt": "2025-09-01T11:58:00+08:00",
        "senderRole": "leader",
        "senderId": LEADER,
        "command": command,
        "dataItems": [] if text is None else [{"type": "text", "text": text}],
        "taskId": task_id,
        "sessionId": "session-91011",
        **fields,
    }


def aip(client, method: str, params: dict[str, Any], *, key: str | None, path: str = "", request_id: Any = "1"):
    body = orjson.dumps({"jsonrpc": "2.0", "method": method, "id": request_id, "params": params})
    headers = {"X-API-Key": key} if key else {}
    response = client.post(f"{PLANNER}/{path or method}", data=body, content_type="application/json", headers=headers)
    return response.status_code, orjson.loads(response.content)


def rpc(client, key: str, command: str, task_id: str, text: str | None = None, **fields: Any) -> dict[str, Any]:
    status, body = aip(client, "rpc", {"message": message(command, task_id, text, **fields)}, key=key)
    assert status == 200 and "result" in body, body
    return body["result"]


def states(task: dict[str, Any]) -> list[str]:
    return [s["state"] for s in task["statusHistory"]]


def new_id() -> str:
    return f"task-{uuid.uuid4()}"


# --- the seed's examples, replayed -------------------------------------------------------------


def test_the_seeds_start_is_answered_with_the_task_awaiting_completion_and_its_product(client, planner, alice_key):
    task_id = new_id()
    body = message("start", task_id, "请帮我做一个3天北京文化主体游的行程安排。")
    status, answer = aip(client, "rpc", {"message": body}, key=alice_key, request_id="1")
    assert status == 200 and answer["jsonrpc"] == "2.0" and answer["id"] == "1"
    task = answer["result"]
    assert set(task) == {"type", "id", "status", "products", "sessionId"}
    assert task["type"] == "task" and task["id"] == task_id and task["sessionId"] == "session-91011"
    assert task["status"]["state"] == "awaiting-completion"
    assert task["status"]["stateChangedAt"].endswith("+08:00")
    [product] = task["products"]
    assert product["id"] == "product-1" and product["name"] == "北京文化游行程安排"
    assert product["dataItems"] == [{"type": "text", "text": "plan for: 请帮我做一个3天北京文化主体游的行程安排。"}]


def test_the_seeds_continue_get_complete_and_cancel_answer_as_its_examples(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "请帮我做一个3天北京文化主体游的行程安排。")
    again = rpc(client, alice_key, "continue", task_id, "请继续完善行程安排，增加一些能亲自体验的文化活动。")
    # The agent answers at once here; the seed's example shows the working it passes through.
    assert again["status"]["state"] == "awaiting-completion"
    got = rpc(client, alice_key, "get", task_id, commandParams={"lastMessageSentAt": None, "lastStateChangedAt": None})
    assert [m["command"] for m in got["messageHistory"]] == ["start", "continue", "get"]
    first = got["messageHistory"][0]
    assert set(first) == {
        "type",
        "id",
        "sentAt",
        "senderRole",
        "senderId",
        "command",
        "dataItems",
        "taskId",
        "sessionId",
    }
    assert first["senderRole"] == "leader" and first["senderId"] == LEADER and first["taskId"] == task_id
    # A get's null parameters said nothing: the history does not repeat them (as the seed shows).
    assert "commandParams" not in got["messageHistory"][2]
    assert states(got) == ["accepted", "working", "awaiting-completion", "working", "awaiting-completion"]
    done = rpc(client, alice_key, "complete", task_id)
    assert done["status"]["state"] == "completed" and done["id"] == task_id
    assert set(done) == {"type", "id", "status", "products", "sessionId"}
    # Cancel on a completed task is ignored: the answer is the task as it is.
    assert rpc(client, alice_key, "cancel", task_id)["status"]["state"] == "completed"


def test_the_seeds_failed_get_shows_the_failure_in_status_and_history(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "fail")
    got = rpc(client, alice_key, "get", task_id, commandParams={"lastMessageSentAt": None, "lastStateChangedAt": None})
    failure = [{"type": "text", "text": "处理任务时发生错误：无法连接到外部数据源。"}]
    assert got["status"] == {"state": "failed", "stateChangedAt": got["status"]["stateChangedAt"], "dataItems": failure}
    assert states(got) == ["accepted", "working", "failed"]
    assert got["statusHistory"][-1]["dataItems"] == failure
    assert got["products"] == []


# --- the state table, row by row -----------------------------------------------------------------


@pytest.fixture
def idle(monkeypatch):
    """No agent runs: a task stays as it was received."""
    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kwargs: None)


def test_row_1_a_start_is_accepted_when_nothing_runs_it_yet(client, planner, alice_key, idle):
    task = rpc(client, alice_key, "start", new_id(), "plan", commandParams={"responseTimeout": 50})
    assert task["status"]["state"] == "accepted"


def test_row_2_a_rejected_start_was_never_accepted(client, planner, alice_key):
    task_id = new_id()
    task = rpc(client, alice_key, "start", task_id, "reject")
    assert task["status"]["state"] == "rejected"
    assert task["status"]["dataItems"][0]["text"].startswith("抱歉")
    assert states(rpc(client, alice_key, "get", task_id)) == ["rejected"]


def test_rows_3_and_5_accepted_goes_to_working_then_awaiting_completion(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "plan")
    assert states(rpc(client, alice_key, "get", task_id)) == ["accepted", "working", "awaiting-completion"]


@pytest.mark.parametrize("text, expected", [("ask", "awaiting-input"), ("fail", "failed")])
def test_rows_6_and_7_working_goes_to_awaiting_input_or_failed(client, planner, alice_key, text, expected):
    task_id = new_id()
    assert rpc(client, alice_key, "start", task_id, text)["status"]["state"] == expected
    assert states(rpc(client, alice_key, "get", task_id)) == ["accepted", "working", expected]


def test_row_4_an_accepted_task_is_canceled(client, planner, alice_key, idle):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "plan", commandParams={"responseTimeout": 10})
    assert rpc(client, alice_key, "cancel", task_id)["status"]["state"] == "canceled"
    assert states(rpc(client, alice_key, "get", task_id)) == ["accepted", "canceled"]


def test_row_8_a_working_task_is_canceled(client, planner, alice_key, idle):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "plan", commandParams={"responseTimeout": 10})
    task = Task.objects.get(client_task_id=task_id)
    services.task_transition(task_id=task.pk, state="working")
    assert rpc(client, alice_key, "cancel", task_id)["status"]["state"] == "canceled"


def test_rows_9_and_10_awaiting_input_continues_to_working_or_is_canceled(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "ask")
    assert rpc(client, alice_key, "continue", task_id, "预算3000元")["status"]["state"] == "awaiting-completion"
    assert states(rpc(client, alice_key, "get", task_id)) == [
        "accepted",
        "working",
        "awaiting-input",
        "working",
        "awaiting-completion",
    ]
    other = new_id()
    rpc(client, alice_key, "start", other, "ask")
    assert rpc(client, alice_key, "cancel", other)["status"]["state"] == "canceled"


def test_rows_12_13_14_awaiting_completion_completes_continues_or_cancels(client, planner, alice_key):
    for command, expected in [("complete", "completed"), ("continue", "awaiting-completion"), ("cancel", "canceled")]:
        task_id = new_id()
        rpc(client, alice_key, "start", task_id, "plan")
        text = "more" if command == "continue" else None
        assert rpc(client, alice_key, command, task_id, text)["status"]["state"] == expected, command


@pytest.mark.parametrize("text, final", [("plan", "completed"), ("fail", "failed"), ("reject", "rejected")])
def test_rows_16_to_19_terminal_tasks_ignore_every_command(client, planner, alice_key, text, final):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, text)
    if final == "completed":
        rpc(client, alice_key, "complete", task_id)
    before = Task.objects.get(client_task_id=task_id)
    for command in ("start", "continue", "cancel", "complete"):
        answer = rpc(client, alice_key, command, task_id, "again" if command in ("start", "continue") else None)
        assert answer["status"]["state"] == final, command
    after = Task.objects.get(client_task_id=task_id)
    assert (after.state, after.last_seq, after.status_timestamp) == (
        before.state,
        before.last_seq,
        before.status_timestamp,
    )


def test_commands_out_of_their_states_are_ignored(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "ask")  # awaiting-input
    assert rpc(client, alice_key, "complete", task_id)["status"]["state"] == "awaiting-input"
    assert rpc(client, alice_key, "start", task_id, "plan")["status"]["state"] == "awaiting-input"
    assert Task.objects.filter(client_task_id=task_id).count() == 1


# --- the timeouts (rows 11 and 15) and maxProductsBytes ------------------------------------------


def test_row_11_awaiting_input_times_out_to_canceled(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "ask", commandParams={"awaitingInputTimeout": 200})
    time.sleep(0.3)
    assert services.awaiting_expire_due() == 1
    got = rpc(client, alice_key, "get", task_id)
    assert got["status"]["state"] == "canceled"
    assert "awaitingInputTimeout of 200 ms" in got["status"]["dataItems"][0]["text"]


def test_row_15_awaiting_completion_times_out_to_completed(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "plan", commandParams={"awaitingCompletionTimeout": 200})
    task = Task.objects.get(client_task_id=task_id)
    assert services.task_expire_awaiting(task_id=task.pk) == "waiting"
    time.sleep(0.3)
    assert services.task_expire_awaiting(task_id=task.pk) == "expired"
    assert services.task_expire_awaiting(task_id=task.pk) == "moved-on"  # a second run changes nothing
    assert rpc(client, alice_key, "get", task_id)["status"]["state"] == "completed"
    assert StatusChange.objects.filter(task=task, state="completed").count() == 1


def test_a_task_without_timeouts_waits_as_long_as_it_takes(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "ask")
    Task.objects.filter(client_task_id=task_id).update(status_timestamp=timezone.now() - timedelta(days=30))
    assert services.awaiting_expire_due() == 0


def test_products_over_max_products_bytes_fail_the_task_with_the_reason(client, planner, alice_key):
    task_id = new_id()
    task = rpc(client, alice_key, "start", task_id, "big 100", commandParams={"maxProductsBytes": 99})
    assert task["status"]["state"] == "failed" and task["products"] == []
    assert "100 bytes, more than the 99 bytes" in task["status"]["dataItems"][0]["text"]
    within = rpc(client, alice_key, "start", new_id(), "big 99", commandParams={"maxProductsBytes": 99})
    assert within["status"]["state"] == "awaiting-completion"


# --- get's filters ---------------------------------------------------------------------------------


def test_get_shows_only_messages_and_states_newer_than_the_times_given(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "ask")
    whole = rpc(client, alice_key, "get", task_id)
    last_state = whole["statusHistory"][-1]["stateChangedAt"]
    last_sent = whole["messageHistory"][-1]["sentAt"]
    rpc(client, alice_key, "continue", task_id, "预算3000元", sentAt="2025-09-01T12:23:00+08:00")
    since = rpc(
        client,
        alice_key,
        "get",
        task_id,
        sentAt="2025-09-01T12:30:00+08:00",
        commandParams={"lastMessageSentAt": last_sent, "lastStateChangedAt": last_state},
    )
    assert [m["command"] for m in since["messageHistory"]] == ["continue", "get"]
    assert states(since) == ["working", "awaiting-completion"]


# --- errors ----------------------------------------------------------------------------------------


def test_a_command_for_a_task_that_does_not_exist_is_task_not_found_naming_it(client, planner, alice_key):
    status, body = aip(client, "rpc", {"message": message("get", "task-nope")}, key=alice_key)
    assert status == 200
    assert body["error"]["code"] == -32001 and body["error"]["message"] == "Task not found"
    assert body["error"]["data"]["taskId"] == "task-nope" and "task-nope" in body["error"]["data"]["details"]


@pytest.mark.parametrize(
    "change, field",
    [
        ({"senderRole": "partner"}, "senderRole"),
        ({"command": "finish"}, "command"),
        ({"sentAt": "yesterday"}, "sentAt"),
        ({"sentAt": "2025-09-01T11:58:00"}, "sentAt"),
        ({"dataItems": [{"type": "image"}]}, "dataItems[0].type"),
        ({"taskId": ""}, "taskId"),
        ({"type": "task"}, "type"),
    ],
)
def test_a_bad_message_is_invalid_params_naming_the_field(client, planner, alice_key, change, field):
    status, body = aip(client, "rpc", {"message": {**message("start", new_id(), "plan"), **change}}, key=alice_key)
    assert status == 200 and body["error"]["code"] == -32602
    assert body["error"]["message"] == "Invalid method parameters"
    assert f"params.message.{field}" in body["error"]["data"]["details"]


def test_a_caller_without_credentials_is_told_authentication_is_required(client, planner):
    status, body = aip(client, "rpc", {"message": message("start", new_id(), "plan")}, key=None)
    assert status == 401 and body["error"]["code"] == -32008
    assert body["error"]["message"] == "Authentication required"


def test_a_method_sent_to_another_methods_path_is_an_invalid_request(client, planner, alice_key):
    status, body = aip(client, "rpc", {"message": message("start", new_id(), "plan")}, key=alice_key, path="stream")
    assert status == 200 and body["error"]["code"] == -32600


def test_an_unknown_aip_path_is_method_not_found(client, planner, alice_key):
    status, body = aip(client, "rpc", {}, key=alice_key, path="tasks/send")
    assert status == 404 and body["error"]["code"] == -32601


def test_any_method_may_be_posted_to_the_aip_base(client, planner, alice_key):
    body = orjson.dumps(
        {"jsonrpc": "2.0", "method": "rpc", "id": 9, "params": {"message": message("start", new_id(), "hi")}}
    )
    response = client.post(f"{PLANNER}/", data=body, content_type="application/json", headers={"X-API-Key": alice_key})
    assert orjson.loads(response.content)["result"]["status"]["state"] == "awaiting-completion"


def test_group_mode_without_a_group_runner_is_group_not_supported(client, planner, alice_key, monkeypatch):
    monkeypatch.setattr(methods, "_group", [])
    status, body = aip(client, "group", {}, key=alice_key)
    assert body["error"]["code"] == -32007 and body["error"]["message"] == "Group communication is not supported"


# --- across dialects ---------------------------------------------------------------------------------


def test_an_aip_task_is_read_by_a2a_with_its_states_mapped(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "plan")
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}})
    response = client.post(
        "/agents/acme/planner/",
        data=body,
        content_type="application/json",
        headers={"A2A-Version": "1.0", "X-API-Key": alice_key},
    )
    task = orjson.loads(response.content)["result"]
    assert task["id"] == task_id and task["contextId"] == "session-91011"
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["metadata"]["aipState"] == "awaiting-completion"
    assert task["artifacts"][0]["artifactId"] == "product-1"


def test_another_callers_task_is_not_found(client, planner, alice_key, bob_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "plan")
    status, body = aip(client, "rpc", {"message": message("get", task_id)}, key=bob_key)
    assert body["error"]["code"] == -32001
    # And bob's start of the same id is his own task.
    assert rpc(client, bob_key, "start", task_id, "ask")["status"]["state"] == "awaiting-input"
