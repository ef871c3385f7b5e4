"""The isolation matrix of the tenant API (tests/test_isolation.py's, for /api/v1/): a caller of
tenant B (an owner's management key, or a token of B's issuer with the owner's role) gets, on
every route of tenant A, exactly the answer for a tenant that does not exist; on its own
tenant's routes, another tenant's object (a task, a key, a push config, a delivery, a member)
is exactly an object that does not exist; a key without a management role is 403 everywhere,
its own tenant's routes and others' alike. Nothing a refusal answers changes anything."""

from __future__ import annotations

import dataclasses
import uuid

import orjson
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import AgentHost, ApiKey, Membership, MembershipInvitation, OidcIssuer
from push.models import PushConfig, PushDelivery
from tasks_app.models import Task
from tests.oidc_issuer import AUDIENCE, Issuer, token
from tests.tenant_api_world import API, ROUTE_COUNT, Side, api, build, host_of, routes


@pytest.fixture
def world(db, client, django_user_model):
    return build(client, django_user_model)


def stored() -> tuple:
    """What the tenant API could change, in full."""
    return (
        sorted(Membership.objects.values_list("tenant_id", "user_id", "role")),
        sorted(MembershipInvitation.objects.values_list("pk", "tenant_id", "username", "role", "answer")),
        sorted(ApiKey.objects.values_list("prefix", "revoked_at", "management_role")),
        sorted(OidcIssuer.objects.values_list("tenant_id", "issuer", "jwks_url", "role_claim")),
        sorted(Task.objects.values_list("id", "state", "run_token", "run_requested_at")),
        sorted(PushConfig.objects.values_list("pk", "deleted_at")),
        sorted(PushDelivery.objects.values_list("pk", "state", "attempts")),
        sorted((str(a.tenant_id), a.slug, a.description, a.is_active) for a in _agents()),
        sorted(AgentHost.objects.values_list("agent_id", "host", "card_version", "proof", "proven_at")),
    )


def _agents():
    from accounts.models import Agent

    return Agent.objects.all()


def nowhere(side: Side) -> Side:
    """The same routes on a tenant that does not exist."""
    return dataclasses.replace(side, slug="no-such-tenant", objects={})


@pytest.mark.parametrize("index", range(ROUTE_COUNT))
def test_another_tenant_s_key_gets_exactly_the_answer_for_no_tenant_on_every_route(client, world, index):
    before = stored()
    method, theirs, _, body = routes(world.a)[index]
    _, absent, _, _ = routes(nowhere(world.a))[index]
    for role in ("owner", "viewer"):
        key = world.b.keys[role]
        api(client, "GET", f"{API}/tb/", key)  # its last use recorded now, not in one of the two below
        with CaptureQueriesContext(connection) as seen_theirs:
            answer_theirs = api(client, method, theirs, key, body)
        with CaptureQueriesContext(connection) as seen_absent:
            answer_absent = api(client, method, absent, key, body)
        assert answer_theirs == answer_absent == (404, {"detail": "no tenant with this slug (or not one you manage)"})
        assert len(seen_theirs) == len(seen_absent)
    assert stored() == before


