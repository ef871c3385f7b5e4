"""The registry's smaller leaks (issue 43, item 9): its API tokens are kept only as a digest
and expire (the old plaintext ones converted, their table dropped), and who flagged an entry
is shown to curators only, never to the flagged tenant's members."""

from __future__ import annotations

import hashlib
import importlib
import json
from datetime import timedelta
from io import StringIO

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from accounts.models import Role
from accounts.services import member_add
from registry import services
from registry.curators import curators_group
from registry.models import ApiToken, Flag
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db

TOKEN = "/api/registry/token/"
AGENTS = "/api/registry/agents/"
PASSWORD = "pw-" + "x" * 12


def _get(client, token: str):
    return client.get(f"{AGENTS}?mine=true", headers={"Authorization": f"Token {token}"})


def _obtain(client) -> dict:
    answer = client.post(
        TOKEN, json.dumps({"username": "olivia", "password": PASSWORD}), content_type="application/json"
    )
    assert answer.status_code == 200, answer.content
    return answer.json()


# --- tokens -------------------------------------------------------------------------------------


def test_a_token_is_kept_only_as_its_digest_and_each_request_makes_a_new_one(client, django_user_model):
    user = django_user_model.objects.create_user("olivia", password=PASSWORD)
    first, second = _obtain(client), _obtain(client)
    assert first["token"] != second["token"] and first["token"].startswith("rgt_")
    rows = {row.digest: row for row in ApiToken.objects.filter(user=user)}
    for made in (first, second):
        row = rows[hashlib.sha256(made["token"].encode()).hexdigest()]
        assert row.prefix == made["token"][:12]
        stored = " ".join(str(v) for v in ApiToken.objects.filter(pk=row.pk).values().get().values())
        assert made["token"] not in stored and made["token"][12:] not in stored  # no plaintext anywhere
        assert _get(client, made["token"]).status_code == 200


def test_a_token_expires_after_the_lifetime(client, django_user_model, settings):
    django_user_model.objects.create_user("olivia", password=PASSWORD)
    before = timezone.now()
    made = _obtain(client)
    row = ApiToken.objects.get()
    lifetime = timedelta(seconds=settings.REGISTRY_TOKEN_LIFETIME)
    assert lifetime == timedelta(days=30)
    assert before + lifetime <= row.expires_at <= timezone.now() + lifetime
    assert made["expires_at"].startswith(row.expires_at.strftime("%Y-%m-%dT%H:%M"))
    assert _get(client, made["token"]).status_code == 200

    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    expired = _get(client, made["token"])
    assert expired.status_code == 401 and expired["WWW-Authenticate"] == "Token"
    assert expired.json()["detail"].startswith("The token has expired")


def test_a_user_keeps_a_bounded_number_of_tokens(client, django_user_model, settings):
    settings.REGISTRY_TOKENS_PER_USER = 2
    django_user_model.objects.create_user("olivia", password=PASSWORD)
    oldest, middle, newest = _obtain(client), _obtain(client), _obtain(client)
    assert ApiToken.objects.count() == 2
    assert _get(client, oldest["token"]).status_code == 401
    assert _get(client, middle["token"]).status_code == _get(client, newest["token"]).status_code == 200


def test_the_registry_token_command_prints_a_working_token(client, django_user_model):
    django_user_model.objects.create_user("olivia")
    out = StringIO()
    call_command("registry_token", "olivia", stdout=out)
    token = out.getvalue().split()[0]
    assert _get(client, token).status_code == 200
    assert token not in {row.digest for row in ApiToken.objects.all()}


def test_the_migration_converts_plaintext_authtoken_tokens_and_drops_their_table(client, django_user_model):
    user = django_user_model.objects.create_user("olivia")
    key = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:  # rest_framework.authtoken's table, as it was
        cursor.execute(
            'CREATE TABLE authtoken_token ("key" varchar(40) PRIMARY KEY, created timestamptz NOT NULL,'
            " user_id integer NOT NULL UNIQUE REFERENCES auth_user (id))"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [key, user.pk])
    migration = importlib.import_module("registry.migrations.0009_api_tokens")
    with connection.schema_editor() as editor:
        migration.convert_plaintext_tokens(apps, editor)
    assert "authtoken_token" not in connection.introspection.table_names()
    converted = ApiToken.objects.get(user=user)
    assert converted.digest == hashlib.sha256(key.encode()).hexdigest() and converted.prefix == key[:8]
    assert converted.expires_at > timezone.now() + timedelta(days=29)
    assert _get(client, key).status_code == 200  # the program using it keeps working until then


# --- who flagged an entry -----------------------------------------------------------------------


def test_who_flagged_an_entry_is_shown_to_curators_and_not_to_the_tenant_s_members(client, tenant):
    entry = services.hosted_entry_sync(agent_id=make_agent(tenant, "helper", "echo").pk)
    reporter = get_user_model().objects.create_user("whistleblower-7")
    flag = services.entry_flag(entry=entry, user=reporter, reason="impersonates the met office")
    services.flag_resolve(flag=flag, user=None, resolution="looked into it")
    services.entry_flag(entry=entry, user=reporter, reason="still impersonates it")
    pages = (
        f"/admin/registry/entry/{entry.pk}/change/",
        "/admin/registry/flag/",
        f"/admin/registry/flag/{flag.pk}/change/",
    )

    users = get_user_model().objects
    for role in (Role.VIEWER, Role.OWNER):
        member = users.create_user(f"member-{role}", is_staff=True)
        member_add(tenant=tenant, user=member, role=role)
        client.force_login(member)
        for page in pages:
            answer = client.get(page)
            assert answer.status_code == 200, (role, page)
            html = answer.content.decode()
            assert "impersonates the met office" in html or "still impersonates it" in html, (role, page)
            assert "whistleblower-7" not in html, (role, page)

    curator = users.create_user("carol", is_staff=True)
    curator.groups.add(curators_group())
    client.force_login(curator)
    for page in pages:
        assert "whistleblower-7" in client.get(page).content.decode(), page
    assert Flag.objects.count() == 2
