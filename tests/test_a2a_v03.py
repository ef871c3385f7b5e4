"""A2A 0.3 over JSON-RPC (protocols/dialects/a2a_v03): every method, its shapes (`kind`
everywhere, lowercase states, nested file parts, `final`), its errors, its card, push in its
form, and tasks read across dialects. Requests carry no A2A-Version header, as 0.3 clients
send them; seed 002's example requests are replayed as the document writes them."""

from __future__ import annotations

import base64
import copy
import uuid
from typing import Any

import orjson
import pytest
from asgiref.sync import async_to_sync

from tasks_app.models import Task
from tests.conftest import drain_push_jobs, make_agent, user_message, user_message_v03

pytestmark = pytest.mark.django_db(transaction=True)
ECHO = "/agents/acme/echo/"
WRITER = "/agents/acme/writer/"
CONFORMANCE = "/agents/acme/conformance/"
HOOK = "http://127.0.0.1:9/hook"  # allow-listed in the tests; nothing is delivered there
KONAMI = "https://example.com/ext/konami-code/v1"

# Seed 002 (A2A extensions, the 0.3 document), its example request, as written there.
SEED_002_REQUEST = {
    "jsonrpc": "2.0",
    "method": "message/send",
    "id": "1",
    "params": {
        "message": {
            "kind": "message",
            "messageId": "1",
            "role": "user",
            "parts": [{"kind": "text", "text": "Oh magic 8-ball, will it rain today?"}],
        },
        "metadata": {"https://example.com/ext/konami-code/v1/code": "motherlode"},
    },
}
# Its card's extension, as the seed declares it.
KONAMI_EXTENSION = {
    "uri": KONAMI,
    "description": "Provide cheat codes to unlock new fortunes",
    "required": False,
    "params": {
        "hints": [
            "When your sims need extra cash fast",
            "You might deny it, but we've seen the evidence of those cows.",
        ]
    },
}
STATES = {"submitted", "working", "input-required", "auth-required", "completed", "canceled", "failed", "rejected"}


def seed_request(message_id: str) -> dict[str, Any]:
    """Seed 002's request, ids aside."""
    request = copy.deepcopy(SEED_002_REQUEST)
    request["params"]["message"]["messageId"] = message_id
    return request


def kinds_everywhere(value: Any) -> None:
    """Every task, message and part in `value` names its kind, and every state is 0.3's."""
    if isinstance(value, dict):
        if "messageId" in value and "role" in value:
            assert value["kind"] == "message" and value["role"] in ("user", "agent"), value
        if "parts" in value:
            for part in value["parts"]:
                assert part["kind"] in ("text", "file", "data"), part
        if "status" in value and "contextId" in value and "id" in value:
            assert value["kind"] == "task", value
        if "state" in value:
            assert value["state"] in STATES, value
        for item in value.values():
            kinds_everywhere(item)
    elif isinstance(value, list):
        for item in value:
            kinds_everywhere(item)


def stream(rpc03, path: str, method: str, params: dict, *, key: str | None) -> list[dict[str, Any]]:
    """The JSON-RPC responses of a streamed answer (Django's client hands the stream over unread)."""
    hdrs = {"X-API-Key": key} if key else {}
    body = orjson.dumps({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params})
    response = rpc03.client.post(path, data=body, content_type="application/json", headers=hdrs)
    if not response.streaming:
        return [orjson.loads(response.content)]
    assert response["Content-Type"].startswith("text/event-stream")

    async def drained() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    raw = async_to_sync(drained)()
    events = []
    for frame in raw.split(b"\n\n"):
        data = [line[5:].strip() for line in frame.split(b"\n") if line.startswith(b"data:")]
        if data:
            events.append(orjson.loads(data[0]))
    return events


# --- message/send ---------------------------------------------------------------------------


def test_seed_002s_request_is_answered_with_the_agents_message_and_the_extension_echoed(rpc03, tenant):
    make_agent(tenant, "conformance", "conformance", is_public=True, extensions=[KONAMI_EXTENSION])
    body = orjson.dumps(seed_request("tck-message-response-002"))
    response = rpc03.raw(CONFORMANCE, body, headers={"A2A-Extensions": KONAMI})
    assert response.status == 200
    assert response.body["jsonrpc"] == "2.0" and response.body["id"] == "1"
    result = response.result
    assert result["kind"] == "message"
    assert result["role"] == "agent"
    assert result["parts"] == [{"kind": "text", "text": "Direct message response"}]
    assert result["messageId"] and "taskId" not in result
    # The activated extension is echoed, under 1.0's name and 0.3's X- name.
    assert response.headers["A2A-Extensions"] == KONAMI
    assert response.headers["X-A2A-Extensions"] == KONAMI


