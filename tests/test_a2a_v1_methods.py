"""A2A 1.0 methods over JSON-RPC: SendMessage, GetTask, ListTasks, CancelTask, and the
task/context rules of the lifecycle document (seed 001)."""

import uuid

import pytest

from tests.conftest import user_message

pytestmark = pytest.mark.django_db(transaction=True)
ECHO = "/agents/acme/echo/"
WRITER = "/agents/acme/writer/"


def test_send_message_blocks_until_the_task_completes(rpc, echo_agent, alice_key):
    task = rpc.send(ECHO, "hi there", key=alice_key).result["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "echo: hi there"}]
    assert task["history"][0]["parts"] == [{"text": "hi there"}]
    assert task["status"]["timestamp"].endswith("Z")


def test_return_immediately_answers_with_the_submitted_task(rpc, echo_agent, alice_key, monkeypatch):
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)  # nobody runs the agent
    task = rpc.send(ECHO, key=alice_key, configuration={"returnImmediately": True}).result["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert "artifacts" not in task


def test_the_server_generates_task_and_context_ids(rpc, echo_agent, alice_key):
    task = rpc.send(ECHO, key=alice_key).result["task"]
    uuid.UUID(task["id"])
    uuid.UUID(task["contextId"])
    assert task["history"][0]["taskId"] == task["id"]


def test_a_given_context_id_is_kept_and_groups_tasks(rpc, echo_agent, alice_key):
    first = rpc.send(ECHO, key=alice_key, contextId="ctx-1").result["task"]
    second = rpc.send(ECHO, key=alice_key, contextId="ctx-1").result["task"]
    assert first["contextId"] == second["contextId"] == "ctx-1"
    assert first["id"] != second["id"]


def test_message_ids_may_be_reused(rpc, echo_agent, alice_key):
    a = rpc.send(ECHO, key=alice_key, messageId="same").result["task"]
    b = rpc.send(ECHO, key=alice_key, messageId="same").result["task"]
    assert a["id"] != b["id"]


def test_reference_task_ids_are_stored(rpc, echo_agent, alice_key):
    first = rpc.send(ECHO, key=alice_key).result["task"]
    second = rpc.send(ECHO, key=alice_key, referenceTaskIds=[first["id"]]).result["task"]
    fetched = rpc(ECHO, "GetTask", {"id": second["id"]}, key=alice_key).result
    assert fetched["history"][0]["referenceTaskIds"] == [first["id"]]


def test_an_ambiguous_request_asks_for_input_and_the_follow_up_continues_the_task(rpc, writer_agent, alice_key):
    asked = rpc.send(WRITER, "write something", key=alice_key).result["task"]
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert "topic" in asked["status"]["message"]["parts"][0]["text"]
    done = rpc.send(WRITER, "a haiku about the sea", key=alice_key, taskId=asked["id"]).result["task"]
    assert done["id"] == asked["id"]
    assert done["contextId"] == asked["contextId"]  # taken from the task: the follow-up named none
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["role"] for m in done["history"]] == [
        "ROLE_USER",
        "ROLE_AGENT",
        "ROLE_USER",
        "ROLE_AGENT",
        "ROLE_AGENT",
        "ROLE_AGENT",
    ]
    text = "".join(p["text"] for p in done["artifacts"][0]["parts"])
    assert text.startswith("The sea drifts slowly,")


def test_a_follow_up_with_a_contradicting_context_is_rejected(rpc, writer_agent, alice_key):
    asked = rpc.send(WRITER, "write something", key=alice_key).result["task"]
    error = rpc.send(WRITER, "a poem about x", key=alice_key, taskId=asked["id"], contextId="other").error
    assert error["code"] == -32602
    assert "does not match" in error["message"]
    still = rpc(WRITER, "GetTask", {"id": asked["id"]}, key=alice_key).result
    assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert len(still["history"]) == 2  # nothing of the refused message was stored


def test_a_follow_up_to_an_unknown_task_is_task_not_found(rpc, echo_agent, alice_key):
    error = rpc.send(ECHO, key=alice_key, taskId=str(uuid.uuid4())).error
    assert error["code"] == -32001


