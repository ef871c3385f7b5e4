"""The isolation matrix: two tenants with two keys each (one limited to one agent), a caller
with a bearer token from tenant A's OpenID Connect issuer (a real one on a loopback address), a
caller with a key on a public agent, and two anonymous callers. Every method of the agent endpoint is
tried by every caller against every other caller's task: only the owner succeeds, and every
refusal is exactly the answer for a task that does not exist (same status, same body but for
the id, same number of queries), so nothing tells a caller that someone else's task exists.

Anonymous callers are not one principal that can list: each anonymous task is reachable by
whoever holds its id (an unguessable UUID), and ListTasks shows an anonymous caller nothing.
Later endpoints add their rows to `OPERATIONS`; HTTP+JSON and gRPC have matrices of their own
below. The tenant API's matrix (/api/v1/, every route) is tests/test_isolation_tenant_api.py's,
beside this one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

import orjson
import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from registry.models import Attestation
from tests.conftest import make_agent, user_message, user_message_v03
from tests.oidc_issuer import AUDIENCE, ISSUER, Issuer, token

HOOK = "https://push.example/hook"


@dataclass
class Caller:
    name: str
    key: str | None
    agent: str  # the agent path it works on
    bearer: str | None = None

    @property
    def anonymous(self) -> bool:
        return self.key is None and self.bearer is None

    @property
    def headers(self) -> dict[str, str]:
        if self.key:
            return {"X-API-Key": self.key}
        return {"Authorization": f"Bearer {self.bearer}"} if self.bearer else {}


@dataclass
class Owned:
    owner: Caller
    task_id: str
    context_id: str


@pytest.fixture
def issuer_server(settings):
    settings.OUTBOUND_ALLOW_NETS = ["127.0.0.1/32"]  # the test's issuer, and nothing else
    server = Issuer()
    yield server
    server.stop()


@pytest.fixture
def world(db, dns, push_jobs, issuer_server):
    from accounts.services import api_key_create, oidc_issuer_set, tenant_ensure

    a, b = tenant_ensure(slug="ta", name="Tenant A"), tenant_ensure(slug="tb", name="Tenant B")
    oidc_issuer_set(tenant=a, issuer=ISSUER, audience=AUDIENCE, jwks_url=issuer_server.url)
    a_echo, a_open = make_agent(a, "echo", "echo"), make_agent(a, "open", "echo", is_public=True)
    b_echo = make_agent(b, "echo", "echo")
    make_agent(b, "other", "echo")

    def key(tenant, name, agents=()):
        return api_key_create(tenant=tenant, name=name, agents=agents)[1]

    callers = [
        Caller("a-all", key(a, "a-all"), "/agents/ta/echo/"),
        Caller("a-echo-only", key(a, "a-echo-only", [a_echo]), "/agents/ta/echo/"),
        Caller("b-all", key(b, "b-all"), "/agents/tb/echo/"),
        Caller("b-echo-only", key(b, "b-echo-only", [b_echo]), "/agents/tb/echo/"),
        Caller("a-oidc", None, "/agents/ta/echo/", bearer=token(sub="carol@a.example")),
        Caller("a-key-on-public", key(a, "a-key-on-public", [a_open]), "/agents/ta/open/"),
        Caller("anonymous-1", None, "/agents/ta/open/"),
        Caller("anonymous-2", None, "/agents/ta/open/"),
    ]
    return callers


def call(client, path: str, method: str, params: dict, caller: Caller):
    # Slash-named methods (A2A 0.3 and 0.1) go without A2A-Version, as those clients send them.
    headers = {**({} if "/" in method else {"A2A-Version": "1.0"}), **caller.headers}
    body = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
    with CaptureQueriesContext(connection) as queries:
        response = client.post(path, data=body, content_type="application/json", headers=headers)
    if response.streaming:  # 0.3's stream methods refuse in a stream of one error (docs/dialects.md)
        assert "/" in method, f"{method} streamed: the matrix expects a refusal or a plain answer"
        return response.status_code, only_error_event(response), len(queries)
    return response.status_code, orjson.loads(response.content), len(queries)


def only_error_event(response) -> dict:
    async def drained() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    frames = async_to_sync(drained)().split(b"\n\n")
    (event,) = [orjson.loads(line[5:]) for f in frames for line in f.split(b"\n") if line.startswith(b"data:")]
    assert "error" in event, event
    return event


@pytest.fixture
def tasks(client, world) -> list[Owned]:
    """One task per caller, on the agent it works on, with a push config."""
    owned = []
    for caller in world:
        params = {
            "message": user_message(f"private text of {caller.name}"),
            "configuration": {"returnImmediately": True},
        }
        status, body, _ = call(client, caller.agent, "SendMessage", params, caller)
        assert status == 200, body
        task = body["result"]["task"]
        config = {"taskId": task["id"], "id": "cfg", "url": HOOK}
        status, body, _ = call(client, caller.agent, "CreateTaskPushNotificationConfig", config, caller)
        assert status == 200, body
        owned.append(Owned(caller, task["id"], task["contextId"]))
    return owned


# Each operation names a task by its id; the last ones only read, so they run last.
OPERATIONS = {
    "SendMessage (follow-up)": lambda t: (
        "SendMessage",
        {"message": user_message("a stranger's follow-up", taskId=t), "configuration": {"returnImmediately": True}},
    ),
    "SubscribeToTask": lambda t: ("SubscribeToTask", {"id": t}),
    "SubscribeToTask (resume)": lambda t: ("SubscribeToTask", {"id": t, "lastEventId": "0"}),
    "SendStreamingMessage (follow-up)": lambda t: (
        "SendStreamingMessage",
        {"message": user_message("a stranger's follow-up", taskId=t)},
    ),
    "CreateTaskPushNotificationConfig": lambda t: (
        "CreateTaskPushNotificationConfig",
        {"taskId": t, "id": "mine", "url": HOOK},
    ),
    "GetTaskPushNotificationConfig": lambda t: ("GetTaskPushNotificationConfig", {"taskId": t, "id": "cfg"}),
    "ListTaskPushNotificationConfigs": lambda t: ("ListTaskPushNotificationConfigs", {"taskId": t}),
    "DeleteTaskPushNotificationConfig": lambda t: ("DeleteTaskPushNotificationConfig", {"taskId": t, "id": "cfg"}),
    # A2A 0.3's methods on the same tasks (whichever dialect created them).
    "message/send (follow-up)": lambda t: (
        "message/send",
        {"message": user_message_v03("a stranger's follow-up", taskId=t), "configuration": {"blocking": False}},
    ),
    "message/stream (follow-up)": lambda t: (
        "message/stream",
        {"message": user_message_v03("a stranger's follow-up", taskId=t)},
    ),
    "tasks/resubscribe": lambda t: ("tasks/resubscribe", {"id": t}),
    "tasks/resubscribe (resume)": lambda t: ("tasks/resubscribe", {"id": t, "lastEventId": "0"}),
    "tasks/pushNotificationConfig/set": lambda t: (
        "tasks/pushNotificationConfig/set",
        {"taskId": t, "pushNotificationConfig": {"id": "mine", "url": HOOK}},
    ),
    "tasks/pushNotificationConfig/get": lambda t: (
        "tasks/pushNotificationConfig/get",
        {"id": t, "pushNotificationConfigId": "cfg"},
    ),
    "tasks/pushNotificationConfig/get (first)": lambda t: ("tasks/pushNotificationConfig/get", {"id": t}),
    "tasks/pushNotificationConfig/list": lambda t: ("tasks/pushNotificationConfig/list", {"id": t}),
    "tasks/pushNotificationConfig/delete": lambda t: (
        "tasks/pushNotificationConfig/delete",
        {"id": t, "pushNotificationConfigId": "cfg"},
    ),
    "tasks/get": lambda t: ("tasks/get", {"id": t, "historyLength": 10}),
    "tasks/cancel": lambda t: ("tasks/cancel", {"id": t}),
    "GetTask": lambda t: ("GetTask", {"id": t, "historyLength": 10}),
    "CancelTask": lambda t: ("CancelTask", {"id": t}),
}


def same_principal(a: Caller, b: Caller) -> bool:
    # An anonymous task is anyone's who holds its id, on the agent it was made on.
    return a is b or (a.anonymous and b.anonymous and a.agent == b.agent)


def without(body: dict, task_id: str, stand_in: str) -> bytes:
    return orjson.dumps(body).replace(task_id.encode(), stand_in.encode())


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_a_caller_s_refusal_for_another_s_task_is_exactly_the_answer_for_no_task(client, world, tasks, operation):
    assert_refusals_read_as_absence(
        client, world, tasks, OPERATIONS[operation], operation, new_id=lambda: str(uuid.uuid4())
    )


def assert_refusals_read_as_absence(
    client, world, owned: list[Owned], operation, name: str, *, new_id, below: str = ""
) -> None:
    """Every caller's call on every other owner's task answers as the same call on an id no one
    used: the same status, body (but for the id) and number of queries, and no private text.
    `below`: the path below the agent's the calls go to (AIP's are below aip/)."""
    for caller in world:
        for target in owned:
            if same_principal(caller, target.owner):
                continue
            path = target.owner.agent + below
            theirs = call(client, path, *operation(target.task_id), caller)
            nobody = new_id()
            absent = call(client, path, *operation(nobody), caller)
            where = f"{caller.name} -> {target.owner.name}'s task: {name}"
            assert theirs[0] == absent[0], where
            assert without(theirs[1], target.task_id, "ID") == without(absent[1], nobody, "ID"), where
            assert theirs[2] == absent[2], f"{where}: {theirs[2]} queries, {absent[2]} for no task"
            assert "error" in theirs[1], where
            assert b"private text" not in orjson.dumps(theirs[1]), where


@pytest.mark.parametrize(
    "operation",
    [
        "GetTask",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "tasks/get",
        "tasks/pushNotificationConfig/get",
        "tasks/pushNotificationConfig/get (first)",
        "tasks/pushNotificationConfig/list",
    ],
)
def test_every_owner_reaches_its_own_task(client, world, tasks, operation):
    for target in tasks:
        method, params = OPERATIONS[operation](target.task_id)
        status, body, _ = call(client, target.owner.agent, method, params, target.owner)
        assert status == 200 and "result" in body, (target.owner.name, body)


def test_an_anonymous_task_is_reachable_by_its_id_alone(client, world, tasks):
    first = next(t for t in tasks if t.owner.name == "anonymous-1")
    second = next(c for c in world if c.name == "anonymous-2")
    status, body, _ = call(client, first.owner.agent, "GetTask", {"id": first.task_id}, second)
    assert status == 200 and body["result"]["id"] == first.task_id


def test_list_tasks_shows_each_caller_its_own_tasks_and_an_anonymous_caller_none(client, world, tasks):
    for caller in world:
        for context in (None, *[t.context_id for t in tasks]):
            params = {"historyLength": 10, **({"contextId": context} if context else {})}
            status, body, _ = call(client, caller.agent, "ListTasks", params, caller)
            assert status == 200, body
            listed = {t["id"] for t in body["result"]["tasks"]}
            mine = {t.task_id for t in tasks if t.owner is caller and (context is None or t.context_id == context)}
            assert listed == (set() if caller.anonymous else mine), (caller.name, context)
            assert body["result"]["totalSize"] == len(listed)


@pytest.mark.parametrize("reserved", ["anonymous", "Anonymous", "shared"])
def test_an_anonymous_caller_s_tasks_are_listed_to_no_key_not_even_one_naming_a_reserved_principal(
    client, world, tasks, reserved
):
    """Keys cannot be made with a name the server gives a principal; one made before that rule
    (here written straight to the store) is refused, so it never lists the anonymous tasks."""
    from accounts.models import ApiKey, Tenant
    from accounts.services import AccountError, api_key_create

    tenant = Tenant.objects.get(slug="ta")
    with pytest.raises(AccountError, match="must not be"):
        api_key_create(tenant=tenant, name="reserved", principal=reserved)
    legacy, plaintext = api_key_create(tenant=tenant, name="legacy")
    ApiKey.objects.filter(pk=legacy.pk).update(principal=reserved)
    anonymous = {t.task_id for t in tasks if t.owner.anonymous}
    assert anonymous
    status, body, _ = call(client, "/agents/ta/open/", "ListTasks", {}, Caller("legacy", plaintext, "/agents/ta/open/"))
    assert status == 401 and body["error"]["message"] == "the API key is not valid (unknown, revoked or expired)"
    status, _, _ = call(
        client, "/agents/ta/open/", "GetTask", {"id": next(iter(anonymous))}, Caller("legacy", plaintext, "")
    )
    assert status == 401
    for caller in world:
        if caller.anonymous:
            continue
        status, body, _ = call(client, caller.agent, "ListTasks", {"historyLength": 10}, caller)
        assert status == 200 and not {t["id"] for t in body["result"]["tasks"]} & anonymous, caller.name


def test_a_key_may_call_only_its_tenant_s_agents_and_those_it_is_limited_to(client, world):
    paths = ["/agents/ta/echo/", "/agents/ta/open/", "/agents/tb/echo/", "/agents/tb/other/"]
    allowed = {
        "a-all": {"/agents/ta/echo/", "/agents/ta/open/"},
        "a-oidc": {"/agents/ta/echo/", "/agents/ta/open/"},
        "a-echo-only": {"/agents/ta/echo/"},
        "b-all": {"/agents/tb/echo/", "/agents/tb/other/"},
        "b-echo-only": {"/agents/tb/echo/"},
        "a-key-on-public": {"/agents/ta/open/"},
        "anonymous-1": {"/agents/ta/open/"},
        "anonymous-2": {"/agents/ta/open/"},
    }
    for caller in world:
        for path in paths:
            status, body, _ = call(client, path, "ListTasks", {}, caller)
            expected = (
                200
                if path in allowed[caller.name]
                else 401
                if caller.anonymous or caller.bearer  # tenant B has no issuer: the token means nothing there
                else 403
            )
            assert status == expected, (caller.name, path, body)
            if status == 401 and caller.anonymous:
                needs = "an API key in the X-API-Key header" + (" or a bearer token" if "/ta/" in path else "")
                assert body["error"]["message"] == f"this agent needs {needs}"
            if status == 401 and caller.bearer:
                assert body["error"]["message"].startswith("this agent accepts no bearer tokens")
            if status == 403:
                assert body["error"]["message"] == "this API key may not call this agent"


@pytest.mark.parametrize("method", ["GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"])
def test_the_extended_card_is_for_callers_allowed_on_the_agent_only(client, world, tasks, method):
    from accounts.models import Agent

    Agent.objects.filter(slug__in=["echo", "open"]).update(has_extended_card=True, extended_card={"skills": []})
    for caller in world:
        status, body, _ = call(client, "/agents/ta/open/", method, {}, caller)
        if caller.anonymous:
            assert body["error"]["message"].endswith("card is only shown to callers with an API key")
        elif caller.name in ("a-all", "a-oidc", "a-key-on-public"):
            assert status == 200 and body["result"]["name"] == "Open"
        else:
            assert status == 403


def test_the_public_card_is_the_same_for_everyone(client, world):
    cards = {
        caller.name: client.get("/agents/ta/echo/.well-known/agent-card.json", headers=caller.headers).content
        for caller in world
    }
    assert len(set(cards.values())) == 1


def test_the_card_key_set_is_the_same_for_everyone_at_every_agent_and_the_site_root(client, world):
    """The card keys are the server's (protocols.card_signing): no caller and no tenant gets
    another set, and a card of tenant B verifies with the keys tenant A's callers see."""
    paths = [f"{agent}.well-known/agent-card-jwks.json" for agent in ("/agents/ta/echo/", "/agents/tb/echo/")]
    answers = {
        (caller.name, path): client.get(path, headers=caller.headers).content
        for caller in world
        for path in [*paths, "/.well-known/agent-card-jwks.json", f"{caller.agent}.well-known/agent-card-jwks.json"]
    }
    assert len(set(answers.values())) == 1
    from jwt.utils import base64url_decode

    kids = {k["kid"] for k in orjson.loads(next(iter(answers.values())))["keys"]}
    for agent in ("/agents/ta/echo/", "/agents/tb/echo/", "/agents/ta/open/"):
        card = client.get(f"{agent}.well-known/agent-card.json").json()
        assert {orjson.loads(base64url_decode(s["protected"]))["kid"] for s in card["signatures"]} <= kids