def test_seed_002s_request_to_a_task_agent_completes_a_task_in_0_3s_shape(rpc03, echo_agent, alice_key):
    result = rpc03.raw(ECHO, orjson.dumps(seed_request("msg-1")), key=alice_key).result
    assert result["kind"] == "task"
    uuid.UUID(result["id"])
    uuid.UUID(result["contextId"])
    assert result["status"]["state"] == "completed"
    assert result["status"]["timestamp"].endswith("Z")
    assert result["artifacts"][0]["parts"] == [{"kind": "text", "text": "echo: Oh magic 8-ball, will it rain today?"}]
    (asked,) = result["history"]
    assert asked == {
        "kind": "message",
        "messageId": "msg-1",
        "contextId": result["contextId"],
        "taskId": result["id"],
        "role": "user",
        "parts": [{"kind": "text", "text": "Oh magic 8-ball, will it rain today?"}],
    }
    assert result["metadata"] == {"https://example.com/ext/konami-code/v1/code": "motherlode"}
    kinds_everywhere(result)
    assert Task.objects.get(pk=result["id"]).dialect == "a2a/0.3"


def test_a_required_extension_not_activated_is_an_invalid_request_naming_it(rpc03, tenant):
    make_agent(
        tenant, "conformance", "conformance", is_public=True, extensions=[{**KONAMI_EXTENSION, "required": True}]
    )
    response = rpc03.raw(CONFORMANCE, orjson.dumps(seed_request("tck-message-response-1")))
    assert response.error["code"] == -32600  # 0.3 has no ExtensionSupportRequired (1.0's -32008)
    assert KONAMI in response.error["message"]
    assert response.error["data"] == {"reason": "EXTENSION_SUPPORT_REQUIRED", "domain": "a2a-protocol.org"}
    activated = rpc03.raw(
        CONFORMANCE, orjson.dumps(seed_request("tck-message-response-2")), headers={"A2A-Extensions": KONAMI}
    )
    assert activated.result["kind"] == "message"


def test_a_non_blocking_send_answers_at_once_with_the_submitted_task(rpc03, echo_agent, alice_key, monkeypatch):
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)  # nobody runs the agent
    task = rpc03.send(ECHO, key=alice_key, configuration={"blocking": False}).result
    assert task["kind"] == "task" and task["status"]["state"] == "submitted"
    assert "artifacts" not in task and task["history"][0]["parts"] == [{"kind": "text", "text": "hello"}]


def test_blocking_is_the_default_and_blocking_true_waits_as_well(rpc03, echo_agent, alice_key):
    assert rpc03.send(ECHO, key=alice_key).result["status"]["state"] == "completed"
    waited = rpc03.send(ECHO, key=alice_key, configuration={"blocking": True}).result
    assert waited["status"]["state"] == "completed"


def test_history_length_limits_the_history_and_zero_means_all_as_in_0_3(rpc03, writer_agent, alice_key):
    asked = rpc03.send(WRITER, "write something", key=alice_key).result
    assert asked["status"]["state"] == "input-required"
    assert "What should I write?" in asked["status"]["message"]["parts"][0]["text"]
    done = rpc03.send(
        WRITER, "a haiku about the sea", key=alice_key, taskId=asked["id"], configuration={"historyLength": 1}
    ).result
    assert done["status"]["state"] == "completed" and len(done["history"]) == 1
    full = rpc03(WRITER, "tasks/get", {"id": asked["id"]}, key=alice_key).result
    one = rpc03(WRITER, "tasks/get", {"id": asked["id"], "historyLength": 1}, key=alice_key).result
    zero = rpc03(WRITER, "tasks/get", {"id": asked["id"], "historyLength": 0}, key=alice_key).result
    assert len(full["history"]) > 2 and one["history"] == full["history"][-1:] and zero["history"] == full["history"]
    assert [m["role"] for m in full["history"][:3]] == ["user", "agent", "user"]
    kinds_everywhere(full)


