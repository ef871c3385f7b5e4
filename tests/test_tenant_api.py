"""The tenant API (/api/v1/, tenant_api/): every route for every role, what each resource does,
secrets never echoed, the key shown once, and the credentials it takes (management keys, an
issuer's tokens with a role claim). The 404-for-foreign rule is tests/test_isolation_tenant_api.py's,
hostile bodies tests/test_hostile_tenant_api.py's, the live flow tests/test_tenant_api_live.py's."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from urllib.parse import quote, urlsplit

import orjson
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import ApiKey, Membership, MembershipInvitation, OidcIssuer
from accounts.selectors import Principal
from accounts.services import (
    AccountError,
    agent_secret_generate,
    agent_secret_set,
    api_key_create,
    management_role_check,
)
from push.models import DeliveryState, PushConfig, PushDelivery
from tasks_app import runner
from tasks_app import services as task_services
from tasks_app.domain import NewMessage
from tasks_app.models import Task, TaskEvent
from tasks_app.services import OPERATOR_CANCEL_REASON
from tests.conftest import make_agent
from tests.oidc_issuer import AUDIENCE, ISSUER, Issuer, token
from tests.tenant_api_world import API, ROUTE_COUNT, api, build, host_of, routes
from tests.webhook_endpoint import Endpoint, Reply

ROLES = ["viewer", "operator", "owner"]
RANK = {role: n for n, role in enumerate(ROLES)}


@pytest.fixture
def world(db, client, django_user_model):
    return build(client, django_user_model)


def owner(world) -> str:
    return world.a.keys["owner"]


# --- roles ----------------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(ROUTE_COUNT))
def test_each_route_lets_in_the_roles_the_admin_gives_and_refuses_the_others_with_403(client, world, index):
    method, path, least, body = routes(world.a)[index]
    # Lower roles first: a refusal must change nothing, so the allowed role still finds it all.
    for role in ROLES:
        status, answer = api(client, method, path, world.a.keys[role], body)
        if RANK[role] < RANK[least]:
            assert status == 403, (role, method, path, answer)
            assert answer["detail"] == f"this needs the {least} role; you have {role}"
        else:
            assert status in (200, 201, 202, 204), (role, method, path, answer)
            break


def test_the_route_table_covers_every_operation_the_schema_documents(client, world):
    schema = orjson.loads(client.get("/api/schema/?format=json").content)
    documented = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        if path.startswith("/api/v1/")
        for method in operations
        if method in ("get", "post", "put", "patch", "delete")
    }
    side = world.a
    listed = {
        (
            method,
            path.replace(f"/{side.slug}/", "/{slug}/")
            .replace(side.task_id, "{task_id}")
            .replace(f"/{side.key_prefix}/", "/{prefix}/")
            .replace("/members/vera/", "/members/{username}/")
            .replace(f"/invitations/{side.invitation_pk}/", "/invitations/{id}/")
            .replace("/agents/echo/", "/agents/{agent}/")
            .replace(f"/push-configs/{side.config_pk}/", "/push-configs/{id}/")
            .replace(f"/deliveries/{side.delivery_pk}/", "/deliveries/{id}/")
            .replace(f"/hosts/{host_of(side.slug)}/", "/hosts/{host}/")
            .replace(f"/files/message/{side.message_pk}/1/", "/files/{source}/{ref}/{index}/")
            .replace(f"/group-memberships/{side.membership_pk}/", "/group-memberships/{id}/"),
        )
        for method, path, _, _ in routes(side)
    }
    assert listed == documented


@pytest.mark.parametrize("index", range(ROUTE_COUNT))
def test_a_key_without_a_management_role_is_refused_everywhere_with_a_clear_403(client, world, index):
    method, path, _, body = routes(world.a)[index]
    status, answer = api(client, method, path, world.a.keys[""], body)
    assert status == 403
    assert "no management role" in answer["detail"] and "--management-role" in answer["detail"]


def test_no_credential_is_401_with_the_schemes_it_takes(client, world):
    response = client.get(f"{API}/ta/")
    assert response.status_code == 401
    assert 'ApiKey header="X-API-Key"' in response["WWW-Authenticate"]
    assert "Bearer" in response["WWW-Authenticate"]
    assert orjson.loads(response.content)["detail"].startswith("send a management API key")


def test_a_revoked_or_expired_management_key_is_refused_with_401(client, world):
    tenant = world.a.objects["tenant"]
    key, revoked = api_key_create(tenant=tenant, name="old", management_role="owner")
    api(client, "DELETE", f"{API}/ta/keys/{key.prefix}/", owner(world))
    expired_key, expired = api_key_create(tenant=tenant, name="exp", management_role="owner")
    ApiKey.objects.filter(pk=expired_key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    for presented in (revoked, expired, "ask_000000000000_nope"):
        status, answer = api(client, "GET", f"{API}/ta/", presented)
        assert status == 401
        assert answer == {"detail": "the API key is not valid (unknown, revoked or expired)"}


def test_the_key_is_taken_as_a_bearer_token_too(client, world):
    response = client.get(f"{API}/ta/", headers={"Authorization": f"Bearer {world.a.keys['viewer']}"})
    assert response.status_code == 200
    assert orjson.loads(response.content)["your_role"] == "viewer"


# --- the tenant and its members -------------------------------------------------------------


def test_an_owner_renames_the_tenant_and_a_blank_name_is_refused(client, world):
    status, body = api(client, "PATCH", f"{API}/ta/", owner(world), {"name": "  Globex  "})
    assert (status, body["name"], body["slug"]) == (200, "Globex", "ta")
    status, body = api(client, "PATCH", f"{API}/ta/", owner(world), {"name": "   "})
    assert status == 400 and "name" in body["errors"]
    world.a.objects["tenant"].refresh_from_db()
    assert world.a.objects["tenant"].name == "Globex"


def _accept_path(body: dict) -> str:
    return urlsplit(body["accept_url"]).path


def test_members_are_invited_by_username_then_changed_and_removed(client, world, django_user_model):
    carol = django_user_model.objects.create_user("carol", password="pw")
    status, body = api(client, "POST", f"{API}/ta/members/", owner(world), {"username": "carol", "role": "operator"})
    assert (status, body["username"], body["role"]) == (202, "carol", "operator")
    assert body["invited_by"].startswith("key:") and body["accept_url"].startswith("http://testserver/invitations/")
    assert not Membership.objects.filter(user=carol).exists()
    client.force_login(carol)
    assert client.post(_accept_path(body), {"answer": "accept"}).status_code == 302
    status, body = api(client, "POST", f"{API}/ta/members/", owner(world), {"username": "carol", "role": "viewer"})
    assert status == 400 and "already a member" in body["errors"]["username"][0]
    status, body = api(client, "PATCH", f"{API}/ta/members/carol/", owner(world), {"role": "owner"})
    assert (status, body["role"]) == (200, "owner")
    status, _ = api(client, "DELETE", f"{API}/ta/members/carol/", owner(world))
    assert status == 204
    assert not Membership.objects.filter(tenant__slug="ta", user__username="carol").exists()


def _shape(body: dict) -> dict:
    """An invitation's answer without what differs between any two: its id, name, times, token."""
    return {k: type(v).__name__ if k in ("id", "username", "created_at", "expires_at") else v for k, v in body.items()}