def test_an_inactive_agent_s_key_set_is_not_found_as_one_that_never_was(client, world):
    from accounts.models import Agent

    Agent.objects.filter(tenant__slug="tb", slug="other").update(is_active=False)
    answers = []
    for path in ("/agents/tb/other/", "/agents/tb/never/"):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(f"{path}.well-known/agent-card-jwks.json", headers=world[0].headers)
        body = response.content.replace(path.encode(), b"<agent>")
        answers.append((response.status_code, body, len(queries)))
    assert answers[0] == answers[1] and answers[0][0] == 404


# --- the same matrix over HTTP+JSON ---------------------------------------------------------
#
# The routes call the same methods, so a refusal is the same; this checks that the route
# adds nothing that tells (the path's id in the message, a status, a query).


def call_rest(client, path: str, http_method: str, route: str, query: dict | None, body, caller: Caller):
    from urllib.parse import urlencode

    headers = {"A2A-Version": "1.0", **caller.headers}
    url = path + route + (f"?{urlencode(query)}" if query else "")
    data = orjson.dumps(body) if body is not None else b""
    with CaptureQueriesContext(connection) as queries:
        response = client.generic(http_method, url, data=data, content_type="application/json", headers=headers)
    assert not response.streaming, f"{http_method} {route} streamed: the matrix expects a refusal or a plain answer"
    return response.status_code, orjson.loads(response.content), len(queries)