def test_accepted_output_modes_reach_the_agent_and_ones_it_cannot_give_are_refused(rpc03, echo_agent, alice_key):
    task = rpc03.send(ECHO, key=alice_key, configuration={"acceptedOutputModes": ["text/plain"]}).result
    assert Task.objects.get(pk=task["id"]).accepted_output_modes == ["text/plain"]
    refused = rpc03.send(ECHO, key=alice_key, configuration={"acceptedOutputModes": ["image/png"]}).error
    assert refused["code"] == -32005 and refused["data"]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"


def test_file_and_data_parts_travel_in_0_3s_nested_form(rpc03, tenant, alice_key):
    make_agent(tenant, "echo", "echo", input_modes=["text/plain", "application/octet-stream"])
    raw = base64.b64encode(b"file body").decode()
    parts = [
        {"kind": "file", "file": {"bytes": raw, "mimeType": "text/plain", "name": "a.txt"}},
        {"kind": "file", "file": {"uri": "https://files.example/b.txt", "mimeType": "text/plain"}},
        {"kind": "data", "data": {"n": 1}, "metadata": {"m": True}},
    ]
    message = {**user_message_v03(), "parts": parts}
    task = rpc03(ECHO, "message/send", {"message": message}, key=alice_key).result
    assert task["history"][0]["parts"] == parts
    # The same task through 1.0: the parts in 1.0's form.
    v1 = rpc03(ECHO, "GetTask", {"id": task["id"]}, key=alice_key, headers={"A2A-Version": "1.0"}).result
    assert v1["history"][0]["parts"] == [
        {"raw": raw, "mediaType": "text/plain", "filename": "a.txt"},
        {"url": "https://files.example/b.txt", "mediaType": "text/plain"},
        {"data": {"n": 1}, "metadata": {"m": True}},
    ]


def test_a_data_part_that_is_not_an_object_travels_wrapped_as_the_sdk_writes_it(rpc, rpc03, echo_agent, alice_key):
    sent = rpc(ECHO, "SendMessage", {"message": {**user_message(), "parts": [{"data": [1, 2]}]}}, key=alice_key)
    task_id = sent.result["task"]["id"]
    read = rpc03(ECHO, "tasks/get", {"id": task_id}, key=alice_key).result
    assert read["history"][0]["parts"] == [
        {"kind": "data", "data": {"value": [1, 2]}, "metadata": {"data_part_compat": True}}
    ]
    # And back: a 0.3 client sending that form means the bare value.
    message = {**user_message_v03(), "parts": read["history"][0]["parts"]}
    again = rpc03(ECHO, "message/send", {"message": message}, key=alice_key).result
    v1 = rpc(ECHO, "GetTask", {"id": again["id"]}, key=alice_key).result
    assert v1["history"][0]["parts"] == [{"data": [1, 2]}]


# --- reading across dialects -------------------------------------------------------------------