def test_inviting_a_username_no_one_has_answers_exactly_as_inviting_one_someone_has(client, world, django_user_model):
    django_user_model.objects.create_superuser("root", password="pw")  # even the superuser's name
    answers = {}
    for username in ("bob", "root", "no-such-user"):
        api(client, "GET", f"{API}/ta/", owner(world))  # the key's last use recorded, not in the count below
        with CaptureQueriesContext(connection) as seen:
            status, body = api(
                client, "POST", f"{API}/ta/members/", owner(world), {"username": username, "role": "owner"}
            )
        assert urlsplit(body.pop("accept_url")).path.startswith("/invitations/")
        # The same statements, but for the values they carry (the name, the new row's times and
        # hash, the savepoint's name).
        statements = [re.sub(r"'[^']*'|\b\d+\b|\"s\w+\"", "?", q["sql"]) for q in seen.captured_queries]
        answers[username] = (status, _shape(body), statements)
    assert answers["bob"][0] == 202
    assert answers["bob"] == answers["root"] == answers["no-such-user"]
    status, listed = api(client, "GET", f"{API}/ta/invitations/", owner(world))
    shown = {i["username"]: _shape(i) for i in listed["results"]}
    assert shown["bob"] == shown["root"] == shown["no-such-user"]


def test_an_invited_user_is_not_staff_until_they_accept_and_loses_staff_with_their_last_membership(
    client, world, django_user_model
):
    dave = django_user_model.objects.create_user("dave", password="pw")
    _, invited = api(client, "POST", f"{API}/ta/members/", owner(world), {"username": "dave", "role": "viewer"})
    dave.refresh_from_db()
    assert not dave.is_staff
    client.force_login(dave)
    assert client.post(_accept_path(invited), {"answer": "accept"})["Location"] == "/admin/"
    dave.refresh_from_db()
    assert dave.is_staff and not dave.is_superuser
    assert Membership.objects.get(tenant__slug="ta", user=dave).role == "viewer"
    assert api(client, "DELETE", f"{API}/ta/members/dave/", owner(world))[0] == 204
    dave.refresh_from_db()
    assert not dave.is_staff


def test_staff_a_superuser_gave_stays_when_the_membership_ends_and_a_superuser_never_changes(
    client, world, django_user_model
):
    erin = django_user_model.objects.create_user("erin", password="pw", is_staff=True)
    root = django_user_model.objects.create_superuser("root", password="pw")
    for user in (erin, root):
        _, invited = api(
            client, "POST", f"{API}/ta/members/", owner(world), {"username": user.username, "role": "viewer"}
        )
        client.force_login(user)
        assert client.post(_accept_path(invited), {"answer": "accept"}).status_code == 302
        assert api(client, "DELETE", f"{API}/ta/members/{user.username}/", owner(world))[0] == 204
        user.refresh_from_db()
        assert user.is_staff
    root.refresh_from_db()
    assert root.is_superuser


def test_the_staff_of_a_user_with_two_memberships_stays_until_the_last_one_ends(client, world, django_user_model):
    frank = django_user_model.objects.create_user("frank", password="pw")
    client.force_login(frank)
    for side in (world.a, world.b):
        _, invited = api(
            client, "POST", f"{API}/{side.slug}/members/", side.keys["owner"], {"username": "frank", "role": "viewer"}
        )
        client.post(_accept_path(invited), {"answer": "accept"})
    api(client, "DELETE", f"{API}/ta/members/frank/", owner(world))
    frank.refresh_from_db()
    assert frank.is_staff
    api(client, "DELETE", f"{API}/tb/members/frank/", world.b.keys["owner"])
    frank.refresh_from_db()
    assert not frank.is_staff


