"""Tenants, members, agents and keys: the services and the management commands that script
them (idempotent where running twice should change nothing)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from accounts.models import ApiKey, Membership, Tenant

ECHO = "/agents/acme/echo/"


def run(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


@pytest.mark.django_db
def test_create_tenant_is_idempotent():
    assert run("create_tenant", "globex", "--name", "Globex") == "globex"
    assert run("create_tenant", "globex", "--name", "Other name") == "globex"
    assert Tenant.objects.get(slug="globex").name == "Globex"


def test_create_agent_checks_the_executor_and_brings_an_agent_up_to_date(tenant):
    with pytest.raises(CommandError, match="no executor 'nope'"):
        run("create_agent", "acme", "bot", "--executor", "nope")
    assert run("create_agent", "acme", "bot", "--executor", "echo") == "/agents/acme/bot/"
    run("create_agent", "acme", "bot", "--executor", "echo", "--public", "--sandbox")
    agent = tenant.agents.get(slug="bot")
    assert (agent.executor, agent.is_public, agent.shared_sandbox) == ("echo", True, True)


def test_add_member_makes_a_staff_member_with_a_role_and_changes_it_when_run_again(tenant, django_user_model):
    with pytest.raises(CommandError, match="no user 'dora'"):
        run("add_member", "acme", "dora")
    run("add_member", "acme", "dora", "--create-user", "--role", "viewer")
    run("add_member", "acme", "dora", "--role", "operator")
    membership = Membership.objects.get(user__username="dora")
    assert membership.role == "operator" and membership.user.is_staff and not membership.user.is_superuser
    assert not membership.user.has_usable_password()


def test_the_staff_add_member_gave_ends_with_the_membership_but_a_curators_stays(tenant, django_user_model):
    from accounts.services import member_remove

    run("add_member", "acme", "dora", "--create-user")
    run("add_member", "acme", "cara", "--create-user")
    call_command("add_curator", "cara")  # staff on the operator's word too
    for name in ("dora", "cara"):
        member_remove(membership=Membership.objects.get(user__username=name))
    staff = dict(django_user_model.objects.filter(username__in=["dora", "cara"]).values_list("username", "is_staff"))
    assert staff == {"dora": False, "cara": True}


def test_a_key_made_without_a_principal_is_its_own_principal(rpc, echo_agent):
    key = run("create_api_key", "acme", "--name", "ci")
    stored = ApiKey.objects.get(name="ci")
    assert stored.principal == f"key:{stored.prefix}"
    task = rpc.send(ECHO, key=key, configuration={"returnImmediately": True}).result["task"]
    from tasks_app.models import Task

    assert Task.objects.get(pk=task["id"]).owner == f"key:{stored.prefix}"


def test_a_principal_a_tenant_names_cannot_take_the_server_s_namespaces(tenant):
    with pytest.raises(CommandError, match="must not contain ':'"):
        run("create_api_key", "acme", "--principal", "oidc:alice")


@pytest.mark.parametrize("name", ["anonymous", "Anonymous", " SHARED ", "shared"])
def test_a_principal_cannot_be_a_name_the_server_gives_a_principal(tenant, name):
    with pytest.raises(CommandError, match="must not be .*anonymous, shared are the server's"):
        run("create_api_key", "acme", "--principal", name)
    assert not ApiKey.objects.exists()


def test_a_key_limited_to_one_agent_is_forbidden_on_the_others(rpc, echo_agent, writer_agent):
    key = run("create_api_key", "acme", "--agent", "echo")
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=key).error["code"] == -32001
    forbidden = rpc("/agents/acme/writer/", "GetTask", {"id": "x"}, key=key)
    assert forbidden.status == 403 and forbidden.error["message"] == "this API key may not call this agent"


def test_a_key_for_an_agent_the_tenant_lacks_is_not_made(tenant):
    with pytest.raises(CommandError, match="acme has no agent ghost"):
        run("create_api_key", "acme", "--agent", "ghost")
    assert not ApiKey.objects.exists()


def test_an_expiring_key_works_until_its_time_and_is_refused_from_then_on(rpc, echo_agent):
    summary = json.loads(run("create_api_key", "acme", "--expires", "1h", "--json"))
    key = summary["api_key"]
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=key).status == 200
    ApiKey.objects.filter(prefix=summary["prefix"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    refused = rpc(ECHO, "GetTask", {"id": "x"}, key=key)
    assert refused.status == 401 and "expired" in refused.error["message"]


def test_an_expiry_in_the_past_or_in_no_known_form_is_refused(tenant):
    with pytest.raises(CommandError, match="neither a duration"):
        run("create_api_key", "acme", "--expires", "tomorrow")
    with pytest.raises(CommandError, match="in the past"):
        run("create_api_key", "acme", "--expires", "2020-01-01T00:00:00+00:00")


def test_revoke_api_key_takes_effect_on_the_next_request_and_is_idempotent(rpc, echo_agent):
    key = run("create_api_key", "acme")
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=key).status == 200
    prefix = key.split("_")[1]
    assert run("revoke_api_key", prefix).startswith(f"revoked {prefix}")
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=key).status == 401
    assert "already revoked" in run("revoke_api_key", key)  # the whole key works as well as its prefix


def test_keeping_a_named_key_reuses_it_while_it_works_and_revokes_the_others_of_its_name(tenant):
    from accounts.services import api_key_create, api_key_keep

    other, _ = api_key_create(tenant=tenant, name="ci", principal="ci")
    first, plaintext = api_key_keep(tenant=tenant, name="demo", principal="demo")
    assert api_key_keep(tenant=tenant, name="demo", principal="demo", plaintext=plaintext) == (first, plaintext)
    ApiKey.objects.filter(pk=first.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    second, fresh = api_key_keep(tenant=tenant, name="demo", principal="demo", plaintext=plaintext)
    assert second.pk != first.pk and fresh != plaintext
    first.refresh_from_db()
    other.refresh_from_db()
    assert first.revoked_at is not None and other.revoked_at is None  # a key of another name stays


def test_list_api_keys_shows_what_a_key_is_never_its_secret(rpc, echo_agent):
    key = run("create_api_key", "acme", "--name", "ci", "--agent", "echo")
    revoked = run("create_api_key", "acme", "--name", "old")
    run("revoke_api_key", revoked)
    rpc(ECHO, "GetTask", {"id": "x"}, key=key)
    listed = [json.loads(line) for line in run("list_api_keys", "acme", "--json").splitlines()]
    assert [(k["name"], k["agents"], k["state"]) for k in listed] == [("ci", ["echo"], "active")]
    assert listed[0]["last_used_at"] is not None
    everything = run("list_api_keys", "acme", "--all")
    assert "revoked" in everything
    stored = ApiKey.objects.get(name="ci")
    for secret in (key, key.split("_", 2)[2], stored.key_hash):
        assert secret not in everything


def test_an_unknown_tenant_is_a_clear_command_error(db):
    for command in ("create_api_key", "list_api_keys", "create_agent"):
        with pytest.raises(CommandError, match="no tenant 'nobody'"):
            run(command, "nobody", *(["x", "--executor", "echo"] if command == "create_agent" else []))
