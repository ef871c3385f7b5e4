"""A2A 1.0 over HTTP+JSON (§11): every route, its errors as google.rpc.Status with the HTTP
status of §5.4, and, method by method, the same answer as the JSON-RPC binding gives to the
same request (the routes call the very methods JSON-RPC calls)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import orjson
import pytest
from asgiref.sync import async_to_sync

from tests.conftest import V1, RestResponse, make_agent, user_message

pytestmark = pytest.mark.django_db(transaction=True)
ECHO = "/agents/acme/echo/"
WRITER = "/agents/acme/writer/"
A2A = "a2a-protocol.org"
HOOK = "https://push.example/hook"


@pytest.fixture
def hook(dns):
    dns["push.example"] = ["93.184.216.34"]  # resolved by the SSRF guard, never called in-process
    return HOOK


def send(rest, path: str, text: str = "hello", key: str | None = None, configuration: dict | None = None, **fields):
    body: dict[str, Any] = {"message": user_message(text, **fields)}
    if configuration:
        body["configuration"] = configuration
    return rest("POST", path, "message:send", key=key, body=body)


def assert_status(response, http: int, status: str, reason: str, domain: str = A2A) -> dict:
    error = response.status_error
    assert (response.status, error["status"]) == (http, status), error
    assert error["details"] == [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": domain}
    ]
    assert response.headers["Content-Type"] == "application/json"
    return error


# --- each route --------------------------------------------------------------------------------


def test_post_message_send_answers_the_completed_task_as_json(rest, echo_agent, alice_key):
    response = send(rest, ECHO, "hi there", key=alice_key)
    assert response.status == 200 and response.headers["Content-Type"] == "application/json"
    task = response.body["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "echo: hi there"}]


def test_a_bare_message_reply_is_answered_as_a_message(rest, conformance_agent):
    body = {"message": user_message(messageId="tck-message-response-1")}
    response = rest("POST", "/agents/acme/conformance/", "message:send", body=body)
    assert response.body["message"]["parts"] == [{"text": "Direct message response"}]


def test_get_task_takes_the_id_from_the_path_and_history_length_from_the_query(rest, writer_agent, alice_key):
    asked = send(rest, WRITER, "write something", key=alice_key).body["task"]
    full = rest("GET", WRITER, f"tasks/{asked['id']}", key=alice_key)
    one = rest("GET", WRITER, f"tasks/{asked['id']}", key=alice_key, query={"historyLength": 1})
    none = rest("GET", WRITER, f"tasks/{asked['id']}", key=alice_key, query={"history_length": 0})
    assert full.status == one.status == none.status == 200
    assert full.body["id"] == asked["id"] and len(full.body["history"]) == 2
    assert one.body["history"] == full.body["history"][-1:]
    assert "history" not in none.body


def test_list_tasks_takes_every_filter_and_the_paging_from_the_query(rest, echo_agent, writer_agent, alice_key):
    ids = [send(rest, ECHO, f"m{i}", key=alice_key, contextId="ctx-a").body["task"]["id"] for i in range(3)]
    waiting = send(rest, WRITER, "write something", key=alice_key).body["task"]
    seen, token = [], ""
    while True:
        query = {"contextId": "ctx-a", "pageSize": 2, **({"pageToken": token} if token else {})}
        page = rest("GET", ECHO, "tasks", key=alice_key, query=query).body
        assert page["totalSize"] == 3 and page["pageSize"] == 2
        seen += [t["id"] for t in page["tasks"]]
        if not (token := page["nextPageToken"]):
            break
    assert seen == list(reversed(ids))
    by_state = rest("GET", WRITER, "tasks", key=alice_key, query={"status": "TASK_STATE_INPUT_REQUIRED"}).body
    assert [t["id"] for t in by_state["tasks"]] == [waiting["id"]]
    after = {"statusTimestampAfter": waiting["status"]["timestamp"]}
    assert rest("GET", ECHO, "tasks", key=alice_key, query=after).body["tasks"] == []
    plain = rest("GET", ECHO, "tasks", key=alice_key, query={"pageSize": 1}).body["tasks"][0]
    rich_query = {"pageSize": 1, "includeArtifacts": "true", "historyLength": 0}
    rich = rest("GET", ECHO, "tasks", key=alice_key, query=rich_query).body["tasks"][0]
    assert "artifacts" not in plain and plain["history"]
    assert rich["artifacts"] and "history" not in rich


def test_post_cancel_cancels_a_waiting_task_with_or_without_a_body(rest, writer_agent, alice_key):
    first = send(rest, WRITER, "write something", key=alice_key).body["task"]
    second = send(rest, WRITER, "write something", key=alice_key).body["task"]
    canceled = rest("POST", WRITER, f"tasks/{first['id']}:cancel", key=alice_key)
    with_body = rest("POST", WRITER, f"tasks/{second['id']}:cancel", key=alice_key, body={"id": second["id"]})
    assert canceled.body["status"]["state"] == with_body.body["status"]["state"] == "TASK_STATE_CANCELED"
    assert rest("GET", WRITER, f"tasks/{first['id']}", key=alice_key).body["status"]["state"] == "TASK_STATE_CANCELED"


def test_message_stream_streams_bare_stream_responses_to_the_end(rest, echo_agent, alice_key):
    body = {"message": user_message("ping")}
    response = rest("POST", ECHO, "message:stream", key=alice_key, body=body)
    assert response.status == 200 and response.headers["Content-Type"].startswith("text/event-stream")
    events = response.events()
    assert [i for i, _ in events] == list(range(1, len(events) + 1))
    assert events[0][1]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert events[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all("jsonrpc" not in data for _, data in events)


@pytest.mark.parametrize("http_method", ["GET", "POST"])
def test_subscribe_by_get_or_post_replays_a_finished_task_from_last_event_id(rest, echo_agent, alice_key, http_method):
    task = send(rest, ECHO, key=alice_key).body["task"]
    response = rest(http_method, ECHO, f"tasks/{task['id']}:subscribe", key=alice_key, headers={"Last-Event-ID": "0"})
    events = response.events()
    assert [i for i, _ in events] == list(range(1, len(events) + 1))
    assert events[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_subscribing_to_a_finished_task_is_an_unsupported_operation_before_any_stream(rest, echo_agent, alice_key):
    task = send(rest, ECHO, key=alice_key).body["task"]
    response = rest("POST", ECHO, f"tasks/{task['id']}:subscribe", key=alice_key)
    assert not response.streamed
    assert_status(response, 400, "UNIMPLEMENTED", "UNSUPPORTED_OPERATION")


def test_push_config_routes_create_get_list_and_delete(rest, echo_agent, alice_key, hook):
    task = send(rest, ECHO, key=alice_key, configuration={"returnImmediately": True}).body["task"]
    configs = f"tasks/{task['id']}/pushNotificationConfigs"
    created = rest("POST", ECHO, configs, key=alice_key, body={"id": "c1", "url": hook, "token": "t"})
    assert created.status == 200
    assert created.body == {"id": "c1", "taskId": task["id"], "url": hook, "token": "t"}
    assert rest("GET", ECHO, f"{configs}/c1", key=alice_key).body == created.body
    listed = rest("GET", ECHO, configs, key=alice_key, query={"pageSize": 10}).body
    assert listed == {"configs": [created.body], "nextPageToken": ""}
    deleted = rest("DELETE", ECHO, f"{configs}/c1", key=alice_key)
    assert (deleted.status, deleted.body) == (200, {})
    assert_status(rest("GET", ECHO, f"{configs}/c1", key=alice_key), 404, "NOT_FOUND", "TASK_NOT_FOUND")


def test_the_path_s_task_id_wins_over_one_in_the_body(rest, echo_agent, alice_key, hook):
    task = send(rest, ECHO, key=alice_key, configuration={"returnImmediately": True}).body["task"]
    body = {"taskId": str(uuid.uuid4()), "url": hook}
    created = rest("POST", ECHO, f"tasks/{task['id']}/pushNotificationConfigs", key=alice_key, body=body)
    assert created.body["taskId"] == task["id"]


def test_get_extended_agent_card(rest, tenant, alice_key):
    extra = {"id": "secret", "name": "Secret", "description": "for members", "tags": []}
    make_agent(tenant, "ext", "echo", has_extended_card=True, extended_card={"skills": [extra]})
    card = rest("GET", "/agents/acme/ext/", "extendedAgentCard", key=alice_key).body
    assert [s["id"] for s in card["skills"]] == ["ext", "secret"]


def test_each_route_has_its_tenant_variant_and_a_doubled_slash_finds_the_same_route(rest, echo_agent, alice_key):
    task = send(rest, ECHO, key=alice_key).body["task"]
    via_tenant = rest("GET", ECHO, f"acme/tasks/{task['id']}", key=alice_key)
    doubled = rest("GET", ECHO, f"/tasks/{task['id']}", key=alice_key)
    plain = rest("GET", ECHO, f"tasks/{task['id']}", key=alice_key)
    assert via_tenant.body == doubled.body == plain.body
    sent = rest("POST", ECHO, "anything/message:send", key=alice_key, body={"message": user_message()})
    assert sent.body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_client_that_asks_for_application_a2a_json_gets_it(rest, echo_agent, alice_key):
    headers = {"Accept": "application/a2a+json, application/json;q=0.5"}
    response = rest("GET", ECHO, "tasks", key=alice_key, headers=headers)
    assert response.status == 200 and response.headers["Content-Type"] == "application/a2a+json"
    missing = rest("GET", ECHO, f"tasks/{uuid.uuid4()}", key=alice_key, headers=headers)
    assert missing.status == 404 and missing.headers["Content-Type"] == "application/a2a+json"


def test_a_request_body_may_be_application_a2a_json(rest, echo_agent, alice_key):
    body = orjson.dumps({"message": user_message()})
    response = rest("POST", ECHO, "message:send", key=alice_key, raw=body, content_type="application/a2a+json")
    assert response.body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


# --- errors: google.rpc.Status with §5.4's HTTP status --------------------------------------------


def test_an_unknown_task_is_404_not_found_with_its_error_info(rest, echo_agent, alice_key):
    task_id = str(uuid.uuid4())
    error = assert_status(rest("GET", ECHO, f"tasks/{task_id}", key=alice_key), 404, "NOT_FOUND", "TASK_NOT_FOUND")
    assert error["message"] == f"task {task_id!r} not found"


@pytest.mark.parametrize("task_id", ["a%0Ab", "%E2%80%AE", "urn:uuid:x", "x" * 201])
def test_any_other_id_in_the_path_is_a_task_not_found_or_invalid_params_never_a_missing_route(
    rest, echo_agent, alice_key, task_id
):
    response = rest("GET", ECHO, f"tasks/{task_id}", key=alice_key)
    assert (response.status, response.reason) in ((404, "TASK_NOT_FOUND"), (400, "INVALID_PARAMS"))


def test_cancel_of_a_completed_task_is_409_task_not_cancelable(rest, echo_agent, alice_key):
    task = send(rest, ECHO, key=alice_key).body["task"]
    response = rest("POST", ECHO, f"tasks/{task['id']}:cancel", key=alice_key)
    assert_status(response, 409, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE")


def test_a_message_to_a_finished_task_is_400_unsupported_operation(rest, echo_agent, alice_key):
    task = send(rest, ECHO, key=alice_key).body["task"]
    response = send(rest, ECHO, key=alice_key, taskId=task["id"])
    assert_status(response, 400, "UNIMPLEMENTED", "UNSUPPORTED_OPERATION")


@pytest.mark.parametrize(
    "http_method, route",
    [
        ("POST", "tasks/T/pushNotificationConfigs"),
        ("GET", "tasks/T/pushNotificationConfigs/c"),
        ("GET", "tasks/T/pushNotificationConfigs"),
        ("DELETE", "tasks/T/pushNotificationConfigs/c"),
    ],
)
def test_push_routes_while_push_is_off_are_400_push_notification_not_supported(
    rest, tenant, alice_key, http_method, route
):
    make_agent(tenant, "quiet", "echo", push_notifications=False)
    body = {"url": HOOK} if http_method == "POST" else None
    response = rest(http_method, "/agents/acme/quiet/", route, key=alice_key, body=body)
    assert_status(response, 400, "UNIMPLEMENTED", "PUSH_NOTIFICATION_NOT_SUPPORTED")


@pytest.mark.parametrize("http_method, route", [("POST", "message:stream"), ("GET", "tasks/T:subscribe")])
def test_streaming_routes_while_streaming_is_off_are_400_unsupported_operation(
    rest, tenant, alice_key, http_method, route
):
    make_agent(tenant, "still", "echo", streaming=False)
    body = {"message": user_message()} if http_method == "POST" else None
    response = rest(http_method, "/agents/acme/still/", route, key=alice_key, body=body)
    assert_status(response, 400, "UNIMPLEMENTED", "UNSUPPORTED_OPERATION")


def test_an_extended_card_not_configured_and_one_not_declared(rest, tenant, alice_key):
    make_agent(tenant, "ext", "echo", has_extended_card=True, extended_card=None)
    make_agent(tenant, "plain", "echo")
    response = rest("GET", "/agents/acme/ext/", "extendedAgentCard", key=alice_key)
    assert_status(response, 400, "FAILED_PRECONDITION", "EXTENDED_AGENT_CARD_NOT_CONFIGURED")
    response = rest("GET", "/agents/acme/plain/", "extendedAgentCard", key=alice_key)
    assert_status(response, 400, "UNIMPLEMENTED", "UNSUPPORTED_OPERATION")


def test_a_file_of_a_type_the_agent_does_not_take_is_415_content_type_not_supported(rest, echo_agent, alice_key):
    message = user_message()
    message["parts"] = [{"raw": "aGk=", "mediaType": "image/png"}]
    response = rest("POST", ECHO, "message:send", key=alice_key, body={"message": message})
    assert_status(response, 415, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_a_body_of_another_content_type_is_415(rest, echo_agent, alice_key, content_type):
    body = orjson.dumps({"message": user_message()})
    response = rest("POST", ECHO, "message:send", key=alice_key, raw=body, content_type=content_type)
    assert_status(response, 415, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED")


def test_an_agent_that_breaks_its_contract_is_502_invalid_agent_response(rest, tenant, alice_key):
    from tasks_app.executors import REGISTRY, Executor

    class Silent(Executor):
        name = "test-silent"

        def execute(self, ctx):
            return None

    REGISTRY[Silent.name] = Silent
    try:
        make_agent(tenant, "silent", "test-silent")
        response = send(rest, "/agents/acme/silent/", key=alice_key)
    finally:
        del REGISTRY[Silent.name]
    assert_status(response, 502, "INTERNAL", "INVALID_AGENT_RESPONSE")


def test_a_required_extension_not_activated_is_400_and_an_activated_one_is_echoed(rest, tenant, alice_key):
    uri = "https://example.com/ext/must/v1"
    make_agent(tenant, "strict", "echo", extensions=[{"uri": uri, "required": True}])
    response = rest("GET", "/agents/acme/strict/", "tasks", key=alice_key)
    assert uri in assert_status(response, 400, "FAILED_PRECONDITION", "EXTENSION_SUPPORT_REQUIRED")["message"]
    activated = rest("GET", "/agents/acme/strict/", "tasks", key=alice_key, headers={"A2A-Extensions": uri})
    assert activated.status == 200 and activated.headers["A2A-Extensions"] == uri


def test_without_a2a_version_a_request_means_0_3_and_is_400_version_not_supported(client, echo_agent, alice_key):
    response = client.get(f"{ECHO}tasks", headers={"X-API-Key": alice_key})
    error = response.json()["error"]
    assert (response.status_code, error["status"]) == (400, "UNIMPLEMENTED")
    assert error["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert "A2A-Version: 1.0" in error["message"]
    by_query = client.get(f"{ECHO}tasks?A2A-Version=1.0", headers={"X-API-Key": alice_key})
    assert by_query.status_code == 200 and by_query.json()["tasks"] == []


def test_an_unknown_version_is_400_version_not_supported(rest, echo_agent, alice_key):
    response = rest("GET", ECHO, "tasks", key=alice_key, headers={"A2A-Version": "99.0"})
    assert "99.0" in assert_status(response, 400, "UNIMPLEMENTED", "VERSION_NOT_SUPPORTED")["message"]


@pytest.mark.parametrize(
    "query, message",
    [
        ({"pageSize": 0}, "pageSize must be at least 1, got 0"),
        ({"pageSize": "lots"}, "pageSize must be an integer"),
        ({"historyLength": -1}, "historyLength must be at least 0, got -1"),
        ({"historyLength": ""}, "historyLength must be an integer"),
        ({"includeArtifacts": "yes"}, "params.includeArtifacts must be true or false"),
        ({"status": "working"}, "status must be a TaskState such as TASK_STATE_WORKING, got 'working'"),
        ({"statusTimestampAfter": "yesterday"}, "statusTimestampAfter is not an RFC 3339 timestamp: 'yesterday'"),
        ({"contextId": "a\x00b"}, "contextId contains U+0000, which this server does not accept"),
    ],
)
def test_bad_query_parameters_are_400_invalid_params_naming_the_parameter(rest, echo_agent, alice_key, query, message):
    response = rest("GET", ECHO, "tasks", key=alice_key, query=query)
    error = assert_status(response, 400, "INVALID_ARGUMENT", "INVALID_PARAMS")
    assert error["message"] == message.removeprefix("params.")


@pytest.mark.parametrize(
    "body, reason, message",
    [
        (b"{", "INVALID_REQUEST", "request body is not valid JSON: Expecting property name enclosed in double quotes"),
        (b"[1]", "INVALID_REQUEST", "the request body must be a JSON object"),
        (b'{"message": {}, "message": {}}', "INVALID_PARAMS", "message is given more than once"),
        (b"{}", "INVALID_PARAMS", "message must be an object"),
        (b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}', "INVALID_PARAMS", "message.parts"),
        (
            b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "\\u0000"}]}}',
            "INVALID_PARAMS",
            "U+0000",
        ),
    ],
)
def test_a_bad_body_is_400_naming_what_is_wrong_and_stores_nothing(rest, echo_agent, alice_key, body, reason, message):
    from tasks_app.models import Task

    response = rest("POST", ECHO, "message:send", key=alice_key, raw=body)
    assert message in assert_status(response, 400, "INVALID_ARGUMENT", reason)["message"]
    assert not Task.objects.exists()


def test_nesting_is_counted_as_in_json_rpc_params_so_both_bindings_take_the_same_bodies(
    rpc, rest, echo_agent, alice_key
):
    def deep(levels: int):
        value: list = []
        for _ in range(levels - 1):
            value = [value]
        return value

    # The body is what a JSON-RPC request's params are, one level below its envelope: a data
    # part's value sits at level 6 of either, so 59 levels of it reach the limit of 64.
    for levels, passes in ((59, True), (60, False)):
        params = {"message": {**user_message(), "parts": [{"data": deep(levels)}]}}
        over_rpc = rpc(ECHO, "SendMessage", params, key=alice_key)
        over_rest = rest("POST", ECHO, "message:send", key=alice_key, body=params)
        assert ("result" in over_rpc.body, over_rest.status == 200) == (passes, passes)
        if not passes:
            error = assert_status(over_rest, 400, "INVALID_ARGUMENT", "INVALID_PARAMS")
            assert error["message"] == over_rpc.error["message"].removeprefix("params.")


@pytest.mark.parametrize("route", ["", "nothing", "tasks/", "message:send/x", "v1/tasks/a/b", "tasks/a/b/c/d/e"])
def test_a_path_of_no_route_is_404_with_a_status_body(rest, echo_agent, alice_key, route):
    response = rest("GET", ECHO, route, key=alice_key) if route else None
    if response is None:  # the agent's path itself is JSON-RPC's
        return
    assert_status(response, 404, "NOT_FOUND", "METHOD_NOT_FOUND")


@pytest.mark.parametrize(
    "http_method, route, allowed",
    [
        ("GET", "message:send", "POST"),
        ("DELETE", "tasks/x", "GET"),
        ("PUT", "tasks/x/pushNotificationConfigs", "POST, GET"),
        ("GET", "tasks/x:cancel", "POST"),
        ("PATCH", "tasks/x:subscribe", "GET, POST"),
    ],
)
def test_another_http_method_on_a_route_is_405_naming_the_allowed_ones(rest, echo_agent, http_method, route, allowed):
    response = rest(http_method, ECHO, route)  # before the caller is known: no key needed to learn this
    assert_status(response, 405, "UNIMPLEMENTED", "METHOD_NOT_FOUND")
    assert response.headers["Allow"] == allowed


def test_a_keyed_agent_without_a_key_is_401_with_a_challenge(rest, echo_agent):
    response = rest("GET", ECHO, "tasks")
    error = assert_status(response, 401, "UNAUTHENTICATED", "UNAUTHENTICATED", domain="agentserver")
    assert error["message"] == "this agent needs an API key in the X-API-Key header"
    assert response.headers["WWW-Authenticate"] == 'ApiKey header="X-API-Key"'


def test_a_key_of_another_tenant_is_403(rest, echo_agent):
    from accounts.services import api_key_create, tenant_ensure

    other = api_key_create(tenant=tenant_ensure(slug="other", name="Other"), name="x")[1]
    response = rest("GET", ECHO, "tasks", key=other)
    assert_status(response, 403, "PERMISSION_DENIED", "PERMISSION_DENIED", domain="agentserver")


def test_an_unknown_agent_is_404(rest, db):
    response = rest("GET", "/agents/acme/nobody/", "tasks")
    error = assert_status(response, 404, "NOT_FOUND", "AGENT_NOT_FOUND", domain="agentserver")
    assert error["message"] == "no agent at /agents/acme/nobody/"


def test_a_body_over_the_tenant_s_limit_is_413(rest, tenant, echo_agent, alice_key):
    tenant.max_request_bytes = 100
    tenant.save()
    response = send(rest, ECHO, "x" * 200, key=alice_key)
    error = assert_status(response, 413, "RESOURCE_EXHAUSTED", "REQUEST_TOO_LARGE", domain="agentserver")
    assert error["message"] == "request body is larger than this tenant's limit of 100 bytes"


def test_a_rate_limited_caller_gets_429_with_retry_after(rest, settings, tenant, echo_agent, alice_key):
    settings.RATE_LIMIT_REDIS_URL = ""  # counted in-process: no other test's counts in Redis
    tenant.rate_limit_per_minute = 1
    tenant.save()
    rest("GET", ECHO, "tasks", key=alice_key)
    response = rest("GET", ECHO, "tasks", key=alice_key)
    assert_status(response, 429, "RESOURCE_EXHAUSTED", "RATE_LIMITED", domain="agentserver")
    assert int(response.headers["Retry-After"]) >= 1


def test_a_store_outage_is_503_with_retry_after(rest, echo_agent, alice_key, monkeypatch):
    from django.db import OperationalError

    from protocols.dialects.a2a_v1 import methods

    async def outage(call, params):
        raise OperationalError("connection refused")

    monkeypatch.setitem(methods.METHODS, "ListTasks", outage)
    response = rest("GET", ECHO, "tasks", key=alice_key)
    assert_status(response, 503, "UNAVAILABLE", "STORE_UNAVAILABLE", domain="agentserver")
    assert response.headers["Retry-After"] == "5"


def test_a_bug_is_500_internal_and_its_traceback_is_logged_not_shown(rest, echo_agent, alice_key, monkeypatch, caplog):
    from protocols.dialects.a2a_v1 import methods

    async def broken(call, params):
        raise RuntimeError("secret internals")

    monkeypatch.setitem(methods.METHODS, "ListTasks", broken)
    response = rest("GET", ECHO, "tasks", key=alice_key)
    error = assert_status(response, 500, "INTERNAL", "INTERNAL_ERROR")
    assert "secret" not in error["message"]
    assert any(r.exc_info and r.exc_info[0] is RuntimeError for r in caplog.records)


# --- the same request through both bindings gets the same answer ---------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def alike(value: Any) -> Any:
    """`value` with server-made ids and timestamps blanked: two exchanges that differ only there match."""
    text = orjson.dumps(value).decode()
    return orjson.loads(_TIMESTAMP.sub("T", _UUID.sub("ID", text)))


def rpc_error_as_rest(error: dict) -> tuple[str, str]:
    """(reason, message) a JSON-RPC error corresponds to over HTTP+JSON."""
    reason = error["data"][0]["reason"] if "data" in error else {-32602: "INVALID_PARAMS"}[error["code"]]
    return reason, error["message"].removeprefix("params.")


def test_a_route_costs_the_statements_its_json_rpc_method_does(
    rpc, rest, echo_agent, alice_key, monkeypatch, django_assert_num_queries
):
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    task_id = rpc.send(ECHO, key=alice_key, configuration={"returnImmediately": True}).result["task"]["id"]
    # Agent and key lookups, then one statement: the task with its history and artifacts, or the
    # new task with its message, status change and event.
    with django_assert_num_queries(3):
        rest("GET", ECHO, f"tasks/{task_id}", key=alice_key)
    with django_assert_num_queries(3):
        rpc(ECHO, "GetTask", {"id": task_id}, key=alice_key)
    with django_assert_num_queries(3):
        send(rest, ECHO, key=alice_key, configuration={"returnImmediately": True})


def test_send_message_gives_the_same_task_through_both(rpc, rest, echo_agent, alice_key):
    message = user_message("same", messageId="m-1", contextId="ctx", metadata={"k": 1})
    params = {"message": message, "configuration": {"historyLength": 5}, "metadata": {"m": True}}
    over_rpc = rpc(ECHO, "SendMessage", params, key=alice_key).result
    over_rest = rest("POST", ECHO, "message:send", key=alice_key, body=params).body
    assert alike(over_rest) == alike(over_rpc)
    assert over_rest["task"]["id"] != over_rpc["task"]["id"]


def test_a_bare_reply_is_the_same_message_through_both(rpc, rest, conformance_agent):
    params = {"message": user_message(messageId="tck-message-response-2")}
    over_rpc = rpc("/agents/acme/conformance/", "SendMessage", params).result
    over_rest = rest("POST", "/agents/acme/conformance/", "message:send", body=params).body
    assert alike(over_rest) == alike(over_rpc)


def test_get_task_reads_the_same_task_through_both(rpc, rest, writer_agent, alice_key):
    task = rpc.send(WRITER, "write something", key=alice_key).result["task"]
    for history_length in (None, 0, 1):
        params = {"id": task["id"], **({"historyLength": history_length} if history_length is not None else {})}
        query = {"historyLength": history_length} if history_length is not None else None
        over_rpc = rpc(WRITER, "GetTask", params, key=alice_key).result
        assert rest("GET", WRITER, f"tasks/{task['id']}", key=alice_key, query=query).body == over_rpc


def test_list_tasks_lists_the_same_page_through_both(rpc, rest, echo_agent, writer_agent, alice_key):
    for i in range(3):
        rpc.send(ECHO, f"m{i}", key=alice_key, contextId="ctx-a")
    rpc.send(WRITER, "write something", key=alice_key)
    first = rpc(ECHO, "ListTasks", {"pageSize": 2}, key=alice_key).result
    for params in (
        {},
        {"contextId": "ctx-a", "pageSize": 2, "historyLength": 1},
        {"pageSize": 2, "pageToken": first["nextPageToken"], "includeArtifacts": True},
        {"status": "TASK_STATE_INPUT_REQUIRED"},
        {"statusTimestampAfter": "2000-01-01T00:00:00.000Z", "includeArtifacts": False},
    ):
        query = {k: str(v).lower() if isinstance(v, bool) else v for k, v in params.items()}
        over_rpc = rpc(ECHO, "ListTasks", params, key=alice_key).result
        assert rest("GET", ECHO, "tasks", key=alice_key, query=query).body == over_rpc, params


def test_cancel_task_cancels_alike_through_both(rpc, rest, writer_agent, alice_key):
    one = rpc.send(WRITER, "write something", key=alice_key, contextId="c").result["task"]
    two = rpc.send(WRITER, "write something", key=alice_key, contextId="c").result["task"]
    over_rpc = rpc(WRITER, "CancelTask", {"id": one["id"]}, key=alice_key).result
    over_rest = rest("POST", WRITER, f"tasks/{two['id']}:cancel", key=alice_key).body
    assert alike(over_rest) == alike(over_rpc)


def rpc_events(rpc, path: str, method: str, params: dict, key: str, headers: dict | None = None) -> list:
    """(id, result) of each event of a JSON-RPC stream."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    response = rpc.client.post(
        path, data=body, content_type="application/json", headers={**V1, "X-API-Key": key, **(headers or {})}
    )
    drained = async_to_sync(_joined)(response.streaming_content)
    return [(i, e["result"]) for i, e in RestResponse(200, response.headers, drained, streamed=True).events()]