REST_OPERATIONS = {
    "POST message:send (follow-up)": lambda t: (
        *("POST", "message:send", None),
        {"message": user_message("a stranger's follow-up", taskId=t), "configuration": {"returnImmediately": True}},
    ),
    "GET tasks/{id}:subscribe": lambda t: ("GET", f"tasks/{t}:subscribe", None, None),
    "POST tasks/{id}:subscribe (resume)": lambda t: ("POST", f"tasks/{t}:subscribe", None, {"lastEventId": "0"}),
    "GET tasks/{id}:subscribe (resume)": lambda t: ("GET", f"tasks/{t}:subscribe", {"lastEventId": "0"}, None),
    "POST message:stream (follow-up)": lambda t: (
        *("POST", "message:stream", None),
        {"message": user_message("a stranger's follow-up", taskId=t)},
    ),
    "POST tasks/{id}/pushNotificationConfigs": lambda t: (
        *("POST", f"tasks/{t}/pushNotificationConfigs", None),
        {"id": "mine", "url": HOOK},
    ),
    "GET tasks/{id}/pushNotificationConfigs/{id}": lambda t: (
        "GET",
        f"tasks/{t}/pushNotificationConfigs/cfg",
        None,
        None,
    ),
    "GET tasks/{id}/pushNotificationConfigs": lambda t: ("GET", f"tasks/{t}/pushNotificationConfigs", None, None),
    "DELETE tasks/{id}/pushNotificationConfigs/{id}": lambda t: (
        *("DELETE", f"tasks/{t}/pushNotificationConfigs/cfg", None, None),
    ),
    "GET tasks/{id}": lambda t: ("GET", f"tasks/{t}", {"historyLength": 10}, None),
    "POST tasks/{id}:cancel": lambda t: ("POST", f"tasks/{t}:cancel", None, None),
}


