"""Every error the JSON-RPC endpoint can give, with its exact code and ErrorInfo reason."""

import pytest

from tests.conftest import make_agent, user_message

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def assert_a2a_error(response, code: int, reason: str) -> dict:
    error = response.error
    assert error["code"] == code, error
    assert error["message"]
    assert error["data"] == [{"@type": ERROR_INFO, "reason": reason, "domain": "a2a-protocol.org"}]
    assert response.status == 200
    return error


def assert_envelope_error(response, code: int) -> dict:
    error = response.error
    assert error["code"] == code, error
    assert error["message"]
    assert "Traceback" not in error["message"]
    return error


# --- A2A errors -32001..-32009 ------------------------------------------------------------

def test_get_of_an_unknown_task_is_task_not_found(rpc, echo_agent, alice_key):
    response = rpc("/agents/acme/echo/", "GetTask", {"id": "00000000-0000-0000-0000-000000000000"}, key=alice_key)
    assert_a2a_error(response, -32001, "TASK_NOT_FOUND")


def test_a_task_id_that_is_not_a_uuid_is_simply_not_found(rpc, echo_agent, alice_key):
    response = rpc("/agents/acme/echo/", "GetTask", {"id": "tck-nonexistent"}, key=alice_key)
    assert_a2a_error(response, -32001, "TASK_NOT_FOUND")