# Routes naming an object by an id of its own, and a stand-in id no object has.
BY_ID = {
    "tasks/{id}/": lambda s: (f"tasks/{s.task_id}/", f"tasks/{uuid.uuid4()}/"),
    "tasks/{id}/cancel/": lambda s: (f"tasks/{s.task_id}/cancel/", f"tasks/{uuid.uuid4()}/cancel/"),
    "keys/{prefix}/": lambda s: (f"keys/{s.key_prefix}/", "keys/0123456789ab/"),
    "push-configs/{id}/": lambda s: (f"push-configs/{s.config_pk}/", "push-configs/999999/"),
    "deliveries/{id}/": lambda s: (f"deliveries/{s.delivery_pk}/", "deliveries/999999/"),
    "deliveries/{id}/retry/": lambda s: (f"deliveries/{s.delivery_pk}/retry/", "deliveries/999999/retry/"),
    "members/{username}/": lambda s: ("members/vera/", "members/nobody-at-all/"),
    "tasks/{id}/redispatch/": lambda s: (f"tasks/{s.task_id}/redispatch/", f"tasks/{uuid.uuid4()}/redispatch/"),
    "tasks/{id}/files/…/": lambda s: (
        f"tasks/{s.task_id}/files/message/{s.message_pk}/1/",
        f"tasks/{uuid.uuid4()}/files/message/{s.message_pk}/1/",
    ),
    "agents/echo/hosts/{host}/": lambda s: (f"agents/echo/hosts/{host_of(s.slug)}/", "agents/echo/hosts/no.example/"),
    "agents/echo/hosts/{host}/verify/": lambda s: (
        f"agents/echo/hosts/{host_of(s.slug)}/verify/",
        "agents/echo/hosts/no.example/verify/",
    ),
    "group-memberships/{id}/": lambda s: (f"group-memberships/{s.membership_pk}/", "group-memberships/999999/"),
    "invitations/{id}/": lambda s: (f"invitations/{s.invitation_pk}/", "invitations/999999/"),
}
METHODS = {
    "tasks/{id}/": ["GET"],
    "tasks/{id}/cancel/": ["POST"],
    "keys/{prefix}/": ["GET", "DELETE"],
    "push-configs/{id}/": ["GET", "DELETE"],
    "deliveries/{id}/": ["GET"],
    "deliveries/{id}/retry/": ["POST"],
    "members/{username}/": ["GET", "PATCH", "DELETE"],
    "tasks/{id}/redispatch/": ["POST"],
    "tasks/{id}/files/…/": ["GET"],
    "agents/echo/hosts/{host}/": ["GET", "DELETE"],
    "agents/echo/hosts/{host}/verify/": ["POST"],
    "group-memberships/{id}/": ["GET"],
    "invitations/{id}/": ["GET", "DELETE"],
}


@pytest.mark.parametrize("route", list(BY_ID))
def test_another_tenant_s_object_on_one_s_own_routes_is_exactly_an_object_that_does_not_exist(client, world, route):
    before = stored()
    theirs, absent = BY_ID[route](world.a)  # A's objects, and ids no object has ...
    api(client, "GET", f"{API}/tb/", world.b.keys["owner"])  # its last use recorded now
    for method in METHODS[route]:
        body = {"role": "owner"} if method == "PATCH" else {"method": "http"} if route.endswith("verify/") else None
        # ... asked for under B's own URL, by B's owner: the same answer, the same statements.
        with CaptureQueriesContext(connection) as seen_theirs:
            answer_theirs = api(client, method, f"{API}/tb/{theirs}", world.b.keys["owner"], body)
        with CaptureQueriesContext(connection) as seen_absent:
            answer_absent = api(client, method, f"{API}/tb/{absent}", world.b.keys["owner"], body)
        assert answer_theirs[0] == answer_absent[0] == 404, (method, route, answer_theirs)
        assert answer_theirs == answer_absent
        assert len(seen_theirs) == len(seen_absent), (method, route)
    # Filters naming A's task list nothing of A's under B.
    for path in (
        f"tasks/?q={world.a.task_id}",
        f"push-configs/?task={world.a.task_id}",
        f"deliveries/?task={world.a.task_id}",
        f"group-memberships/?q=group-of-{world.a.slug}",
    ):
        status, body = api(client, "GET", f"{API}/tb/{path}", world.b.keys["owner"])
        assert (status, body["results"]) == (200, [])
    assert stored() == before


@pytest.mark.parametrize("index", range(ROUTE_COUNT))
def test_a_key_without_a_management_role_is_403_on_its_own_tenant_s_routes_and_others_alike(client, world, index):
    before = stored()
    method, mine, _, body = routes(world.b)[index]
    _, theirs, _, _ = routes(world.a)[index]
    answers = [api(client, method, path, world.b.keys[""], body) for path in (mine, theirs)]
    assert answers[0] == answers[1]
    assert answers[0][0] == 403 and "no management role" in answers[0][1]["detail"]
    assert stored() == before