@pytest.mark.parametrize("operation", list(REST_OPERATIONS))
def test_over_http_json_a_refusal_for_another_s_task_is_exactly_the_answer_for_no_task(client, world, tasks, operation):
    for caller in world:
        for target in tasks:
            if same_principal(caller, target.owner):
                continue
            path = target.owner.agent
            theirs = call_rest(client, path, *REST_OPERATIONS[operation](target.task_id), caller)
            nobody = str(uuid.uuid4())
            absent = call_rest(client, path, *REST_OPERATIONS[operation](nobody), caller)
            where = f"{caller.name} -> {target.owner.name}'s task: {operation}"
            assert theirs[0] == absent[0] and theirs[0] >= 400, where
            assert without(theirs[1], target.task_id, "ID") == without(absent[1], nobody, "ID"), where
            assert theirs[2] == absent[2], f"{where}: {theirs[2]} queries, {absent[2]} for no task"
            assert "error" in theirs[1], where
            assert b"private text" not in orjson.dumps(theirs[1]), where


@pytest.mark.parametrize("operation", ["GET tasks/{id}", "GET tasks/{id}/pushNotificationConfigs"])
def test_over_http_json_every_owner_reaches_its_own_task(client, world, tasks, operation):
    for target in tasks:
        status, body, _ = call_rest(
            client, target.owner.agent, *REST_OPERATIONS[operation](target.task_id), target.owner
        )
        assert status == 200 and "error" not in body, (target.owner.name, body)


def test_over_http_json_list_tasks_shows_each_caller_its_own_tasks_and_an_anonymous_caller_none(client, world, tasks):
    for caller in world:
        for context in (None, *[t.context_id for t in tasks]):
            query = {"historyLength": 10, **({"contextId": context} if context else {})}
            status, body, _ = call_rest(client, caller.agent, "GET", "tasks", query, None, caller)
            assert status == 200, body
            listed = {t["id"] for t in body["tasks"]}
            mine = {t.task_id for t in tasks if t.owner is caller and (context is None or t.context_id == context)}
            assert listed == (set() if caller.anonymous else mine), (caller.name, context)
            assert body["totalSize"] == len(listed)


def test_over_http_json_a_key_may_call_only_its_tenant_s_agents_and_those_it_is_limited_to(client, world):
    paths = ["/agents/ta/echo/", "/agents/ta/open/", "/agents/tb/echo/", "/agents/tb/other/"]
    for caller in world:
        for path in paths:
            over_rpc = call(client, path, "ListTasks", {}, caller)
            over_rest = call_rest(client, path, "GET", "tasks", None, None, caller)
            assert over_rest[0] == over_rpc[0], (caller.name, path)
            if over_rest[0] != 200:
                assert over_rest[1]["error"]["message"] == over_rpc[1]["error"]["message"], (caller.name, path)


# --- the same matrix over gRPC ---------------------------------------------------------------
#
# The gRPC binding's calls, in process through the same handler the server runs
# (protocols.grpc_server.answer_call): a refusal is the Status of a task that does not exist.


class GrpcContext:
    """What the handler reads of a grpc.aio call: its metadata and its peer."""

    def __init__(self, pairs: list[tuple[str, str]]):
        self.pairs = pairs

    def invocation_metadata(self):
        return tuple(self.pairs)

    def peer(self) -> str:
        return "ipv4:127.0.0.1:40000"


def call_grpc(path: str, method: str, request, caller: Caller, *, by_tenant_field: bool = False):
    """`by_tenant_field`: name the agent as the SDKs do, in the request's `tenant`, not the metadata."""
    from google.rpc import status_pb2

    from protocols import grpc_server
    from protocols.bindings import Reply
    from protocols.bindings.grpc_binding import GRPC_OK, RPCS

    _, tenant, agent = path.strip("/").split("/")
    pairs = [("a2a-version", "1.0")]
    if by_tenant_field:
        request.tenant = f"{tenant}/{agent}"
    else:
        pairs.append(("agentserver-agent", f"{tenant}/{agent}"))
    pairs += [(name.lower(), value) for name, value in caller.headers.items()]
    where = grpc_server.Listener(address="127.0.0.1:0", host="127.0.0.1")
    with CaptureQueriesContext(connection) as queries:
        answer = async_to_sync(grpc_server.answer_call)(
            RPCS[method], request.SerializeToString(), GrpcContext(pairs), where
        )
    assert isinstance(answer, Reply), f"{method} streamed: the matrix expects a refusal or a plain answer"
    if answer.status == GRPC_OK:
        return answer.status, {"result": answer.body.hex()}, len(queries)
    status = status_pb2.Status.FromString(answer.body)
    error = {
        "code": status.code,
        "message": status.message,
        "details": [d.SerializeToString().hex() for d in status.details],
    }
    return answer.status, {"error": error}, len(queries)