def test_owners_list_and_revoke_pending_invitations_and_a_revoked_one_cannot_be_accepted(
    client, world, django_user_model
):
    grace = django_user_model.objects.create_user("grace", password="pw")
    _, invited = api(client, "POST", f"{API}/ta/members/", owner(world), {"username": "grace", "role": "viewer"})
    status, listed = api(client, "GET", f"{API}/ta/invitations/", owner(world))
    assert status == 200 and {i["username"] for i in listed["results"]} == {"grace", "invitee-ta"}
    assert all("accept_url" not in i and "token" not in str(i) for i in listed["results"])
    assert api(client, "GET", f"{API}/ta/invitations/{invited['id']}/", owner(world))[1]["username"] == "grace"
    assert api(client, "DELETE", f"{API}/ta/invitations/{invited['id']}/", owner(world))[0] == 204
    assert api(client, "GET", f"{API}/ta/invitations/{invited['id']}/", owner(world))[0] == 404
    client.force_login(grace)
    refused = client.post(_accept_path(invited), {"answer": "accept"})
    assert refused.status_code == 404 and b"No pending invitation for you" in refused.content
    grace.refresh_from_db()
    assert not grace.is_staff and not Membership.objects.filter(user=grace).exists()


def test_an_expired_invitation_cannot_be_accepted_and_is_no_longer_listed(client, world, django_user_model):
    heidi = django_user_model.objects.create_user("heidi", password="pw")
    _, invited = api(client, "POST", f"{API}/ta/members/", owner(world), {"username": "heidi", "role": "viewer"})
    expires = timezone.now() + timedelta(days=7)
    assert abs(datetime.fromisoformat(invited["expires_at"]) - expires) < timedelta(minutes=1)  # the default
    MembershipInvitation.objects.filter(pk=invited["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    client.force_login(heidi)
    assert client.post(_accept_path(invited), {"answer": "accept"}).status_code == 404
    assert not Membership.objects.filter(user=heidi).exists()
    listed = api(client, "GET", f"{API}/ta/invitations/", owner(world))[1]["results"]
    assert "heidi" not in {i["username"] for i in listed}


def test_another_user_cannot_accept_someone_elses_invitation(client, world, django_user_model):
    django_user_model.objects.create_user("ivan", password="pw")
    mallory = django_user_model.objects.create_user("mallory", password="pw")
    _, invited = api(client, "POST", f"{API}/ta/members/", owner(world), {"username": "ivan", "role": "owner"})
    client.force_login(mallory)
    theirs = client.post(_accept_path(invited), {"answer": "accept"})
    made_up = client.post("/invitations/not-a-token-anyone-was-given/", {"answer": "accept"})
    assert theirs.status_code == made_up.status_code == 404
    assert theirs.content == made_up.content
    assert client.get(_accept_path(invited)).content == made_up.content
    assert not Membership.objects.filter(user=mallory).exists()
    assert MembershipInvitation.objects.get(pk=invited["id"]).answer == ""  # still ivan's to answer


def test_inviting_again_replaces_the_pending_invitation_and_its_link(client, world, django_user_model):
    judy = django_user_model.objects.create_user("judy", password="pw")
    _, first = api(client, "POST", f"{API}/ta/members/", owner(world), {"username": "judy", "role": "owner"})
    _, second = api(client, "POST", f"{API}/ta/members/", owner(world), {"username": "judy", "role": "viewer"})
    client.force_login(judy)
    assert client.post(_accept_path(first), {"answer": "accept"}).status_code == 404
    assert client.post(_accept_path(second), {"answer": "accept"}).status_code == 302
    assert Membership.objects.get(user=judy).role == "viewer"


@pytest.mark.parametrize("username", ["", "   ", "a\x00b", "x" * 151])
def test_a_username_no_one_can_have_is_a_400_naming_the_field(client, world, username):
    status, body = api(client, "POST", f"{API}/ta/members/", owner(world), {"username": username, "role": "viewer"})
    assert status == 400 and "username" in body["detail"], body


def test_the_last_owner_stays(client, world):
    status, body = api(client, "PATCH", f"{API}/ta/members/alice/", owner(world), {"role": "viewer"})
    assert status == 400 and "last owner" in body["errors"]["role"][0]
    status, body = api(client, "DELETE", f"{API}/ta/members/alice/", owner(world))
    assert status == 409 and "last owner" in body["detail"]
    assert Membership.objects.get(tenant__slug="ta", user__username="alice").role == "owner"


# --- API keys -------------------------------------------------------------------------------


def test_a_new_key_is_shown_once_works_for_its_agents_and_is_never_shown_again(client, world):
    status, made = api(
        client, "POST", f"{API}/ta/keys/", owner(world), {"name": "ci", "principal": "ci-bot", "agents": ["echo"]}
    )
    assert status == 201
    secret = made["key"]
    assert secret.startswith(f"ask_{made['prefix']}_") and made["agents"] == ["echo"]
    assert made["principal"] == "ci-bot" and made["management_role"] == ""
    # The key it made calls the agent.
    send = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": world.a.task_id}}
    response = client.post(
        "/agents/ta/echo/",
        data=orjson.dumps(send),
        content_type="application/json",
        headers={"X-API-Key": secret, "A2A-Version": "1.0"},
    )
    assert response.status_code == 200
    # Never again: not in the list, not in the key's own page.
    for path in (f"{API}/ta/keys/", f"{API}/ta/keys/{made['prefix']}/"):
        status, body = api(client, "GET", path, owner(world))
        assert status == 200
        assert secret not in orjson.dumps(body).decode()
        assert secret.split("_", 2)[2] not in orjson.dumps(body).decode()
    assert ApiKey.objects.get(prefix=made["prefix"]).key_hash != secret


def test_a_key_made_through_the_api_holds_at_most_its_maker_s_role():
    assert management_role_check("operator", at_most="owner") == "operator"
    assert management_role_check("", at_most="viewer") == ""
    with pytest.raises(AccountError, match="at most your own role"):
        management_role_check("owner", at_most="operator")
    with pytest.raises(AccountError, match="no role"):
        management_role_check("admin")


def test_an_owner_makes_a_management_key_that_manages_with_its_role(client, world):
    status, made = api(client, "POST", f"{API}/ta/keys/", owner(world), {"name": "ops", "management_role": "operator"})
    assert status == 201 and made["management_role"] == "operator"
    status, body = api(client, "GET", f"{API}/ta/", made["key"])
    assert (status, body["your_role"]) == (200, "operator")
    status, _ = api(client, "PATCH", f"{API}/ta/", made["key"], {"name": "no"})
    assert status == 403


def test_a_revoked_key_calls_no_agent_and_stays_listed_as_revoked(client, world):
    status, body = api(client, "DELETE", f"{API}/ta/keys/{world.a.key_prefix}/", owner(world))
    assert status == 200 and body["revoked_at"]
    status, listed = api(client, "GET", f"{API}/ta/keys/", owner(world))
    assert any(k["prefix"] == world.a.key_prefix and k["revoked_at"] for k in listed["results"])
    status, again = api(client, "DELETE", f"{API}/ta/keys/{world.a.key_prefix}/", owner(world))
    assert status == 200 and again["revoked_at"] == body["revoked_at"]


def test_a_key_for_an_agent_the_tenant_does_not_have_is_refused(client, world):
    status, body = api(client, "POST", f"{API}/ta/keys/", owner(world), {"name": "x", "agents": ["ghost"]})
    assert status == 400 and body["errors"] == {"agents": ["no agent ghost in this tenant"]}
    status, body = api(client, "POST", f"{API}/ta/keys/", owner(world), {"name": "x", "principal": "anonymous"})
    assert status == 400 and "anonymous" in body["detail"]
    assert not ApiKey.objects.filter(name="x").exists()


def test_the_create_api_key_command_gives_a_key_a_management_role(world, capsys):
    call_command("create_api_key", "ta", "--name", "first", "--management-role", "owner", "--json")
    made = orjson.loads(capsys.readouterr().out)
    assert made["management_role"] == "owner"
    assert ApiKey.objects.get(prefix=made["prefix"]).management_role == "owner"


def test_a_key_limited_to_some_agents_is_given_no_management_role(client, world):
    body = {"name": "eagent-ops", "agents": ["echo"], "management_role": "operator"}
    status, answer = api(client, "POST", f"{API}/ta/keys/", owner(world), body)
    assert status == 400
    assert "limited to some agents cannot have a management role" in answer["errors"]["management_role"][0]
    assert not ApiKey.objects.filter(name="eagent-ops").exists()
    with pytest.raises(AccountError, match="limited to some agents"):
        api_key_create(
            tenant=world.a.objects["tenant"],
            name="eagent-ops",
            agents=[world.a.objects["tenant"].agents.get(slug="echo")],
            management_role="viewer",
        )


def test_authenticating_a_key_reads_it_twice_limited_or_not_and_no_more(client, world):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    limited, plaintext = api_key_create(
        tenant=world.a.objects["tenant"], name="limited", agents=[world.a.objects["tenant"].agents.get(slug="echo")]
    )
    ApiKey.objects.filter(pk=limited.pk).update(management_role="owner")
    for key, status in ((owner(world), 200), (plaintext, 403)):
        api(client, "GET", f"{API}/ta/", key)  # its last use recorded now, not below
        with CaptureQueriesContext(connection) as seen:
            assert api(client, "GET", f"{API}/ta/", key)[0] == status
        # The key's grant (with its agents) and its tenant and role: no statement per request more.
        assert len([q for q in seen.captured_queries if "accounts_apikey" in q["sql"]]) == 2


def test_create_api_key_gives_no_management_role_to_a_key_limited_to_some_agents(world):
    with pytest.raises(CommandError, match="limited to some agents cannot have a management role"):
        call_command("create_api_key", "ta", "--agent", "echo", "--management-role", "operator")
    assert not ApiKey.objects.filter(management_role="operator").exclude(name="operator-key").exists()


def test_a_key_made_with_an_owner_s_token_expires_after_the_default_lifetime_and_names_its_maker(
    client, world, issuer_server, settings
):
    settings.API_KEY_DEFAULT_LIFETIME = 7 * 24 * 3600.0
    _issuer(world, issuer_server)
    before = timezone.now()
    response = client.post(
        f"{API}/ta/keys/",
        data=b'{"name": "from-a-token", "management_role": "owner"}',
        content_type="application/json",
        **bearer(token(sub="carol", agentserver_role="owner")),
    )
    assert response.status_code == 201, response.content
    made = orjson.loads(response.content)
    assert made["made_by"] == f"oidc:{ISSUER}#carol"
    expires = ApiKey.objects.get(prefix=made["prefix"]).expires_at
    assert before + timedelta(days=7) <= expires <= timezone.now() + timedelta(days=7)
    status, read = api(client, "GET", f"{API}/ta/keys/{made['prefix']}/", owner(world))
    assert read["made_by"] == made["made_by"] and read["expires_at"] == made["expires_at"]


def test_an_expiry_beyond_the_maximum_lifetime_is_400_and_one_within_it_is_kept(client, world, settings):
    settings.API_KEY_MAX_LIFETIME = 30 * 24 * 3600.0
    settings.API_KEY_DEFAULT_LIFETIME = 24 * 3600.0
    too_far = (timezone.now() + timedelta(days=31)).isoformat()
    status, answer = api(client, "POST", f"{API}/ta/keys/", owner(world), {"name": "long", "expires_at": too_far})
    assert status == 400 and "too far away" in answer["errors"]["expires_at"][0]
    assert "30 days" in answer["errors"]["expires_at"][0]
    assert not ApiKey.objects.filter(name="long").exists()
    within = timezone.now() + timedelta(days=29)
    asked = {"name": "long", "expires_at": within.isoformat()}
    status, made = api(client, "POST", f"{API}/ta/keys/", owner(world), asked)
    assert status == 201 and ApiKey.objects.get(prefix=made["prefix"]).expires_at == within
    past = (timezone.now() - timedelta(days=1)).isoformat()
    status, answer = api(client, "POST", f"{API}/ta/keys/", owner(world), {"name": "old", "expires_at": past})
    assert status == 400 and "in the past" in answer["errors"]["expires_at"][0]


def test_a_key_made_before_expiries_were_required_keeps_working(client, world):
    ApiKey.objects.filter(name="owner-key", tenant__slug="ta").update(expires_at=None, made_by="")
    status, body = api(client, "GET", f"{API}/ta/keys/", owner(world))
    assert status == 200
    assert any(k["name"] == "owner-key" and k["expires_at"] is None for k in body["results"])


def test_an_owner_lists_the_keys_one_maker_made_and_revokes_them_and_theirs_in_one_call(client, world, issuer_server):
    _issuer(world, issuer_server)
    as_carol = bearer(token(sub="carol", agentserver_role="owner"))

    def made_by_carol(body: dict) -> dict:
        response = client.post(f"{API}/ta/keys/", data=orjson.dumps(body), content_type="application/json", **as_carol)
        assert response.status_code == 201, response.content
        return orjson.loads(response.content)

    first = made_by_carol({"name": "carol-1", "management_role": "owner"})
    second = made_by_carol({"name": "carol-2"})
    # A key carol's key made, with its authority.
    status, grandchild = api(client, "POST", f"{API}/ta/keys/", first["key"], {"name": "made-by-carol-1"})
    assert status == 201 and grandchild["made_by"] == f"key:{first['prefix']}"
    status, others = api(client, "POST", f"{API}/ta/keys/", owner(world), {"name": "not-carol"})
    carol = f"oidc:{ISSUER}#carol"

    status, listed = api(client, "GET", f"{API}/ta/keys/?made_by={quote(carol)}", owner(world))
    assert status == 200 and {k["prefix"] for k in listed["results"]} == {first["prefix"], second["prefix"]}

    status, answer = api(client, "POST", f"{API}/ta/keys/revoke/", owner(world), {"made_by": carol})
    assert status == 200
    assert sorted(answer["revoked"]) == sorted([first["prefix"], second["prefix"], grandchild["prefix"]])
    for revoked in (first, grandchild):
        assert api(client, "GET", f"{API}/ta/", revoked["key"])[0] == 401
    assert api(client, "GET", f"{API}/ta/", others["key"])[0] == 403  # another maker's key: untouched
    assert ApiKey.objects.get(prefix=others["prefix"]).revoked_at is None
    # Again: nothing left to revoke.
    assert api(client, "POST", f"{API}/ta/keys/revoke/", owner(world), {"made_by": carol}) == (200, {"revoked": []})


def test_revoking_by_maker_needs_a_maker(client, world):
    status, answer = api(client, "POST", f"{API}/ta/keys/revoke/", owner(world), {"made_by": "  "})
    assert status == 400 and "made_by" in answer["errors"]
    assert not ApiKey.objects.filter(revoked_at__isnull=False).exists()


def test_create_api_key_gives_the_default_lifetime_unless_told_otherwise(world, settings):
    settings.API_KEY_MAX_LIFETIME = 30 * 24 * 3600.0
    call_command("create_api_key", "ta", "--name", "cli-default")
    key = ApiKey.objects.get(name="cli-default")
    assert key.expires_at is not None and key.made_by == "command:create_api_key"
    lifetime = timedelta(seconds=settings.API_KEY_DEFAULT_LIFETIME)
    assert abs(key.expires_at - key.created_at - lifetime) < timedelta(seconds=5)
    call_command("create_api_key", "ta", "--name", "cli-forever", "--no-expiry")
    assert ApiKey.objects.get(name="cli-forever").expires_at is None
    with pytest.raises(CommandError, match="too far away"):
        call_command("create_api_key", "ta", "--name", "cli-long", "--expires", "31d")
    with pytest.raises(CommandError):
        call_command("create_api_key", "ta", "--expires", "1d", "--no-expiry")


def test_revoke_api_key_revokes_every_key_one_maker_made(client, world):
    call_command("create_api_key", "ta", "--name", "cli-made")
    call_command("revoke_api_key", "--tenant", "ta", "--made-by", "command:create_api_key")
    assert ApiKey.objects.get(name="cli-made").revoked_at is not None
    assert ApiKey.objects.filter(revoked_at__isnull=True, tenant__slug="ta").count() == 5  # the world's own


# --- the issuer and its tokens --------------------------------------------------------------


@pytest.fixture
def issuer_server(settings):
    settings.OUTBOUND_ALLOW_NETS = ["127.0.0.1/32"]
    server = Issuer()
    yield server
    server.stop()


def test_an_owner_sets_reads_and_removes_the_issuer_through_the_outbound_guard(client, world, issuer_server):
    body = {"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": issuer_server.url, "role_claim": "agentserver_role"}
    status, set_ = api(client, "PUT", f"{API}/ta/issuer/", owner(world), body)
    assert status == 200 and set_["role_claim"] == "agentserver_role"
    status, read = api(client, "GET", f"{API}/ta/issuer/", world.a.keys["viewer"])
    assert read == set_
    refused = {**body, "jwks_url": "http://127.0.0.2/jwks"}
    status, answer = api(client, "PUT", f"{API}/ta/issuer/", owner(world), refused)
    assert status == 400 and "jwks_url refused" in answer["errors"]["jwks_url"][0]
    assert OidcIssuer.objects.get(tenant__slug="ta").jwks_url == issuer_server.url
    status, _ = api(client, "DELETE", f"{API}/ta/issuer/", owner(world))
    assert status == 204 and not OidcIssuer.objects.filter(tenant__slug="ta").exists()


def _issuer(world, issuer_server, role_claim="agentserver_role"):
    from accounts.services import oidc_issuer_set

    oidc_issuer_set(
        tenant=world.a.objects["tenant"],
        issuer=ISSUER,
        audience=AUDIENCE,
        jwks_url=issuer_server.url,
        role_claim=role_claim,
    )


def bearer(value: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {value}"}


def test_a_token_of_the_tenant_s_issuer_manages_with_the_role_its_claim_names(client, world, issuer_server, caplog):
    _issuer(world, issuer_server)
    response = client.get(f"{API}/ta/", **bearer(token(sub="carol", agentserver_role="operator")))
    assert response.status_code == 200 and orjson.loads(response.content)["your_role"] == "operator"
    response = client.patch(
        f"{API}/ta/",
        data=b'{"name": "x"}',
        content_type="application/json",
        **bearer(token(agentserver_role="operator")),
    )
    assert response.status_code == 403
    task = f"{API}/ta/tasks/{world.a.task_id}/cancel/"
    response = client.post(task, content_type="application/json", **bearer(token(agentserver_role="operator")))
    assert response.status_code == 200
    # Who canceled is in the log; the task's client is told an operator did.
    assert f"task {world.a.task_id} canceled through the tenant API by oidc:alice" in caplog.text
    assert "oidc:alice" not in Task.objects.get(pk=world.a.task_id).status_changes.latest("id").reason


@pytest.mark.parametrize(
    ("claims", "status", "says"),
    [
        ({}, 403, "names no role"),
        ({"agentserver_role": "admin"}, 403, "names no role"),
        ({"agentserver_role": ["owner"]}, 403, "names no role"),
        ({"agentserver_role": "owner", "aud": "someone-else"}, 401, "wrong audience"),
        ({"agentserver_role": "owner", "exp": 1}, 401, "expired"),
        ({"agentserver_role": "owner", "iss": "https://other.example"}, 401, "no tenant accepts"),
    ],
)
def test_a_token_without_a_role_or_not_valid_is_refused(client, world, issuer_server, claims, status, says):
    _issuer(world, issuer_server)
    response = client.get(f"{API}/ta/", **bearer(token(**claims)))
    assert response.status_code == status
    assert says in orjson.loads(response.content)["detail"]


def test_an_issuer_without_a_role_claim_lets_its_tokens_call_agents_only(client, world, issuer_server):
    _issuer(world, issuer_server, role_claim="")
    response = client.get(f"{API}/ta/", **bearer(token(agentserver_role="owner")))
    assert response.status_code == 403 and "no role claim" in orjson.loads(response.content)["detail"]


# --- agents ---------------------------------------------------------------------------------


def test_a_webhook_agent_needs_its_secret_which_is_written_and_never_read_back(client, world):
    values = {"slug": "hook", "name": "Hook", "executor": "webhook", "settings": {"url": "http://127.0.0.1:9/agent"}}
    status, body = api(client, "POST", f"{API}/ta/agents/", owner(world), values)
    assert status == 400 and "needs a secret" in body["errors"]["secret"][0]
    secret = agent_secret_generate()
    status, made = api(client, "POST", f"{API}/ta/agents/", owner(world), {**values, "secret": secret})
    assert status == 201, made
    assert made["has_secret"] is True and "secret" not in made
    for path in (f"{API}/ta/agents/", f"{API}/ta/agents/hook/"):
        _, read = api(client, "GET", path, world.a.keys["viewer"])
        assert secret not in orjson.dumps(read).decode() and secret[6:] not in orjson.dumps(read).decode()
    status, cleared = api(client, "PATCH", f"{API}/ta/agents/hook/", owner(world), {"description": "mine"})
    assert status == 200 and cleared["has_secret"] is True and cleared["description"] == "mine"


def test_an_agent_s_values_are_checked_by_the_agent_service_and_every_problem_is_itemised(client, world):
    values = {"slug": "bad", "name": "Bad", "executor": "no-such-executor", "skills": "not a list"}
    status, body = api(client, "POST", f"{API}/ta/agents/", owner(world), values)
    assert status == 400
    assert set(body["errors"]) >= {"skills"}
    values = {"slug": "bad", "name": "Bad", "executor": "no-such-executor"}
    status, body = api(client, "POST", f"{API}/ta/agents/", owner(world), values)
    assert status == 400 and "executor" in body["errors"]
    status, body = api(
        client, "POST", f"{API}/ta/agents/", owner(world), {**values, "executor": "echo", "slug": "echo"}
    )
    assert status == 400 and "already" in body["errors"]["slug"][0]


def test_an_extended_card_that_names_its_own_address_or_provider_is_refused_member_by_member(client, world):
    forged = {
        "url": "https://attacker.invalid/a2a",
        "supportedInterfaces": [{"url": "https://attacker.invalid/a2a", "protocolBinding": "JSONRPC"}],
        "provider": {"organization": "agentserver platform", "url": "https://attacker.invalid/"},
        "skills": [{"id": "secret"}],
    }
    body = {"has_extended_card": True, "extended_card": forged}
    status, answer = api(client, "PATCH", f"{API}/ta/agents/echo/", owner(world), body)
    assert status == 400, answer
    problems = answer["errors"]["extended_card"]
    for member in ("url", "supportedInterfaces", "provider"):
        assert any(p.startswith(f"extended_card[{member!r}]: is the server's") for p in problems), (member, problems)
    assert not any("skills" in p.split(":")[0] for p in problems)
    _, read = api(client, "GET", f"{API}/ta/agents/echo/", owner(world))
    assert read["extended_card"] is None and read["has_extended_card"] is False
    status, made = api(
        client, "POST", f"{API}/ta/agents/", owner(world), {"slug": "ext", "name": "E", "executor": "echo", **body}
    )
    assert status == 400 and set(made["errors"]) == {"extended_card"}
    status, answer = api(
        client,
        "PATCH",
        f"{API}/ta/agents/echo/",
        owner(world),
        {**body, "extended_card": {"skills": [{"id": "secret"}]}},
    )
    assert status == 200 and answer["extended_card"] == {"skills": [{"id": "secret"}]}


def test_deleting_an_agent_deactivates_it_and_its_endpoint_answers_as_for_no_agent(client, world):
    status, body = api(client, "DELETE", f"{API}/ta/agents/echo/", owner(world))
    assert status == 200 and body["is_active"] is False
    response = client.get("/agents/ta/echo/.well-known/agent-card.json")
    assert response.status_code == 404
    status, body = api(client, "PATCH", f"{API}/ta/agents/echo/", owner(world), {"is_active": True})
    assert status == 200 and body["is_active"] is True


# --- tasks ----------------------------------------------------------------------------------


def test_tasks_are_listed_with_the_admin_s_filters_and_search(client, world):
    tid = world.a.task_id
    q = f"{API}/ta/tasks/"
    cases = {
        "": True,
        "?state=submitted": True,
        "?state=completed&state=failed": False,
        "?agent=echo": True,
        "?agent=other": False,
        "?dialect=a2a/1.0": True,
        f"?owner={Task.objects.get(pk=tid).owner}": True,
        "?owner=someone": False,
        f"?q={tid}": True,
        "?q=private": True,  # words of the message's text
        "?q=nothing+like+it": False,
        "?changed_after=2000-01-01T00:00:00Z": True,
        "?changed_before=2000-01-01T00:00:00Z": False,
    }
    for query, found in cases.items():
        status, body = api(client, "GET", q + query, world.a.keys["viewer"])
        assert status == 200, (query, body)
        assert ([t["id"] for t in body["results"]] == [tid]) is found, query
    status, body = api(client, "GET", q + "?state=bogus", world.a.keys["viewer"])
    assert status == 400 and "state" in body["errors"]


def test_the_task_list_pages_by_cursor(client, world):
    for n in range(4):
        send = {
            "jsonrpc": "2.0",
            "id": n,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": f"m{n}", "role": "ROLE_USER", "parts": [{"text": "more"}]},
                "configuration": {"returnImmediately": True},
            },
        }
        client.post(
            "/agents/ta/echo/",
            data=orjson.dumps(send),
            content_type="application/json",
            headers={"X-API-Key": world.a.keys[""], "A2A-Version": "1.0"},
        )
    seen, url = [], f"{API}/ta/tasks/?page_size=2"
    while url:
        status, body = api(client, "GET", url, world.a.keys["viewer"])
        assert status == 200 and len(body["results"]) <= 2
        seen += [t["id"] for t in body["results"]]
        url = body["next"]
    assert len(seen) == len(set(seen)) == 5
    status, body = api(client, "GET", f"{API}/ta/tasks/?cursor=bm9wZQ", world.a.keys["viewer"])
    assert status == 400 and "cursor" in body["errors"]


def test_a_task_is_read_with_its_timeline_and_canceled_once(client, world):
    tid = world.a.task_id
    status, body = api(client, "GET", f"{API}/ta/tasks/{tid}/", world.a.keys["viewer"])
    assert status == 200 and body["state"] == "submitted"
    kinds = [(e["kind"], e["payload"].get("state")) for e in body["timeline"]]
    assert kinds[0] == ("message", None) and ("status", "submitted") in kinds
    assert body["timeline"][0]["payload"]["parts"][0]["text"] == "private text of ta"
    status, body = api(client, "POST", f"{API}/ta/tasks/{tid}/cancel/", world.a.keys["operator"], {"reason": "enough"})
    assert (status, body["state"]) == (200, "canceled")
    _, read = api(client, "GET", f"{API}/ta/tasks/{tid}/", world.a.keys["viewer"])
    assert read["timeline"][-1]["payload"]["state"] == "canceled"
    assert read["timeline"][-1]["payload"].get("reason") == "enough"
    status, body = api(client, "POST", f"{API}/ta/tasks/{tid}/cancel/", world.a.keys["operator"])
    assert status == 409 and "already canceled" in body["detail"]


SECRET_BODY = b"db error: password=hunter2 token=sk-live-4f9a2c"


def test_a_viewer_reads_a_failure_s_kind_status_and_the_client_s_text_never_the_endpoint_s_body(client, world):
    secret = agent_secret_generate()
    endpoint = Endpoint(secret).start()
    try:
        endpoint.answer(Reply(500, "text/plain", [(0, SECRET_BODY)]))
        agent = make_agent(world.a.objects["tenant"], "hook", "webhook", settings={"url": endpoint.url(), "retries": 0})
        agent_secret_set(agent=agent, secret=secret)
        message = NewMessage(message_id="m-hook", role="user", parts=[{"type": "text", "text": "hi"}])
        task, _ = task_services.message_receive(agent=agent, principal=Principal("alice"), message=message)
        assert runner.run(task_id=task.pk, run_token=str(task.run_token)) == "failed"
    finally:
        endpoint.stop()
    path = f"{API}/ta/tasks/{task.pk}/"
    status, seen = api(client, "GET", path, world.a.keys["viewer"])
    assert status == 200 and seen["state"] == "failed"
    assert (seen["failure"], seen["failure_status_code"]) == ("agent-error", 500)
    assert seen["failure_message"] == "the agent's endpoint answered HTTP 500"
    assert seen["failure_reason"] == ""
    assert "hunter2" not in orjson.dumps(seen).decode() and "sk-live" not in orjson.dumps(seen).decode()
    for role in ("operator", "owner"):
        _, full = api(client, "GET", path, world.a.keys[role])
        assert "password=hunter2 token=sk-live-4f9a2c" in full["failure_reason"]
        assert full["failure_message"] == seen["failure_message"]
        assert "hunter2" in orjson.dumps(full["timeline"]).decode()  # the status change's reason


def test_a_cancel_without_a_reason_tells_the_client_an_operator_canceled_not_which_key(client, world):
    tid = world.b.task_id
    status, _ = api(client, "POST", f"{API}/tb/tasks/{tid}/cancel/", world.b.keys["operator"])
    assert status == 200
    last = TaskEvent.objects.filter(task_id=tid).order_by("-seq").first()
    assert last.payload["state"] == "canceled"
    assert last.payload["reason"] == OPERATOR_CANCEL_REASON  # AIP clients read it


# --- push -----------------------------------------------------------------------------------


def test_push_configs_show_whether_secrets_are_set_never_the_secrets(client, world):
    for path in (f"{API}/ta/push-configs/", f"{API}/ta/push-configs/{world.a.config_pk}/", f"{API}/ta/deliveries/"):
        status, body = api(client, "GET", path, owner(world))
        text = orjson.dumps(body).decode()
        assert status == 200 and "credentials-of-ta" not in text and "token-of-ta" not in text
    _, config = api(client, "GET", f"{API}/ta/push-configs/{world.a.config_pk}/", owner(world))
    assert config["has_credentials"] is True and config["has_token"] is True


def test_an_operator_deletes_a_push_config_and_nothing_more_is_delivered_to_it(client, world):
    status, _ = api(client, "DELETE", f"{API}/ta/push-configs/{world.a.config_pk}/", world.a.keys["operator"])
    assert status == 204
    config = PushConfig.objects.get(pk=world.a.config_pk)
    assert config.deleted_at and not config.token_sealed and not config.credentials_sealed
    assert not Task.objects.get(pk=world.a.task_id).has_push_configs
    status, _ = api(client, "GET", f"{API}/ta/push-configs/{world.a.config_pk}/", owner(world))
    assert status == 404


def test_an_operator_retries_a_dead_delivery_once(client, world, push_jobs, django_capture_on_commit_callbacks):
    path = f"{API}/ta/deliveries/{world.a.delivery_pk}/"
    status, body = api(client, "GET", f"{API}/ta/deliveries/?state=dead", world.a.keys["viewer"])
    assert [d["id"] for d in body["results"]] == [world.a.delivery_pk]
    with django_capture_on_commit_callbacks(execute=True):
        status, body = api(client, "POST", f"{path}retry/", world.a.keys["operator"])
    assert (status, body["state"], body["attempts"]) == (200, "pending", 0)
    assert push_jobs == [(world.a.config_pk, None)]
    status, body = api(client, "POST", f"{path}retry/", world.a.keys["operator"])
    assert status == 409 and "not dead" in body["detail"]
    assert PushDelivery.objects.get(pk=world.a.delivery_pk).state == DeliveryState.PENDING


# --- throttling -----------------------------------------------------------------------------


def test_writes_are_throttled_per_caller_and_reads_are_not(client, world, settings):
    from django.core.cache import cache

    settings.TENANT_API_WRITE_RATE = "2/min"
    cache.clear()
    answers = [api(client, "PATCH", f"{API}/ta/", owner(world), {"name": f"n{n}"})[0] for n in range(3)]
    assert answers == [200, 200, 429]
    response = client.patch(
        f"{API}/ta/", data=b'{"name": "x"}', content_type="application/json", headers={"X-API-Key": owner(world)}
    )
    assert response.status_code == 429 and int(response["Retry-After"]) > 0
    assert all(api(client, "GET", f"{API}/ta/", owner(world))[0] == 200 for _ in range(5))
    # Another caller has its own allowance.
    assert api(client, "POST", f"{API}/ta/tasks/{world.a.task_id}/cancel/", world.a.keys["operator"])[0] == 200
    cache.clear()


def test_an_owner_s_first_management_key_is_made_in_the_admin_s_key_form(client, world, django_user_model):
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw-for-tests-only")
    client.force_login(root)
    tenant = world.a.objects["tenant"]
    form = {"tenant": tenant.pk, "name": "first", "principal": "", "management_role": "owner"}
    response = client.post("/admin/accounts/apikey/add/", form, follow=True)
    assert response.status_code == 200
    shown = next(m.message for m in response.context["messages"] if "ask_" in m.message)
    plaintext = shown[shown.index("ask_") :].strip()
    client.logout()
    assert ApiKey.objects.get(name="first").management_role == "owner"
    status, body = api(client, "GET", f"{API}/ta/", plaintext)
    assert (status, body["your_role"]) == (200, "owner")


@pytest.mark.parametrize(
    "values",
    [
        {"executor": "webhook", "settings": {"url": "http://127.0.0.2/agent"}},
        {"executor": "webhook", "settings": {"url": 5}},
        {"executor": "echo", "skills": [{"id": 1}], "input_modes": ["not a media type at all"]},
        {"executor": "nope"},
    ],
)
def test_the_api_refuses_an_agent_with_exactly_the_problems_the_agent_service_finds(client, world, values):
    from accounts.agent_services import AgentInvalid, agent_check

    with pytest.raises(AgentInvalid) as refused:
        agent_check(tenant=world.a.objects["tenant"], slug="same", values={"name": "Same", **values})
    status, body = api(client, "POST", f"{API}/ta/agents/", owner(world), {"slug": "same", "name": "Same", **values})
    assert status == 400
    expected = {("non_field_errors" if k == "__all__" else k): v for k, v in refused.value.problems.items()}
    assert body["errors"] == expected