async def _joined(chunks) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def test_a_stream_carries_the_same_events_through_both(rpc, rest, echo_agent, alice_key):
    params = {"message": user_message("ping", messageId="m", contextId="c")}
    over_rest = rest("POST", ECHO, "message:stream", key=alice_key, body=params).events()
    over_rpc = rpc_events(rpc, ECHO, "SendStreamingMessage", params, alice_key)
    assert alike(over_rest) == alike(over_rpc) and len(over_rest) >= 3


def test_a_resubscription_replays_the_same_events_through_both(rpc, rest, echo_agent, alice_key):
    task = rpc.send(ECHO, key=alice_key).result["task"]
    route = f"tasks/{task['id']}:subscribe"
    over_rest = rest("GET", ECHO, route, key=alice_key, headers={"Last-Event-ID": "1"}).events()
    over_rpc = rpc_events(rpc, ECHO, "SubscribeToTask", {"id": task["id"]}, alice_key, {"Last-Event-ID": "1"})
    assert over_rest == over_rpc and len(over_rest) >= 2
    by_query = rest("GET", ECHO, route, key=alice_key, query={"lastEventId": "1"}).events()
    assert by_query == over_rest


def test_push_configs_are_the_same_through_both(rpc, rest, echo_agent, alice_key, hook):
    task = rpc.send(ECHO, key=alice_key, configuration={"returnImmediately": True}).result["task"]
    config = {"url": hook, "token": "tok", "authentication": {"scheme": "Bearer", "credentials": "c"}}
    made_rpc = rpc(ECHO, "CreateTaskPushNotificationConfig", {"taskId": task["id"], "id": "a", **config}, key=alice_key)
    configs = f"tasks/{task['id']}/pushNotificationConfigs"
    made_rest = rest("POST", ECHO, configs, key=alice_key, body={"id": "b", **config})
    assert {**made_rest.body, "id": "a"} == made_rpc.result
    for config_id in ("a", "b"):
        got = rpc(ECHO, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": config_id}, key=alice_key)
        assert rest("GET", ECHO, f"{configs}/{config_id}", key=alice_key).body == got.result
    listed = rpc(ECHO, "ListTaskPushNotificationConfigs", {"taskId": task["id"], "pageSize": 1}, key=alice_key).result
    assert rest("GET", ECHO, configs, key=alice_key, query={"pageSize": 1}).body == listed
    deleted = rpc(ECHO, "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "a"}, key=alice_key)
    assert rest("DELETE", ECHO, f"{configs}/b", key=alice_key).body == deleted.result == {}


def test_the_extended_card_is_the_same_through_both(rpc, rest, tenant, alice_key):
    make_agent(tenant, "ext", "echo", has_extended_card=True, extended_card={"skills": []})
    over_rpc = rpc("/agents/acme/ext/", "GetExtendedAgentCard", {}, key=alice_key).result
    assert rest("GET", "/agents/acme/ext/", "extendedAgentCard", key=alice_key).body == over_rpc


# Each refusal, given an id no task has and a finished task's: (method, params) over JSON-RPC,
# and (HTTP method, route, body, query) over HTTP+JSON.
REFUSALS = {
    "no such task": lambda none, done: ("GetTask", {"id": none}, "GET", f"tasks/{none}", None, None),
    "a negative history length": lambda none, done: (
        "GetTask",
        {"id": done, "historyLength": -1},
        *("GET", f"tasks/{done}", None, {"historyLength": -1}),
    ),
    "cancel of no task": lambda none, done: ("CancelTask", {"id": none}, "POST", f"tasks/{none}:cancel", None, None),
    "cancel of a finished task": lambda none, done: (
        "CancelTask",
        {"id": done},
        *("POST", f"tasks/{done}:cancel", None, None),
    ),
    "subscribe to a finished task": lambda none, done: (
        "SubscribeToTask",
        {"id": done},
        *("POST", f"tasks/{done}:subscribe", None, None),
    ),
    "a message without parts": lambda none, done: (
        "SendMessage",
        {"message": {"messageId": "m", "role": "ROLE_USER"}},
        *("POST", "message:send", {"message": {"messageId": "m", "role": "ROLE_USER"}}, None),
    ),
    "a message to a finished task": lambda none, done: (
        "SendMessage",
        {"message": user_message(messageId="m", taskId=done)},
        *("POST", "message:send", {"message": user_message(messageId="m", taskId=done)}, None),
    ),
    "a page too large": lambda none, done: ("ListTasks", {"pageSize": 101}, "GET", "tasks", None, {"pageSize": 101}),
    "no such state": lambda none, done: ("ListTasks", {"status": "BUSY"}, "GET", "tasks", None, {"status": "BUSY"}),
    "no such push config": lambda none, done: (
        "GetTaskPushNotificationConfig",
        {"taskId": done, "id": "c"},
        *("GET", f"tasks/{done}/pushNotificationConfigs/c", None, None),
    ),
    "a push config without a URL": lambda none, done: (
        "CreateTaskPushNotificationConfig",
        {"taskId": done, "url": ""},
        *("POST", f"tasks/{done}/pushNotificationConfigs", {"url": ""}, None),
    ),
    "no extended card": lambda none, done: ("GetExtendedAgentCard", {}, "GET", "extendedAgentCard", None, None),
}


@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_a_refusal_is_the_same_error_through_both(rpc, rest, echo_agent, alice_key, refusal):
    done = rpc.send(ECHO, key=alice_key).result["task"]["id"]
    method, params, http_method, route, body, query = REFUSALS[refusal](str(uuid.uuid4()), done)
    over_rpc = rpc(ECHO, method, params, key=alice_key).error
    over_rest = rest(http_method, ECHO, route, key=alice_key, body=body, query=query)
    assert (over_rest.reason, over_rest.status_error["message"]) == rpc_error_as_rest(over_rpc)