def _grpc_operations():
    from a2a.types import a2a_pb2

    def follow_up(t: str, **config) -> a2a_pb2.SendMessageRequest:
        message = a2a_pb2.Message(
            message_id=uuid.uuid4().hex, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="a stranger's follow-up")]
        )
        message.task_id = t
        return a2a_pb2.SendMessageRequest(message=message, configuration=a2a_pb2.SendMessageConfiguration(**config))

    return {
        "SendMessage (follow-up)": lambda t: ("SendMessage", follow_up(t, return_immediately=True)),
        "SendStreamingMessage (follow-up)": lambda t: ("SendStreamingMessage", follow_up(t)),
        "SubscribeToTask": lambda t: ("SubscribeToTask", a2a_pb2.SubscribeToTaskRequest(id=t)),
        "CreateTaskPushNotificationConfig": lambda t: (
            "CreateTaskPushNotificationConfig",
            a2a_pb2.TaskPushNotificationConfig(task_id=t, id="mine", url=HOOK),
        ),
        "GetTaskPushNotificationConfig": lambda t: (
            "GetTaskPushNotificationConfig",
            a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=t, id="cfg"),
        ),
        "ListTaskPushNotificationConfigs": lambda t: (
            "ListTaskPushNotificationConfigs",
            a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=t),
        ),
        "DeleteTaskPushNotificationConfig": lambda t: (
            "DeleteTaskPushNotificationConfig",
            a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id=t, id="cfg"),
        ),
        "GetTask": lambda t: ("GetTask", a2a_pb2.GetTaskRequest(id=t, history_length=10)),
        "CancelTask": lambda t: ("CancelTask", a2a_pb2.CancelTaskRequest(id=t)),
    }


GRPC_OPERATIONS = _grpc_operations()


@pytest.mark.parametrize("operation", list(GRPC_OPERATIONS))
def test_over_grpc_a_refusal_for_another_s_task_is_exactly_the_answer_for_no_task(client, world, tasks, operation):
    for caller in world:
        for target in tasks:
            if same_principal(caller, target.owner):
                continue
            path = target.owner.agent
            by_tenant_field = caller.name < target.owner.name  # half the pairs name the agent each way
            theirs = call_grpc(
                path, *GRPC_OPERATIONS[operation](target.task_id), caller, by_tenant_field=by_tenant_field
            )
            nobody = str(uuid.uuid4())
            absent = call_grpc(path, *GRPC_OPERATIONS[operation](nobody), caller, by_tenant_field=by_tenant_field)
            where = f"{caller.name} -> {target.owner.name}'s task: {operation}"
            assert theirs[0] == absent[0] and theirs[0] >= 400, where
            assert without(theirs[1], target.task_id, "ID") == without(absent[1], nobody, "ID"), where
            assert theirs[2] == absent[2], f"{where}: {theirs[2]} queries, {absent[2]} for no task"
            assert b"private text" not in orjson.dumps(theirs[1]), where


@pytest.mark.parametrize("operation", ["GetTask", "ListTaskPushNotificationConfigs"])
def test_over_grpc_every_owner_reaches_its_own_task(client, world, tasks, operation):
    for target in tasks:
        status, body, _ = call_grpc(target.owner.agent, *GRPC_OPERATIONS[operation](target.task_id), target.owner)
        assert status == 200 and "error" not in body, (target.owner.name, body)


def test_over_grpc_list_tasks_shows_each_caller_its_own_tasks_and_an_anonymous_caller_none(client, world, tasks):
    from a2a.types import a2a_pb2

    for caller in world:
        for context in (None, *[t.context_id for t in tasks]):
            request = a2a_pb2.ListTasksRequest(history_length=10, context_id=context or "")
            status, body, _ = call_grpc(caller.agent, "ListTasks", request, caller)
            assert status == 200, body
            listed_page = a2a_pb2.ListTasksResponse.FromString(bytes.fromhex(body["result"]))
            listed = {t.id for t in listed_page.tasks}
            mine = {t.task_id for t in tasks if t.owner is caller and (context is None or t.context_id == context)}
            assert listed == (set() if caller.anonymous else mine), (caller.name, context)
            assert listed_page.total_size == len(listed)


def test_over_grpc_a_key_may_call_only_its_tenant_s_agents_and_those_it_is_limited_to(client, world):
    from a2a.types import a2a_pb2

    paths = ["/agents/ta/echo/", "/agents/ta/open/", "/agents/tb/echo/", "/agents/tb/other/"]
    for caller in world:
        for path in paths:
            over_rpc = call(client, path, "ListTasks", {}, caller)
            for by_tenant_field in (False, True):
                request = a2a_pb2.ListTasksRequest()
                over_grpc = call_grpc(path, "ListTasks", request, caller, by_tenant_field=by_tenant_field)
                where = (caller.name, path, "tenant field" if by_tenant_field else "metadata")
                assert over_grpc[0] == over_rpc[0], where
                if over_grpc[0] != 200:
                    assert over_grpc[1]["error"]["message"] == over_rpc[1]["error"]["message"], where


# --- what the agent's tenant configures ------------------------------------------------------
#
# An agent's secret, its executor's settings and what its executor keeps on a task are the
# tenant's and the executor's: no caller's answer carries them, whoever asks.

CONFIGURED = ("tenant-secret-marker", "settings-marker", "executor-state-marker")


def test_no_caller_reads_an_agent_s_secret_its_settings_or_its_executor_s_state(client, world, tasks):
    from accounts.models import Agent
    from accounts.services import agent_secret_set
    from tasks_app.models import Task

    for agent in Agent.objects.all():
        agent_secret_set(agent=agent, secret="tenant-secret-marker")
    Agent.objects.update(settings={"url": "https://settings-marker.example"}, has_extended_card=True)
    Task.objects.update(executor_state={"upstream": "executor-state-marker"})
    for owned in tasks:
        caller = owned.owner
        answers = [
            call(client, caller.agent, "GetTask", {"id": owned.task_id, "historyLength": 10}, caller)[1],
            call(client, caller.agent, "ListTasks", {}, caller)[1],
            call(client, caller.agent, "GetExtendedAgentCard", {}, caller)[1],
            client.get(f"{caller.agent}.well-known/agent-card.json", headers=caller.headers).json(),
        ]
        shown = orjson.dumps(answers).decode()
        assert not any(marker in shown for marker in CONFIGURED), caller.name
        sealed = Agent.objects.filter(secret_sealed__gt="").values_list("secret_sealed", flat=True).first()
        assert sealed and sealed not in shown


# --- the registry (/api/registry/) ------------------------------------------------------------
#
# A tenant's entries that are not listed (a draft, one pending its first review, a rejected and
# a suspended one) are seen by their submitter, the tenant's members and the curators; to anyone
# else (another tenant's owner, a user of no tenant, an anonymous caller) every operation on one
# answers exactly as for an entry that does not exist. A listed entry's newer card, not approved
# yet, is its owners' and curators' only.

REGISTRY = "/api/registry/agents/"
HIDDEN_STATES = ("draft", "pending", "rejected", "suspended")


