"""The isolation matrix: two tenants with two keys each (one limited to one agent), a caller
with a bearer token from tenant A's OpenID Connect issuer (a real one on a loopback address), a
caller with a key on a public agent, and two anonymous callers. Every method of the agent endpoint is
tried by every caller against every other caller's task: only the owner succeeds, and every
refusal is exactly the answer for a task that does not exist (same status, same body but for
the id, same number of queries), so nothing tells a caller that someone else's task exists.

Anonymous callers are not one principal that can list: each anonymous task is reachable by
whoever holds its id (an unguessable UUID), and ListTasks shows an anonymous caller nothing.
Later endpoints add their rows to `OPERATIONS`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import orjson
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import make_agent, user_message
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
    headers = {"A2A-Version": "1.0", **caller.headers}
    body = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
    with CaptureQueriesContext(connection) as queries:
        response = client.post(path, data=body, content_type="application/json", headers=headers)
    assert not response.streaming, f"{method} streamed: the matrix expects a refusal or a plain answer"
    return response.status_code, orjson.loads(response.content), len(queries)


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
    for caller in world:
        for target in tasks:
            if same_principal(caller, target.owner):
                continue
            path = target.owner.agent
            method, params = OPERATIONS[operation](target.task_id)
            theirs = call(client, path, method, params, caller)
            nobody = str(uuid.uuid4())
            method, params = OPERATIONS[operation](nobody)
            absent = call(client, path, method, params, caller)
            where = f"{caller.name} -> {target.owner.name}'s task: {operation}"
            assert theirs[0] == absent[0], where
            assert without(theirs[1], target.task_id, "ID") == without(absent[1], nobody, "ID"), where
            assert theirs[2] == absent[2], f"{where}: {theirs[2]} queries, {absent[2]} for no task"
            assert "error" in theirs[1], where
            assert b"private text" not in orjson.dumps(theirs[1]), where


@pytest.mark.parametrize("operation", ["GetTask", "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs"])
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


def test_the_extended_card_is_for_callers_allowed_on_the_agent_only(client, world, tasks):
    from accounts.models import Agent

    Agent.objects.filter(slug__in=["echo", "open"]).update(has_extended_card=True, extended_card={"skills": []})
    for caller in world:
        status, body, _ = call(client, "/agents/ta/open/", "GetExtendedAgentCard", {}, caller)
        if caller.anonymous:
            assert body["error"]["message"] == "the extended agent card is only shown to callers with an API key"
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