def test_history_length_limits_the_history_returned(rpc, writer_agent, alice_key):
    asked = rpc.send(WRITER, "write something", key=alice_key).result["task"]
    rpc.send(WRITER, "a poem about rain", key=alice_key, taskId=asked["id"])
    one = rpc(WRITER, "GetTask", {"id": asked["id"], "historyLength": 1}, key=alice_key).result
    none = rpc(WRITER, "GetTask", {"id": asked["id"], "history_length": 0}, key=alice_key).result
    full = rpc(WRITER, "GetTask", {"id": asked["id"]}, key=alice_key).result
    assert len(one["history"]) == 1 and one["history"][0] == full["history"][-1]
    assert "history" not in none
    assert len(full["history"]) > 2


def test_send_message_applies_history_length_to_the_task_it_returns(rpc, echo_agent, alice_key):
    task = rpc.send(ECHO, key=alice_key, configuration={"historyLength": 0}).result["task"]
    assert "history" not in task


def test_accepted_output_modes_reach_the_agent(rpc, tenant, alice_key):
    from tasks_app.models import Task
    from tests.conftest import make_agent

    make_agent(tenant, "echo", "echo")
    task = rpc.send(ECHO, key=alice_key, configuration={"acceptedOutputModes": ["text/plain"]}).result["task"]
    assert Task.objects.get(pk=task["id"]).accepted_output_modes == ["text/plain"]


def test_a_bare_message_reply_is_returned_as_a_message(rpc, conformance_agent):
    result = rpc.send("/agents/acme/conformance/", messageId="tck-message-response-1").result
    assert "task" not in result
    assert result["message"]["role"] == "ROLE_AGENT"
    assert result["message"]["parts"] == [{"text": "Direct message response"}]
    assert rpc("/agents/acme/conformance/", "ListTasks", {}).result["tasks"] == []