@pytest.mark.django_db(transaction=True)
def test_cancel_of_a_completed_task_is_task_not_cancelable(rpc, echo_agent, alice_key):
    task = rpc.send("/agents/acme/echo/", key=alice_key).result["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    response = rpc("/agents/acme/echo/", "CancelTask", {"id": task["id"]}, key=alice_key)
    assert_a2a_error(response, -32002, "TASK_NOT_CANCELABLE")


@pytest.mark.parametrize("method", [
    "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig",
])
def test_push_methods_are_not_supported_while_push_is_off(rpc, tenant, alice_key, method):
    make_agent(tenant, "quiet", "echo", push_notifications=False)
    response = rpc("/agents/acme/quiet/", method, {"taskId": "x", "id": "y", "url": "https://example.com"},
                   key=alice_key)
    assert_a2a_error(response, -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED")


def test_an_inline_push_config_is_not_supported_while_push_is_off(rpc, tenant, alice_key):
    make_agent(tenant, "quiet", "echo", push_notifications=False)
    response = rpc.send("/agents/acme/quiet/", key=alice_key,
                        configuration={"taskPushNotificationConfig": {"url": "https://example.com/hook"}})
    assert_a2a_error(response, -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED")


@pytest.mark.parametrize("method", ["SendStreamingMessage", "SubscribeToTask"])
def test_streaming_methods_are_unsupported_while_streaming_is_off(rpc, echo_agent, alice_key, method):
    echo_agent.streaming = False
    echo_agent.save()
    response = rpc("/agents/acme/echo/", method, {"message": user_message(), "id": "x"}, key=alice_key)
    assert_a2a_error(response, -32004, "UNSUPPORTED_OPERATION")


@pytest.mark.django_db(transaction=True)
def test_a_message_to_a_terminal_task_is_an_unsupported_operation(rpc, echo_agent, alice_key):
    task = rpc.send("/agents/acme/echo/", key=alice_key).result["task"]
    response = rpc.send("/agents/acme/echo/", "again", key=alice_key, taskId=task["id"])
    error = assert_a2a_error(response, -32004, "UNSUPPORTED_OPERATION")
    assert "terminal" in error["message"]


def test_a_wrong_content_type_is_content_type_not_supported(rpc, echo_agent, alice_key):
    response = rpc.raw("/agents/acme/echo/", b"{}", key=alice_key, content_type="text/plain")
    assert_a2a_error(response, -32005, "CONTENT_TYPE_NOT_SUPPORTED")


def test_a_file_of_a_media_type_the_agent_does_not_take_is_content_type_not_supported(rpc, echo_agent, alice_key):
    from tasks_app.models import Task

    unsupported = [{"raw": "dGNr", "mediaType": "application/x-unsupported-tck-type"}]
    response = rpc.send("/agents/acme/echo/", key=alice_key, parts=unsupported)
    error = assert_a2a_error(response, -32005, "CONTENT_TYPE_NOT_SUPPORTED")
    assert "application/x-unsupported-tck-type" in error["message"] and "text/plain" in error["message"]
    assert not Task.objects.exists()


def test_accepting_no_output_mode_the_agent_produces_is_content_type_not_supported(rpc, echo_agent, alice_key):
    response = rpc.send("/agents/acme/echo/", key=alice_key, configuration={"acceptedOutputModes": ["image/png"]})
    error = assert_a2a_error(response, -32005, "CONTENT_TYPE_NOT_SUPPORTED")
    assert "produces text/plain" in error["message"]


@pytest.mark.django_db(transaction=True)
def test_a_follow_up_with_a_file_the_agent_does_not_take_leaves_the_task_as_it_was(rpc, tenant, alice_key):
    from tasks_app.models import Message, Task

    make_agent(tenant, "writer", "writer")
    task = rpc.send("/agents/acme/writer/", "write", key=alice_key).result["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    messages = Message.objects.filter(task_id=task["id"]).count()
    picture = [{"url": "https://example.test/topic.png", "mediaType": "image/png"}]
    response = rpc.send("/agents/acme/writer/", key=alice_key, taskId=task["id"], parts=picture)
    assert_a2a_error(response, -32005, "CONTENT_TYPE_NOT_SUPPORTED")
    assert Task.objects.get(pk=task["id"]).state == "input-required"
    assert Message.objects.filter(task_id=task["id"]).count() == messages


@pytest.mark.django_db(transaction=True)
def test_an_agent_that_breaks_the_executor_contract_is_an_invalid_agent_response(rpc, tenant, alice_key):
    from tasks_app.executors import REGISTRY, Executor

    class Silent(Executor):
        name = "test-silent"

        def execute(self, ctx):
            return None  # neither completes nor asks for input

    REGISTRY[Silent.name] = Silent
    try:
        make_agent(tenant, "silent", "test-silent")
        response = rpc.send("/agents/acme/silent/", key=alice_key)
    finally:
        del REGISTRY[Silent.name]
    error = assert_a2a_error(response, -32006, "INVALID_AGENT_RESPONSE")
    assert "returned without completing" in error["message"]


def test_an_extended_card_declared_but_not_configured_is_reported(rpc, tenant, alice_key):
    make_agent(tenant, "ext", "echo", has_extended_card=True, extended_card=None)
    response = rpc("/agents/acme/ext/", "GetExtendedAgentCard", {}, key=alice_key)
    assert_a2a_error(response, -32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED")


def test_an_extended_card_not_declared_is_an_unsupported_operation(rpc, echo_agent, alice_key):
    response = rpc("/agents/acme/echo/", "GetExtendedAgentCard", {}, key=alice_key)
    assert_a2a_error(response, -32004, "UNSUPPORTED_OPERATION")


def test_a_configured_extended_card_adds_its_skills(rpc, tenant, alice_key):
    extra = {"id": "secret", "name": "Secret", "description": "for members", "tags": []}
    make_agent(tenant, "ext", "echo", has_extended_card=True, extended_card={"skills": [extra]})
    card = rpc("/agents/acme/ext/", "GetExtendedAgentCard", {}, key=alice_key).result
    assert [s["id"] for s in card["skills"]] == ["ext", "secret"]


def test_a_required_extension_not_activated_is_extension_support_required(rpc, tenant, alice_key):
    uri = "https://example.com/ext/must/v1"
    make_agent(tenant, "strict", "echo", extensions=[{"uri": uri, "required": True}])
    response = rpc("/agents/acme/strict/", "GetTask", {"id": "x"}, key=alice_key)
    error = assert_a2a_error(response, -32008, "EXTENSION_SUPPORT_REQUIRED")
    assert uri in error["message"]


def test_an_activated_required_extension_is_echoed_back(rpc, tenant, alice_key):
    uri = "https://example.com/ext/must/v1"
    make_agent(tenant, "strict", "echo", extensions=[{"uri": uri, "required": True}])
    response = rpc("/agents/acme/strict/", "GetTask", {"id": "x"}, key=alice_key, headers={"A2A-Extensions": uri})
    assert response.error["code"] == -32001  # got past the extension check
    assert response.headers["A2A-Extensions"] == uri


def test_an_unknown_version_is_version_not_supported(rpc, echo_agent, alice_key):
    response = rpc("/agents/acme/echo/", "GetTask", {"id": "x"}, key=alice_key, headers={"A2A-Version": "99.0"})
    error = assert_a2a_error(response, -32009, "VERSION_NOT_SUPPORTED")
    assert "99.0" in error["message"]


def test_a_missing_version_means_0_3_which_is_not_served_yet(echo_agent, alice_key, client):
    response = client.post("/agents/acme/echo/", data=b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}',
                           content_type="application/json", headers={"X-API-Key": alice_key})
    error = response.json()["error"]
    assert error["code"] == -32009 and error["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert "0.3" in error["message"]


def test_an_empty_version_header_counts_as_missing(rpc, echo_agent, alice_key):
    response = rpc("/agents/acme/echo/", "GetTask", {"id": "x"}, key=alice_key, headers={"A2A-Version": ""})
    error = assert_a2a_error(response, -32009, "VERSION_NOT_SUPPORTED")
    assert "0.3" in error["message"]


def test_the_version_may_also_come_as_a_query_parameter(rpc, echo_agent, alice_key, client):
    response = client.post("/agents/acme/echo/?A2A-Version=1.0", data=b'{"jsonrpc":"2.0","id":1,"method":"GetTask",'
                           b'"params":{"id":"x"}}', content_type="application/json", headers={"X-API-Key": alice_key})
    assert response.json()["error"]["code"] == -32001


# --- envelope faults ------------------------------------------------------------------------

def test_a_body_that_is_not_json_is_a_parse_error(rpc, echo_agent, alice_key):
    response = rpc.raw("/agents/acme/echo/", b'{"jsonrpc": "2.0", ', key=alice_key)
    assert_envelope_error(response, -32700)
    assert response.body["id"] is None


@pytest.mark.parametrize("body", [
    b'{"id": 1, "method": "GetTask"}',
    b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask"}',
    b'{"jsonrpc": "2.0", "id": 1}',
    b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "GetTask"}',
    b'[{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}]',
    b'"just a string"',
])
def test_a_malformed_request_is_an_invalid_request(rpc, echo_agent, alice_key, body):
    assert_envelope_error(rpc.raw("/agents/acme/echo/", body, key=alice_key), -32600)


def test_an_unknown_method_is_method_not_found(rpc, echo_agent, alice_key):
    response = rpc("/agents/acme/echo/", "tasks/frobnicate", {}, key=alice_key, request_id="abc")
    assert_envelope_error(response, -32601)
    assert response.body["id"] == "abc"


@pytest.mark.parametrize("params", [
    {},
    {"message": "hello"},
    {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}},
    {"message": {"messageId": "m", "role": "ROLE_BOSS", "parts": [{"text": "x"}]}},
    {"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}},
    {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x", "url": "y"}]}},
    {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"raw": "not base64!"}]}},
    {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}},
    {"message": user_message(), "configuration": {"historyLength": -1}},
    {"message": user_message(), "configuration": {"returnImmediately": "yes"}},
    {"message": user_message(), "configuration": []},
])
def test_bad_send_params_are_invalid_params_and_store_nothing(rpc, echo_agent, alice_key, params):
    from tasks_app.models import Task

    response = rpc("/agents/acme/echo/", "SendMessage", params, key=alice_key)
    assert_envelope_error(response, -32602)
    assert Task.objects.count() == 0


@pytest.mark.parametrize("params", [{"pageSize": 0}, {"pageSize": 101}, {"pageToken": "garbage!"},
                                    {"status": "TASK_STATE_BORED"}, {"statusTimestampAfter": "yesterday"}])
def test_bad_list_params_are_invalid_params(rpc, echo_agent, alice_key, params):
    assert_envelope_error(rpc("/agents/acme/echo/", "ListTasks", params, key=alice_key), -32602)


def test_a_params_value_that_is_not_an_object_is_invalid_params(rpc, echo_agent, alice_key):
    body = b'{"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": [1, 2]}'
    assert_envelope_error(rpc.raw("/agents/acme/echo/", body, key=alice_key), -32602)


def test_an_unexpected_failure_is_an_internal_error_without_details(rpc, echo_agent, alice_key, monkeypatch):
    from tasks_app.dialects.a2a_v1 import methods

    async def broken(call, params):
        raise RuntimeError("secret internals")

    monkeypatch.setitem(methods.METHODS, "GetTask", broken)
    response = rpc("/agents/acme/echo/", "GetTask", {"id": "x"}, key=alice_key)
    error = assert_envelope_error(response, -32603)
    assert "secret" not in error["message"]