@dataclass
class RegistryCaller:
    name: str
    token: str | None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Token {self.token}"} if self.token else {}


@pytest.fixture
def registry_world(db, django_user_model):
    from django.contrib.auth.models import Permission

    from accounts.services import member_add, tenant_ensure
    from registry.tokens import token_create
    from tests.registry_factories import make_entry, new_version

    a, b = tenant_ensure(slug="ta", name="Tenant A"), tenant_ensure(slug="tb", name="Tenant B")
    users = {name: django_user_model.objects.create_user(name) for name in ("submitter", "a-operator", "a-viewer")}
    users |= {name: django_user_model.objects.create_user(name) for name in ("b-owner", "stranger", "curator")}
    member_add(tenant=a, user=users["a-operator"], role="operator")
    member_add(tenant=a, user=users["a-viewer"], role="viewer")
    member_add(tenant=b, user=users["b-owner"], role="owner")
    users["curator"].user_permissions.add(Permission.objects.get(codename="curate_entry"))
    callers = {name: RegistryCaller(name, token_create(user=user)[1]) for name, user in users.items()}
    callers["anonymous"] = RegistryCaller("anonymous", None)
    hidden = {
        state: make_entry(name=f"Secret {state} agent", state=state, tenant=a, submitted_by=users["submitter"])
        for state in HIDDEN_STATES
    }
    listed = make_entry(name="Listed agent", tenant=a, submitted_by=users["submitter"])
    new_version(listed, name="Listed agent", description="Unreleased zeppelin features.")
    # Each hidden entry has an attestation (the suspended one's withdrawn): outsiders must not
    # learn even that from the attestation routes.
    now = timezone.now()
    for state, entry in hidden.items():
        Attestation.objects.create(
            entry=entry,
            jti=uuid.uuid4().hex,
            token=f"Secret.{state}.jws",
            card_hash=entry.current_version.hash,
            issued_at=now,
            expires_at=now + timedelta(days=1),
            revoked_at=now if state == "suspended" else None,
            revoked_reason="Secret reason" if state == "suspended" else "",
        )
    return {"callers": callers, "hidden": hidden, "listed": listed}


INSIDERS = ("submitter", "a-operator", "a-viewer", "curator")
OUTSIDERS = ("b-owner", "stranger", "anonymous")
MANAGERS = ("submitter", "a-operator", "curator")

REGISTRY_OPERATIONS = {
    "detail": lambda pk: ("GET", f"{REGISTRY}{pk}/", None),
    "version": lambda pk: ("GET", f"{REGISTRY}{pk}/versions/1/", None),
    "flag": lambda pk: ("POST", f"{REGISTRY}{pk}/flag/", {"reason": "looks odd"}),
    "verify": lambda pk: ("POST", f"{REGISTRY}{pk}/verify/", {"method": "http"}),
    "transition": lambda pk: ("POST", f"{REGISTRY}{pk}/transition/", {"to": "pending"}),
    "attestation": lambda pk: ("GET", f"{REGISTRY}{pk}/attestation/", None),
    # The directory's own route for verifiers (no token sign-in there: outsiders and insiders alike
    # see a hidden entry's as no entry's; its holder asks the status URL, by jti).
    "attestation.jwt": lambda pk: ("GET", f"/registry/{pk}/attestation.jwt", None),
}


def registry_call(client, caller: RegistryCaller, method: str, path: str, body, query: dict | None = None):
    from urllib.parse import urlencode

    with CaptureQueriesContext(connection) as queries:
        if method == "GET":
            url = f"{path}?{urlencode(query, doseq=True)}" if query else path
            response = client.get(url, headers=caller.headers)
        else:
            response = client.post(
                path, data=orjson.dumps(body), content_type="application/json", headers=caller.headers
            )
    return response.status_code, orjson.loads(response.content), len(queries)


@pytest.mark.parametrize("operation", list(REGISTRY_OPERATIONS))
def test_a_hidden_entry_is_to_outsiders_exactly_an_entry_that_does_not_exist(client, registry_world, operation):
    missing = max(e.pk for e in registry_world["hidden"].values()) + 1000
    for name in OUTSIDERS:
        caller = registry_world["callers"][name]
        for state, entry in registry_world["hidden"].items():
            theirs = registry_call(client, caller, *REGISTRY_OPERATIONS[operation](entry.pk))
            absent = registry_call(client, caller, *REGISTRY_OPERATIONS[operation](missing))
            where = f"{name} -> a {state} entry: {operation}"
            assert theirs[0] == absent[0] and theirs[0] in (401, 404), where
            assert theirs[1] == absent[1], where
            assert theirs[2] == absent[2], f"{where}: {theirs[2]} queries, {absent[2]} for no entry"
            assert b"Secret" not in orjson.dumps(theirs[1]), where


@pytest.mark.parametrize("query", [{}, {"q": "secret"}, {"mine": "true"}, {"state": list(HIDDEN_STATES)}])
def test_hidden_entries_are_in_no_outsider_s_search(client, registry_world, query):
    hidden = {e.pk for e in registry_world["hidden"].values()}
    for name in (*OUTSIDERS, *INSIDERS):
        caller = registry_world["callers"][name]
        status, body, _ = registry_call(client, caller, "GET", REGISTRY, None, query)
        if name == "anonymous" and query.get("mine"):
            assert status == 401
            continue
        assert status == 200, (name, body)
        found = {r["id"] for r in body["results"]}
        if name in OUTSIDERS:
            assert not found & hidden, (name, query)
        elif query.get("mine") and name != "curator" or query.get("state"):
            assert hidden <= found, (name, query)  # their own (the curator's: every one by state)


def test_hidden_entries_are_seen_by_their_submitter_the_tenant_s_members_and_curators(client, registry_world):
    for name in INSIDERS:
        caller = registry_world["callers"][name]
        for state, entry in registry_world["hidden"].items():
            status, body, _ = registry_call(client, caller, "GET", f"{REGISTRY}{entry.pk}/", None)
            assert status == 200 and body["state"] == state, (name, state)
            # Every member (a viewer too) sees all of it; only managers act on it.
            assert body["decisions"] is not None and (body["proof"] is not None) == (name in MANAGERS), (name, state)
            status, _, _ = registry_call(client, caller, "GET", f"{REGISTRY}{entry.pk}/versions/1/", None)
            assert status == 200, (name, state)
            status, body, _ = registry_call(client, caller, *REGISTRY_OPERATIONS["verify"](entry.pk))
            assert status == (200 if name in MANAGERS else 403), (name, state, body)
            status, body, _ = registry_call(client, caller, *REGISTRY_OPERATIONS["attestation"](entry.pk))
            assert status == 200 and body["state"] == ("revoked" if state == "suspended" else "valid"), (name, state)