def test_cancel_turns_a_waiting_task_into_canceled(rpc, writer_agent, alice_key):
    asked = rpc.send(WRITER, "write something", key=alice_key).result["task"]
    canceled = rpc(WRITER, "CancelTask", {"id": asked["id"]}, key=alice_key).result
    assert canceled["id"] == asked["id"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    again = rpc(WRITER, "GetTask", {"id": asked["id"]}, key=alice_key).result
    assert again["status"]["state"] == "TASK_STATE_CANCELED"


# --- ListTasks --------------------------------------------------------------------------------


def _send_many(rpc, key, n, **fields):
    return [rpc.send(ECHO, f"m{i}", key=key, **fields).result["task"]["id"] for i in range(n)]


def test_list_tasks_pages_newest_first_with_opaque_tokens(rpc, echo_agent, alice_key):
    ids = _send_many(rpc, alice_key, 5)
    seen, token, pages = [], "", 0
    while True:
        page = rpc(ECHO, "ListTasks", {"pageSize": 2, "pageToken": token}, key=alice_key).result
        assert page["totalSize"] == 5 and page["pageSize"] == 2
        assert "nextPageToken" in page
        seen += [t["id"] for t in page["tasks"]]
        pages += 1
        token = page["nextPageToken"]
        if not token:
            break
    assert pages == 3
    assert seen == list(reversed(ids))


def test_list_tasks_shows_only_the_callers_tasks(rpc, echo_agent, alice_key, bob_key):
    mine = _send_many(rpc, alice_key, 2)
    _send_many(rpc, bob_key, 3)
    page = rpc(ECHO, "ListTasks", {}, key=alice_key).result
    assert sorted(t["id"] for t in page["tasks"]) == sorted(mine)
    assert page["totalSize"] == 2 and page["nextPageToken"] == ""


def test_list_tasks_filters_by_context_state_and_time(rpc, writer_agent, echo_agent, alice_key):
    in_ctx = _send_many(rpc, alice_key, 2, contextId="ctx-a")
    _send_many(rpc, alice_key, 1, contextId="ctx-b")
    waiting = rpc.send(WRITER, "write something", key=alice_key).result["task"]
    by_ctx = rpc(ECHO, "ListTasks", {"contextId": "ctx-a"}, key=alice_key).result
    assert sorted(t["id"] for t in by_ctx["tasks"]) == sorted(in_ctx)
    by_state = rpc(WRITER, "ListTasks", {"status": "TASK_STATE_INPUT_REQUIRED"}, key=alice_key).result
    assert [t["id"] for t in by_state["tasks"]] == [waiting["id"]]
    after = rpc(ECHO, "ListTasks", {"statusTimestampAfter": waiting["status"]["timestamp"]}, key=alice_key).result
    assert after["tasks"] == []


def test_list_tasks_omits_artifacts_unless_asked_and_limits_history(rpc, echo_agent, alice_key):
    _send_many(rpc, alice_key, 1)
    plain = rpc(ECHO, "ListTasks", {}, key=alice_key).result["tasks"][0]
    rich = rpc(ECHO, "ListTasks", {"includeArtifacts": True, "historyLength": 0}, key=alice_key).result["tasks"][0]
    assert "artifacts" not in plain and plain["history"]
    assert rich["artifacts"][0]["parts"] == [{"text": "echo: m0"}] and "history" not in rich


def test_get_task_of_another_caller_looks_like_a_missing_task(rpc, echo_agent, alice_key, bob_key):
    task_id = _send_many(rpc, alice_key, 1)[0]
    assert rpc(ECHO, "GetTask", {"id": task_id}, key=bob_key).error["code"] == -32001
    assert rpc(ECHO, "CancelTask", {"id": task_id}, key=bob_key).error["code"] == -32001
    follow_up = rpc(ECHO, "SendMessage", {"message": user_message(taskId=task_id)}, key=bob_key)
    assert follow_up.error["code"] == -32001


def test_a_blocking_wait_polls_only_the_state_and_reads_the_task_once(
    rpc, echo_agent, alice_key, monkeypatch, settings
):
    """Nobody runs the agent: the wait polls until its timeout, then answers with the task as it is."""
    from tasks_app import dispatch, selectors

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    settings.A2A_BLOCKING_TIMEOUT, settings.HINT_FALLBACK_POLL = 1.0, 0.2
    calls = {"state": 0, "view": 0}
    state, view = selectors.task_state, selectors.task_with_view
    monkeypatch.setattr(selectors, "task_state", lambda *a: calls.__setitem__("state", calls["state"] + 1) or state(*a))
    monkeypatch.setattr(
        selectors, "task_with_view", lambda *a, **k: calls.__setitem__("view", calls["view"] + 1) or view(*a, **k)
    )
    task = rpc.send(ECHO, key=alice_key).result["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert calls["state"] >= 3 and calls["view"] == 1


def test_a_task_id_in_another_spelling_of_its_uuid_finds_the_task(rpc, echo_agent, alice_key):
    task = rpc.send("/agents/acme/echo/", key=alice_key).result["task"]
    fetched = rpc("/agents/acme/echo/", "GetTask", {"id": f"urn:uuid:{task['id'].upper()}"}, key=alice_key).result
    assert fetched["id"] == task["id"]


def test_a_row_written_before_values_were_checked_still_reads_in_get_and_list(rpc, echo_agent, alice_key):
    from tasks_app.models import Message

    # Before accounts.storable, the store took values no encoder could write back (orjson
    # stops at 254 levels and 64-bit integers), and one such task failed every ListTasks.
    deep: list = []
    for _ in range(300):
        deep = [deep]
    task = rpc.send(ECHO, key=alice_key).result["task"]
    Message.objects.filter(task_id=task["id"]).update(parts=[{"type": "data", "data": deep}], metadata={"n": 2**70})
    read = rpc(ECHO, "GetTask", {"id": task["id"]}, key=alice_key).result
    assert read["history"][0]["parts"] == [{"data": deep}] and read["history"][0]["metadata"] == {"n": 2**70}
    listed = rpc(ECHO, "ListTasks", {"historyLength": 1}, key=alice_key).result["tasks"]
    assert [t["id"] for t in listed] == [task["id"]]