def test_another_tenant_s_maker_names_no_key_to_list_or_revoke(client, world):
    # A key of A made by A's owner key (through the API); B's owner names that maker under B.
    a_owner = world.a.keys["owner"]
    status, made = api(client, "POST", f"{API}/ta/keys/", a_owner, {"name": "made-in-a"})
    maker = made["made_by"]
    assert status == 201 and maker.startswith("key:")
    before = stored()
    status, listed = api(client, "GET", f"{API}/tb/keys/?made_by={maker}", world.b.keys["owner"])
    assert (status, listed["results"]) == (200, [])
    status, answer = api(client, "POST", f"{API}/tb/keys/revoke/", world.b.keys["owner"], {"made_by": maker})
    assert (status, answer) == (200, {"revoked": []})
    # Under A's URL, B's owner is a stranger.
    status, _ = api(client, "POST", f"{API}/ta/keys/revoke/", world.b.keys["owner"], {"made_by": maker})
    assert status == 404
    assert stored() == before


@pytest.fixture
def limited_manager(world):
    """A key of tenant A limited to another agent, stored with a management role as keys made
    before the rule could be: nothing of echo's (its tasks, its settings) is its to reach."""
    from accounts.services import api_key_create
    from tests.conftest import make_agent

    other = make_agent(world.a.objects["tenant"], "eagent", "echo")
    key, plaintext = api_key_create(tenant=world.a.objects["tenant"], name="eagent-only", agents=[other])
    ApiKey.objects.filter(pk=key.pk).update(management_role="owner")
    return plaintext


@pytest.mark.parametrize("index", range(ROUTE_COUNT))
def test_a_key_limited_to_some_agents_manages_nothing_whatever_role_is_stored_with_it(
    client, world, limited_manager, index
):
    before = stored()
    method, mine, _, body = routes(world.a)[index]
    status, answer = api(client, method, mine, limited_manager, body)
    assert status == 403, (method, mine, answer)
    assert "limited to some agents, so it has no management role" in answer["detail"]
    assert stored() == before


def test_a_key_limited_to_some_agents_still_calls_its_agents(client, world, limited_manager):
    send = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    for path, status in (("/agents/ta/eagent/", 200), ("/agents/ta/echo/", 403)):
        response = client.post(
            path, data=orjson.dumps(send), content_type="application/json", headers={"X-API-Key": limited_manager}
        )
        assert response.status_code == status, (path, response.content)


@pytest.fixture
def b_issuer(settings, world):
    """Tenant B's issuer, a real one on a loopback address, with a role claim."""
    from accounts.services import oidc_issuer_set

    settings.OUTBOUND_ALLOW_NETS = ["127.0.0.1/32"]
    server = Issuer()
    iss = "https://login.example.test/b"
    oidc_issuer_set(
        tenant=world.b.objects["tenant"], issuer=iss, audience=AUDIENCE, jwks_url=server.url, role_claim="role"
    )
    yield iss
    server.stop()


@pytest.mark.parametrize("index", range(ROUTE_COUNT))
def test_another_tenant_s_bearer_token_gets_exactly_the_answer_for_no_tenant_on_every_route(
    client, world, b_issuer, index
):
    before = stored()
    method, theirs, _, body = routes(world.a)[index]
    _, absent, _, _ = routes(nowhere(world.a))[index]
    _, mine, _, _ = routes(world.b)[index]
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token(iss=b_issuer, sub='carol', role='viewer')}"}

    def call(path: str) -> tuple[int, bytes]:
        response = client.generic(method, path, b"{}" if method != "GET" else b"", "application/json", **bearer)
        return response.status_code, response.content

    assert call(theirs) == call(absent)
    assert call(theirs)[0] == 404
    # The same token is B's caller on B's routes (a viewer: reads pass, writes are 403).
    readable = 404 if mine.endswith("/members/vera/") else 200  # vera is a member of A only
    owners_only = "/invitations/" in mine  # the usernames owners typed
    assert call(mine)[0] == (readable if method == "GET" and not owners_only else 403)
    assert stored() == before