def test_an_attestation_s_status_is_answered_to_whoever_holds_its_id_and_no_one_else(client, registry_world):
    for state, entry in registry_world["hidden"].items():
        attestation = Attestation.objects.get(entry=entry)
        held = client.get(f"/registry/attestations/{attestation.jti}/")
        assert held.status_code == (410 if state == "suspended" else 200), state
        assert held.json()["entry"] == entry.pk and b"Secret.%s" % state.encode() not in held.content
        guessed = client.get(f"/registry/attestations/{uuid.uuid4().hex}/")
        assert guessed.status_code == 404 and str(entry.pk) not in guessed.content.decode()


def test_a_listed_entry_s_newer_card_is_not_public_until_approved(client, registry_world):
    listed = registry_world["listed"]
    for name in (*OUTSIDERS, *INSIDERS):
        caller = registry_world["callers"][name]
        status, body, _ = registry_call(client, caller, "GET", f"{REGISTRY}{listed.pk}/", None)
        assert status == 200 and body["state"] == "pending", name
        owners = name in INSIDERS
        assert body["card_version"] == (2 if owners else 1), name
        assert [v["number"] for v in body["versions"]] == ([2, 1] if owners else [1]), name
        assert (b"zeppelin" in orjson.dumps(body)) == owners, name
        newer = registry_call(client, caller, "GET", f"{REGISTRY}{listed.pk}/versions/2/", None)
        never = registry_call(client, caller, "GET", f"{REGISTRY}{listed.pk}/versions/99/", None)
        assert newer[0] == (200 if owners else 404), name
        if not owners:
            assert (newer[0], newer[2]) == (never[0], never[2]), name
        status, body, _ = registry_call(client, caller, "GET", REGISTRY, None, {"q": "zeppelin"})
        assert body["results"] == [], name  # search reads the approved card


def test_the_submit_page_is_the_same_for_everyone_and_names_no_entry(client, registry_world, django_user_model):
    """/registry/submit/ (a page, signed in by the session): the steps, the same to anyone; and
    the site's root leads everyone to the directory."""
    import re

    shown, root = {}, set()
    for name in (*INSIDERS, *OUTSIDERS):
        client.logout()
        if name != "anonymous":
            client.force_login(django_user_model.objects.get(username=name))
        response = client.get("/registry/submit/")
        assert response.status_code == 200, name
        shown[name] = re.search(r"<main.*</main>", response.content.decode(), re.S).group(0)
        root.add((client.get("/").status_code, client.get("/")["Location"]))  # the site's root, too
    assert len(set(shown.values())) == 1 and root == {(302, "/registry/")}
    assert "Secret" not in shown["curator"] and "Listed agent" not in shown["curator"]


# --- the same matrix in A2A 0.1, whose clients choose their tasks' ids -----------------------
#
# A 0.1 request names a task by the id its client chose (long and random here: anonymous
# callers must choose such ids, docs/tenancy.md). Another caller's id answers exactly as one
# no one used; the same id sent by another caller is that caller's own task.


def _v01_message(text: str) -> dict:
    return {"role": "user", "parts": [{"type": "text", "text": text}]}


@pytest.fixture
def v01_tasks(client, world, settings) -> list[Owned]:
    """One 0.1 task per caller under an id it chose, with a push config. (A 0.1 send waits for
    the task to settle, and here no agent runs: the matrix runs in one transaction.)"""
    settings.A2A_BLOCKING_TIMEOUT = 0.2
    owned = []
    for caller in world:
        task_id = uuid.uuid4().hex
        params = {"id": task_id, "message": _v01_message(f"private text of {caller.name}")}
        status, body, _ = call(client, caller.agent, "tasks/send", params, caller)
        assert status == 200 and body["result"]["id"] == task_id, body
        config = {"id": task_id, "pushNotificationConfig": {"url": HOOK}}
        status, body, _ = call(client, caller.agent, "tasks/pushNotification/set", config, caller)
        assert status == 200, body
        owned.append(Owned(caller, task_id, body["result"]["id"]))
    return owned


V01_OPERATIONS = {
    "tasks/get": lambda t: ("tasks/get", {"id": t, "historyLength": 10}),
    "tasks/resubscribe": lambda t: ("tasks/resubscribe", {"id": t}),
    "tasks/pushNotification/set": lambda t: (
        "tasks/pushNotification/set",
        {"id": t, "pushNotificationConfig": {"url": HOOK}},
    ),
    "tasks/pushNotification/get": lambda t: ("tasks/pushNotification/get", {"id": t}),
    "tasks/cancel": lambda t: ("tasks/cancel", {"id": t}),
}


@pytest.mark.parametrize("operation", list(V01_OPERATIONS))
def test_in_0_1_a_refusal_for_another_s_task_is_exactly_the_answer_for_no_task(client, world, v01_tasks, operation):
    name = f"0.1 {operation}"
    assert_refusals_read_as_absence(
        client, world, v01_tasks, V01_OPERATIONS[operation], name, new_id=lambda: uuid.uuid4().hex
    )


def test_in_0_1_the_same_id_sent_by_another_caller_is_its_own_task(client, world, v01_tasks):
    from tasks_app.models import Task

    sent_anonymously: set[str] = set()  # ids an anonymous caller made a task of, in the shared scope
    for caller in world:
        for target in v01_tasks:
            if caller is target.owner or caller.agent != target.owner.agent:
                continue
            if caller.anonymous and target.task_id in sent_anonymously:
                continue  # the other anonymous caller's task of that id: the case below
            if caller.anonymous:
                sent_anonymously.add(target.task_id)
            params = {"id": target.task_id, "message": _v01_message("a stranger's message"), "historyLength": 9}
            status, body, _ = call(client, caller.agent, "tasks/send", params, caller)
            where = f"{caller.name} -> {target.owner.name}'s 0.1 id"
            assert status == 200, (where, body)
            if same_principal(caller, target.owner):
                # Anonymous callers share one scope: the id is that task (documented; hence long
                # ids), which is still waiting for its agent here.
                assert body["error"]["code"] == -32004 and "is submitted" in body["error"]["message"], where
                continue
            assert "result" in body, (where, body)
            texts = [m["parts"][0]["text"] for m in body["result"]["history"]]
            assert texts == ["a stranger's message"], where
        # The owner's task is as it was.
        status, body, _ = call(
            client, caller.agent, "tasks/get", {"id": next(t.task_id for t in v01_tasks if t.owner is caller)}, caller
        )
        assert status == 200
    owners = Task.objects.filter(client_task_id__in=[t.task_id for t in v01_tasks]).values_list("owner", flat=True)
    assert "anonymous" in owners