def test_a_task_created_in_1_0_reads_in_0_3_and_one_created_in_0_3_reads_in_1_0(rpc, rpc03, writer_agent, alice_key):
    v1 = rpc.send(WRITER, "write something", key=alice_key).result["task"]
    assert v1["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    as_03 = rpc03(WRITER, "tasks/get", {"id": v1["id"]}, key=alice_key).result
    assert (as_03["kind"], as_03["id"], as_03["contextId"]) == ("task", v1["id"], v1["contextId"])
    assert as_03["status"]["state"] == "input-required"
    assert as_03["status"]["timestamp"] == v1["status"]["timestamp"]
    assert [m["role"] for m in as_03["history"]] == ["user", "agent"]
    assert as_03["history"][0]["parts"] == [{"kind": "text", "text": "write something"}]
    assert as_03["history"][0]["messageId"] == v1["history"][0]["messageId"]

    v03 = rpc03.send(WRITER, "a haiku about cats", key=alice_key).result
    as_1 = rpc(WRITER, "GetTask", {"id": v03["id"]}, key=alice_key).result
    assert (as_1["id"], as_1["contextId"]) == (v03["id"], v03["contextId"])
    assert as_1["status"]["state"] == "TASK_STATE_COMPLETED" and v03["status"]["state"] == "completed"
    assert as_1["history"][0]["role"] == "ROLE_USER" and as_1["history"][0]["parts"] == [{"text": "a haiku about cats"}]
    assert [a["artifactId"] for a in as_1["artifacts"]] == [a["artifactId"] for a in v03["artifacts"]]
    assert "".join(p["text"] for p in as_1["artifacts"][0]["parts"]) == "".join(
        p["text"] for p in v03["artifacts"][0]["parts"]
    )


def test_a_0_3_follow_up_continues_a_task_created_in_1_0(rpc, rpc03, writer_agent, alice_key):
    v1 = rpc.send(WRITER, "write something", key=alice_key).result["task"]
    done = rpc03.send(WRITER, "a haiku about rain", key=alice_key, taskId=v1["id"]).result
    assert done["id"] == v1["id"] and done["status"]["state"] == "completed"


# --- tasks/get, tasks/cancel --------------------------------------------------------------------


def test_get_of_an_unknown_or_another_callers_task_is_task_not_found(rpc03, echo_agent, alice_key, bob_key):
    task = rpc03.send(ECHO, key=alice_key).result
    for task_id, key in ((str(uuid.uuid4()), alice_key), (task["id"], bob_key)):
        error = rpc03(ECHO, "tasks/get", {"id": task_id}, key=key).error
        assert error["code"] == -32001 and task_id in error["message"]
        assert error["data"] == {"reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org"}


def test_cancel_cancels_a_waiting_task_and_a_second_cancel_is_not_cancelable(rpc03, writer_agent, alice_key):
    asked = rpc03.send(WRITER, "write something", key=alice_key).result
    canceled = rpc03(WRITER, "tasks/cancel", {"id": asked["id"]}, key=alice_key).result
    assert canceled["kind"] == "task" and canceled["id"] == asked["id"]
    assert canceled["status"]["state"] == "canceled"
    again = rpc03(WRITER, "tasks/cancel", {"id": asked["id"]}, key=alice_key).error
    assert again["code"] == -32002 and again["data"]["reason"] == "TASK_NOT_CANCELABLE"
    assert rpc03(WRITER, "tasks/get", {"id": asked["id"]}, key=alice_key).result["status"]["state"] == "canceled"


# --- streams ---------------------------------------------------------------------------------------


def test_message_stream_sends_the_task_then_its_events_and_the_last_is_final(rpc03, writer_agent, alice_key):
    events = stream(rpc03, WRITER, "message/stream", {"message": user_message_v03("a haiku about snow")}, key=alice_key)
    results = [e["result"] for e in events]
    assert all(e["id"] == "s-1" and e["jsonrpc"] == "2.0" for e in events)
    assert results[0]["kind"] == "task" and results[0]["status"]["state"] == "submitted"
    kinds = [r["kind"] for r in results[1:]]
    assert kinds[:2] == ["status-update", "status-update"] and kinds[-1] == "status-update"
    assert set(kinds[2:-1]) == {"artifact-update"} and len(kinds) > 4
    statuses = [r for r in results if r["kind"] == "status-update"]
    assert [s["final"] for s in statuses] == [False, False, True]
    assert statuses[-1]["status"]["state"] == "completed"
    chunks = [(r["append"], r["lastChunk"]) for r in results if r["kind"] == "artifact-update"]
    assert chunks[0] == (False, False) and chunks[-1] == (True, True)
    assert set(chunks[1:-1]) <= {(True, False)}
    assert {r["taskId"] for r in results[1:]} == {results[0]["id"]}
    kinds_everywhere(results)


def test_a_stream_that_stops_for_input_ends_with_a_final_input_required_event(rpc03, writer_agent, alice_key):
    events = stream(rpc03, WRITER, "message/stream", {"message": user_message_v03("write")}, key=alice_key)
    last = events[-1]["result"]
    assert last["kind"] == "status-update" and last["status"]["state"] == "input-required" and last["final"] is True


def test_a_bare_reply_streams_as_one_message(rpc03, conformance_agent):
    message = user_message_v03(messageId="tck-message-response-s")
    (event,) = stream(rpc03, CONFORMANCE, "message/stream", {"message": message}, key=None)
    assert event["result"]["kind"] == "message" and event["result"]["role"] == "agent"


def test_resubscribe_replays_after_a_last_event_id_and_marks_the_terminal_event_final(rpc03, writer_agent, alice_key):
    done = rpc03.send(WRITER, "a haiku about snow", key=alice_key).result
    events = stream(rpc03, WRITER, "tasks/resubscribe", {"id": done["id"], "lastEventId": "1"}, key=alice_key)
    results = [e["result"] for e in events]
    assert results[0]["kind"] == "status-update" and results[0]["status"]["state"] == "working"
    assert results[-1]["status"]["state"] == "completed" and results[-1]["final"] is True
    assert all(not r.get("final") for r in results[:-1])


def test_resubscribe_to_a_finished_task_without_a_last_event_id_is_unsupported(rpc03, echo_agent, alice_key):
    done = rpc03.send(ECHO, key=alice_key).result
    (answer,) = stream(rpc03, ECHO, "tasks/resubscribe", {"id": done["id"]}, key=alice_key)
    assert answer["error"]["code"] == -32004


def error_stream(rpc03, path: str, method: str, params: dict, *, key: str | None) -> dict[str, Any]:
    """The one error of a stream method's answer, which must be a stream however it went."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params})
    response = rpc03.client.post(path, data=body, content_type="application/json", headers={"X-API-Key": key})
    assert response.status_code == 200 and response.streaming, response
    assert response["Content-Type"].startswith("text/event-stream")
    (event,) = stream(rpc03, path, method, params, key=key)
    assert event["id"] == "s-1" and "result" not in event
    return event["error"]


def test_resubscribe_to_a_missing_task_is_a_stream_of_its_one_error(rpc03, echo_agent, alice_key):
    error = error_stream(rpc03, ECHO, "tasks/resubscribe", {"id": str(uuid.uuid4())}, key=alice_key)
    assert error["code"] == -32001 and "not found" in error["message"]


@pytest.mark.parametrize(
    ("method", "params", "code", "fragment"),
    [
        ("message/stream", {"message": {"kind": "message"}}, -32602, "params.message"),
        ("message/stream", {"message": user_message_v03(taskId=str(uuid.uuid4()))}, -32001, "not found"),
        ("tasks/resubscribe", {"id": "x", "lastEventId": "x"}, -32602, "lastEventId must be an event id"),
    ],
)
def test_a_stream_method_that_cannot_start_answers_with_a_stream_of_its_error(
    rpc03, echo_agent, alice_key, method, params, code, fragment
):
    error = error_stream(rpc03, ECHO, method, params, key=alice_key)
    assert error["code"] == code and fragment in error["message"], error


def test_message_stream_to_a_finished_task_is_a_stream_of_its_error_and_stores_nothing(rpc03, echo_agent, alice_key):
    done = rpc03.send(ECHO, key=alice_key).result
    before = Task.objects.get(pk=done["id"]).last_seq
    follow_up = {"message": user_message_v03(taskId=done["id"])}
    assert error_stream(rpc03, ECHO, "message/stream", follow_up, key=alice_key)["code"] == -32004
    assert Task.objects.get(pk=done["id"]).last_seq == before


def test_streaming_off_is_unsupported_operation(rpc03, tenant, alice_key):
    make_agent(tenant, "echo", "echo", streaming=False)
    (answer,) = stream(rpc03, ECHO, "message/stream", {"message": user_message_v03()}, key=alice_key)
    assert answer["error"]["code"] == -32004 and "streaming" in answer["error"]["message"]


# --- push notification configs -----------------------------------------------------------------


def test_push_configs_set_get_list_and_delete(rpc03, echo_agent, alice_key):
    task_id = rpc03.send(ECHO, key=alice_key).result["id"]
    config = {
        "id": "mine",
        "url": HOOK,
        "token": "t0ken",
        "authentication": {"schemes": ["Bearer"], "credentials": "s3cret"},
    }
    set_ = rpc03(
        ECHO, "tasks/pushNotificationConfig/set", {"taskId": task_id, "pushNotificationConfig": config}, key=alice_key
    ).result
    shown = {**config, "authentication": {"schemes": ["Bearer"], "credentials": "[redacted]"}}
    assert set_ == {"taskId": task_id, "pushNotificationConfig": shown}
    by_id = {"id": task_id, "pushNotificationConfigId": "mine"}
    assert rpc03(ECHO, "tasks/pushNotificationConfig/get", by_id, key=alice_key).result == set_
    assert rpc03(ECHO, "tasks/pushNotificationConfig/get", {"id": task_id}, key=alice_key).result == set_
    assert rpc03(ECHO, "tasks/pushNotificationConfig/list", {"id": task_id}, key=alice_key).result == [set_]
    assert rpc03(ECHO, "tasks/pushNotificationConfig/delete", by_id, key=alice_key).result is None
    assert rpc03(ECHO, "tasks/pushNotificationConfig/list", {"id": task_id}, key=alice_key).result == []
    gone = rpc03(ECHO, "tasks/pushNotificationConfig/get", by_id, key=alice_key).error
    assert gone["code"] == -32001


def test_a_config_set_without_an_id_is_the_tasks_own_default_and_setting_again_replaces_it(
    rpc03, echo_agent, alice_key
):
    task_id = rpc03.send(ECHO, key=alice_key).result["id"]
    for url in (HOOK, "http://127.0.0.1:9/moved"):
        params = {"taskId": task_id, "pushNotificationConfig": {"url": url}}
        result = rpc03(ECHO, "tasks/pushNotificationConfig/set", params, key=alice_key).result
        assert result["pushNotificationConfig"] == {"id": "default", "url": url}
    listed = rpc03(ECHO, "tasks/pushNotificationConfig/list", {"id": task_id}, key=alice_key).result
    assert [c["pushNotificationConfig"]["url"] for c in listed] == ["http://127.0.0.1:9/moved"]
    # The official 0.3 suite reads it back by that name, and a 0.3 SDK by the task's id alone.
    by_name = {"id": task_id, "pushNotificationConfigId": "default"}
    assert rpc03(ECHO, "tasks/pushNotificationConfig/get", by_name, key=alice_key).result == listed[0]
    assert rpc03(ECHO, "tasks/pushNotificationConfig/get", {"id": task_id}, key=alice_key).result == listed[0]


def test_push_configs_on_an_agent_without_push_are_push_notification_not_supported(rpc03, tenant, alice_key):
    make_agent(tenant, "echo", "echo", push_notifications=False)
    task_id = rpc03.send(ECHO, key=alice_key).result["id"]
    error = rpc03(ECHO, "tasks/pushNotificationConfig/get", {"id": task_id}, key=alice_key).error
    assert error["code"] == -32003 and error["data"]["reason"] == "PUSH_NOTIFICATION_NOT_SUPPORTED"
    inline = {"pushNotificationConfig": {"url": HOOK}}
    assert rpc03.send(ECHO, key=alice_key, configuration=inline).error["code"] == -32003


def test_a_task_created_in_0_3_is_pushed_as_0_3_writes_a_task(rpc03, writer_agent, alice_key, receiver, push_jobs):
    inline = {"url": receiver.url(), "token": "tok", "authentication": {"schemes": ["Bearer"], "credentials": "c"}}
    task = rpc03.send(WRITER, "a haiku about rivers", key=alice_key, configuration={"pushNotificationConfig": inline})
    task = task.result
    drain_push_jobs(push_jobs)
    last_seq = Task.objects.get(pk=task["id"]).last_seq
    assert [r.seq for r in receiver.requests] == list(range(1, last_seq + 1))
    for request in receiver.requests:
        assert request.headers["authorization"] == "Bearer c"
        assert request.headers["x-a2a-notification-token"] == "tok"
        body = request.json
        assert body["kind"] == "task" and body["id"] == task["id"] and body["contextId"] == task["contextId"]
        kinds_everywhere(body)
    # The body is the task as it is when sent: here, done.
    assert receiver.requests[-1].json["status"]["state"] == "completed"
    assert receiver.requests[-1].json["artifacts"] == task["artifacts"]


def test_a_task_created_in_1_0_is_still_pushed_as_1_0_writes_its_events(
    rpc, echo_agent, alice_key, receiver, push_jobs
):
    inline = {"url": receiver.url()}
    rpc.send(ECHO, key=alice_key, configuration={"taskPushNotificationConfig": inline})
    drain_push_jobs(push_jobs)
    assert next(iter(receiver.requests[0].json)) == "statusUpdate"


# --- the card -------------------------------------------------------------------------------------------


def test_the_card_asked_for_in_0_3_is_0_3s_and_the_default_stays_1_0s(client, tenant, alice_key):
    from a2a.client.card_resolver import parse_agent_card
    from a2a.compat.v0_3 import types as types_v03

    make_agent(tenant, "echo", "echo", extensions=[KONAMI_EXTENSION])
    path = "/agents/acme/echo/.well-known/agent-card.json"
    default = client.get(path)
    assert "supportedInterfaces" in default.json() and "url" not in default.json()
    assert default["Vary"] == "A2A-Version"
    for asked in (client.get(path, headers={"A2A-Version": "0.3"}), client.get(path + "?A2A-Version=0.3.0")):
        card = asked.json()
        assert card["protocolVersion"] == "0.3.0"
        assert card["url"] == "http://testserver/agents/acme/echo/"
        assert card["preferredTransport"] == "JSONRPC"
        assert card["additionalInterfaces"] == [{"url": card["url"], "transport": "JSONRPC"}]
        assert card["capabilities"] == {
            "streaming": True,
            "pushNotifications": True,
            "stateTransitionHistory": False,
            "extensions": [KONAMI_EXTENSION],
        }
        assert card["securitySchemes"]["apiKey"]["type"] == "apiKey"
        assert (card["securitySchemes"]["apiKey"]["in"], card["securitySchemes"]["apiKey"]["name"]) == (
            "header",
            "X-API-Key",
        )
        assert card["security"] == [{"apiKey": []}]
        assert card["supportsAuthenticatedExtendedCard"] is False
        assert card["defaultInputModes"] == ["text/plain"] and card["skills"][0]["id"] == "echo"
        assert asked["ETag"] != default["ETag"]
    # The SDK's 0.3 model reads it, and its resolver makes it a 0.3 JSON-RPC interface.
    parsed = types_v03.AgentCard.model_validate(card)
    assert parsed.url == card["url"] and parsed.security_schemes["apiKey"].root.in_.value == "header"
    resolved = parse_agent_card(card)
    assert [(i.protocol_binding, i.protocol_version) for i in resolved.supported_interfaces] == [
        ("JSONRPC", "0.3.0"),
        ("JSONRPC", "0.3.0"),
    ]


def test_the_1_0_card_cannot_serve_as_a_0_3_card(client, echo_agent):
    """Why the two cards are two documents: 0.3's model refuses the 1.0 card (no url), and with
    0.3's members added it reads 1.0's API key scheme as mutual TLS, the one 0.3 scheme whose
    members all have defaults (and the 1.0 suite refuses any member 1.0 does not define)."""
    from a2a.compat.v0_3 import types as types_v03
    from pydantic import ValidationError

    card = client.get("/agents/acme/echo/.well-known/agent-card.json").json()
    with pytest.raises(ValidationError):
        types_v03.AgentCard.model_validate(card)
    merged = types_v03.AgentCard.model_validate({**card, "url": "http://x/", "protocolVersion": "0.3.0"})
    assert merged.security_schemes["apiKey"].root.type == "mutualTLS"


def test_the_authenticated_extended_card_is_the_0_3_card_with_the_extended_content(rpc03, tenant, alice_key):
    from accounts.models import Agent

    make_agent(tenant, "echo", "echo")
    assert rpc03(ECHO, "agent/getAuthenticatedExtendedCard", {}, key=alice_key).error["code"] == -32004
    Agent.objects.filter(slug="echo").update(has_extended_card=True)
    error = rpc03(ECHO, "agent/getAuthenticatedExtendedCard", {}, key=alice_key).error
    assert error["code"] == -32007 and error["data"]["reason"] == "EXTENDED_AGENT_CARD_NOT_CONFIGURED"
    extra = {"id": "secret-skill", "name": "Secret", "description": "for members", "tags": []}
    Agent.objects.filter(slug="echo").update(extended_card={"skills": [extra]})
    card = rpc03(ECHO, "agent/getAuthenticatedExtendedCard", {}, key=alice_key).result
    assert card["protocolVersion"] == "0.3.0" and card["supportsAuthenticatedExtendedCard"] is True
    assert [s["id"] for s in card["skills"]] == ["echo", "secret-skill"]


# --- errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "code", "fragment"),
    [
        ({}, -32602, "params.message must be an object"),
        ({"message": {**user_message_v03(), "kind": "task"}}, -32602, 'params.message.kind must be "message"'),
        ({"message": {**user_message_v03(), "role": "ROLE_USER"}}, -32602, 'params.message.role must be "user"'),
        ({"message": {**user_message_v03(), "parts": []}}, -32602, "params.message.parts must be a non-empty list"),
        ({"message": {**user_message_v03(), "parts": [{"kind": "image"}]}}, -32602, "params.message.parts[0].kind"),
        (
            {"message": {**user_message_v03(), "parts": [{"text": "a"}, {"kind": "file", "file": {"bytes": "%%"}}]}},
            -32602,
            "params.message.parts[1].file.bytes must be base64",
        ),
        (
            {"message": {**user_message_v03(), "parts": [{"kind": "file", "file": {}}]}},
            -32602,
            "params.message.parts[0].file must have exactly one of bytes or uri",
        ),
        (
            {"message": {**user_message_v03(), "parts": [{"kind": "data", "data": [1]}]}},
            -32602,
            "params.message.parts[0].data is required and must be an object",
        ),
        (
            {"message": user_message_v03(), "configuration": {"blocking": "no"}},
            -32602,
            "params.configuration.blocking must be true or false",
        ),
        (
            {"message": user_message_v03(), "configuration": {"historyLength": -1}},
            -32602,
            "params.configuration.historyLength must be at least 0",
        ),
        (
            {
                "message": user_message_v03(),
                "configuration": {"pushNotificationConfig": {"url": HOOK, "authentication": {"credentials": "c"}}},
            },
            -32602,
            "params.configuration.pushNotificationConfig.authentication.schemes must name a scheme",
        ),
        ({"message": user_message_v03(taskId=str(uuid.uuid4()))}, -32001, "not found"),
    ],
)
def test_bad_params_are_the_dialects_errors_naming_the_field(rpc03, echo_agent, alice_key, params, code, fragment):
    error = rpc03(ECHO, "message/send", params, key=alice_key).error
    assert error["code"] == code, error
    assert fragment in error["message"], error["message"]


@pytest.mark.parametrize(
    ("method", "params", "fragment"),
    [
        ("tasks/get", {}, "params.id is required"),
        ("tasks/get", {"id": "x", "historyLength": "many"}, "params.historyLength must be an integer"),
        ("tasks/cancel", {"id": 7}, "params.id is required"),
        ("tasks/pushNotificationConfig/set", {"taskId": "x"}, "params.pushNotificationConfig must be an object"),
        ("tasks/pushNotificationConfig/get", {"taskId": "x"}, "params.id is required"),
        ("tasks/pushNotificationConfig/list", {"id": ""}, "params.id is required"),
        ("tasks/pushNotificationConfig/delete", {"id": "x"}, "params.pushNotificationConfigId is required"),
    ],
)
def test_every_method_names_the_bad_field(rpc03, echo_agent, alice_key, method, params, fragment):
    error = rpc03(ECHO, method, params, key=alice_key).error
    assert error["code"] == -32602 and fragment in error["message"], error


def test_the_version_decides_which_methods_exist(rpc03, echo_agent, alice_key):
    forgot = rpc03(ECHO, "GetTask", {"id": "x"}, key=alice_key).error  # 1.0's method, no header
    assert forgot["code"] == -32009 and "send the header A2A-Version: 1.0" in forgot["message"]
    assert rpc03(ECHO, "tasks/list", {}, key=alice_key).error["code"] == -32601  # in no dialect
    for version in ("0.3", "0.3.0", ""):
        answer = rpc03(ECHO, "tasks/get", {"id": str(uuid.uuid4())}, key=alice_key, headers={"A2A-Version": version})
        assert answer.error["code"] == -32001
    v1 = rpc03(ECHO, "tasks/get", {"id": "x"}, key=alice_key, headers={"A2A-Version": "1.0"})
    assert v1.error["code"] == -32601
    other = rpc03(ECHO, "tasks/get", {"id": "x"}, key=alice_key, headers={"A2A-Version": "0.2"}).error
    assert other["code"] == -32009 and "speaks 1.0, 0.3" in other["message"]


def test_an_error_with_nothing_to_add_carries_0_3s_standard_message(echo_agent):
    from protocols.dialects.a2a_v03.methods import error
    from tasks_app.errors import PushNotificationNotSupported, TaskNotCancelable, TaskNotFound

    for exc, standard in (
        (TaskNotFound(), "Task not found"),
        (TaskNotCancelable(), "Task cannot be canceled"),
        (PushNotificationNotSupported(), "Push Notification is not supported"),
    ):
        assert orjson.loads(error(3, exc))["error"]["message"] == standard
    assert orjson.loads(error(3, TaskNotFound("task 'x' not found")))["error"]["message"] == "task 'x' not found"