# --- the same matrix in ACPs AIP, whose Leaders choose their tasks' ids ---------------------------


def _aip_message(command: str, task_id: str, text: str | None = None) -> dict:
    return {
        "type": "message",
        "id": f"msg-{uuid.uuid4()}",
        "sentAt": "2025-09-01T11:58:00+08:00",
        "senderRole": "leader",
        "senderId": "leader-aic",
        "command": command,
        "dataItems": [] if text is None else [{"type": "text", "text": text}],
        "taskId": task_id,
    }


@pytest.fixture
def aip_tasks(client, world, settings) -> list[Owned]:
    """One AIP task per caller under an id it chose, with a notification config. (No agent
    runs: the matrix runs in one transaction; a start answers once its wait is over.)"""
    settings.AIP_RESPONSE_TIMEOUT = 0.05
    owned = []
    for caller in world:
        task_id = uuid.uuid4().hex
        params = {"message": _aip_message("start", task_id, f"private text of {caller.name}")}
        status, body, _ = call(client, caller.agent + "aip/", "rpc", params, caller)
        assert status == 200 and body["result"]["id"] == task_id, body
        config = {"taskId": task_id, "url": HOOK, "token": "t"}
        status, body, _ = call(client, caller.agent + "aip/", "notification/set", config, caller)
        assert status == 200 and "result" in body, body
        owned.append(Owned(caller, task_id, body["result"]["id"]))
    return owned


def _aip_command(command: str):
    return lambda t: ("rpc", {"message": _aip_message(command, t, "x")})


AIP_OPERATIONS = {
    **{f"rpc {command}": _aip_command(command) for command in ("continue", "cancel", "complete", "get")},
    "stream re-stream": lambda t: ("stream", {"message": _aip_message("re-stream", t)}),
    "notification/get": lambda t: ("notification/get", {"taskId": t}),
}


@pytest.mark.parametrize("operation", list(AIP_OPERATIONS))
def test_in_aip_a_refusal_for_another_s_task_is_exactly_the_answer_for_no_task(client, world, aip_tasks, operation):
    name = f"AIP {operation}"
    assert_refusals_read_as_absence(
        client, world, aip_tasks, AIP_OPERATIONS[operation], name, new_id=lambda: uuid.uuid4().hex, below="aip/"
    )


def test_in_aip_the_same_id_started_by_another_caller_is_its_own_task(client, world, aip_tasks):
    from tasks_app.models import Task

    for caller in world:
        for target in aip_tasks:
            if same_principal(caller, target.owner) or caller.agent != target.owner.agent:
                continue
            params = {"message": _aip_message("start", target.task_id, "a stranger's start")}
            status, body, _ = call(client, caller.agent + "aip/", "rpc", params, caller)
            assert status == 200 and body["result"]["id"] == target.task_id, body
            got = {"message": _aip_message("get", target.task_id)}
            status, body, _ = call(client, caller.agent + "aip/", "rpc", got, caller)
            texts = [m["dataItems"][0]["text"] for m in body["result"]["messageHistory"] if m["dataItems"]]
            assert texts == ["a stranger's start"], (caller.name, target.owner.name, body)
    assert Task.objects.filter(client_task_id=aip_tasks[0].task_id).count() >= 2


# --- the same agents at their own host names (protocols.hosts) ---------------------------------
# Each agent is also bound to a name: a call at that name's root must be exactly the call by the
# agent's path, so the matrix above runs again through the names.

NAMES = {"/agents/ta/echo/": "echo.a.example", "/agents/ta/open/": "open.a.example", "/agents/tb/echo/": "b.example"}


class ByName:
    """The test client, calling each agent at the root of its bound name instead of its path."""

    def __init__(self, client) -> None:
        self.client = client

    def post(self, path: str, *, headers: dict[str, str], **kwargs):
        agent = next(p for p in NAMES if path.startswith(p))
        return self.client.post("/" + path.removeprefix(agent), headers={**headers, "Host": NAMES[agent]}, **kwargs)


@pytest.fixture
def named(world):
    from accounts.host_services import host_bind
    from accounts.models import Agent

    for path, name in NAMES.items():
        tenant, slug = path.split("/")[2:4]
        host_bind(agent=Agent.objects.get(tenant__slug=tenant, slug=slug), host=name)


@pytest.mark.parametrize("operation", ["GetTask", "CancelTask", "tasks/get", "GetTaskPushNotificationConfig"])
def test_at_bound_names_a_refusal_for_another_s_task_is_exactly_the_answer_for_no_task(
    client, world, tasks, named, operation
):
    assert_refusals_read_as_absence(
        ByName(client), world, tasks, OPERATIONS[operation], operation, new_id=lambda: str(uuid.uuid4())
    )


def test_at_bound_names_every_owner_reaches_its_own_task(client, world, tasks, named):
    for target in tasks:
        status, body, _ = call(ByName(client), target.owner.agent, "GetTask", {"id": target.task_id}, target.owner)
        assert status == 200 and body["result"]["id"] == target.task_id, (target.owner.name, body)


def test_a_bound_name_leads_to_its_agent_alone_whatever_the_path(client, world, named):
    """Another agent's path at a bound name is a route of the bound agent that does not exist:
    tenant B's key reaches neither tenant A's agent nor its own through A's name."""
    b_all = next(c for c in world if c.name == "b-all")
    for path in ("/agents/tb/echo/", "/agents/tb/other/", "/agents/ta/open/"):
        status, body, _ = call(ByName(client), "/agents/ta/echo/" + path.lstrip("/"), "ListTasks", {}, b_all)
        assert status == 404, (path, body)
    status, _, _ = call(ByName(client), "/agents/ta/echo/", "ListTasks", {}, b_all)
    assert status == 403
