"""Callers are authenticated before anything is parsed; keys are stored hashed."""

import pytest

from accounts.models import ApiKey

ECHO = "/agents/acme/echo/"


def test_a_key_protected_agent_without_a_key_answers_401_with_a_challenge(rpc, echo_agent):
    response = rpc.raw(ECHO, b"this is not even json")
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'ApiKey header="X-API-Key"'
    assert "X-API-Key" in response.body["error"]["message"]


def test_a_wrong_key_is_refused(rpc, echo_agent, alice_key):
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key + "x").status == 401
    assert rpc(ECHO, "GetTask", {"id": "x"}, key="garbage").status == 401


def test_a_revoked_key_is_refused(rpc, echo_agent, alice_key):
    from django.utils import timezone

    ApiKey.objects.update(revoked_at=timezone.now())
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key).status == 401


def test_a_valid_key_of_another_tenant_is_forbidden_here(rpc, echo_agent):
    from accounts.services import api_key_create, tenant_ensure

    other = tenant_ensure(slug="other", name="Other")
    _, key = api_key_create(tenant=other, name="mallory")
    response = rpc(ECHO, "GetTask", {"id": "x"}, key=key)
    assert response.status == 403 and "may not call this agent" in response.error["message"]


def test_keys_are_stored_only_as_hashes(alice_key):
    stored = ApiKey.objects.get(principal="alice")
    assert alice_key not in (stored.key_hash, stored.prefix)
    assert alice_key.split("_", 2)[2] not in stored.key_hash


def test_a_key_whose_secret_starts_with_an_underscore_still_authenticates(rpc, echo_agent, tenant, monkeypatch):
    """token_urlsafe may start the secret with "_", which makes "__" in the key: the parser
    splits the prefix off at most twice, so the secret keeps its underscore."""
    from accounts import services

    monkeypatch.setattr(services.secrets, "token_urlsafe", lambda n: "_" + "k" * 42)
    _, key = services.api_key_create(tenant=tenant, name="carol", principal="carol")
    assert "__" in key
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=key).error["code"] == -32001


def test_a_public_agent_serves_anonymous_callers(rpc, conformance_agent):
    assert rpc("/agents/acme/conformance/", "GetTask", {"id": "x"}).error["code"] == -32001


@pytest.mark.django_db
def test_an_unknown_agent_is_404_in_json(rpc):
    response = rpc("/agents/nobody/nothing/", "GetTask", {"id": "x"})
    assert response.status == 404 and response.body["error"]["message"]


def test_only_post_is_accepted(client, echo_agent):
    response = client.get(ECHO)
    assert response.status_code == 405 and response["Allow"] == "POST"


def test_the_create_api_key_command_prints_a_working_key(rpc, echo_agent, capsys):
    from django.core.management import call_command

    call_command("create_api_key", "acme", "--name", "ci", "--principal", "carol")
    key = capsys.readouterr().out.strip()
    assert rpc(ECHO, "ListTasks", {}, key=key).result["totalSize"] == 0
    assert ApiKey.objects.get(name="ci").principal == "carol"


def test_a_cached_caller_costs_no_query_and_a_revocation_takes_effect_on_the_next_request(
    rpc, echo_agent, alice_key, auth_caches, django_assert_num_queries
):
    from accounts.services import api_key_revoke

    assert rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key).error["code"] == -32001
    # Agent and key both come from the cache: the one query looks for the task ("x" may be an
    # id an A2A 0.1 client chose, docs/dialects.md).
    with django_assert_num_queries(1):
        assert rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key).error["code"] == -32001
    api_key_revoke(key=ApiKey.objects.get(principal="alice"))
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key).status == 401


def test_a_change_made_behind_the_services_back_takes_effect_when_the_cache_expires(
    rpc, echo_agent, alice_key, auth_caches, settings
):
    from django.utils import timezone

    assert rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key).status == 200
    ApiKey.objects.update(revoked_at=timezone.now())  # a bulk update sends no signal
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key).status == 200  # still cached
    settings.AUTH_CACHE_SECONDS = 0  # as if the entry had expired
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key).status == 401


def test_misses_are_not_cached(rpc, echo_agent, auth_caches):
    from accounts.selectors import _keys

    assert rpc(ECHO, "GetTask", {"id": "x"}, key="ask_000000000000_bogus").status == 401
    assert not _keys._data


def test_a_body_over_the_upload_limit_is_refused_in_json(rpc, echo_agent, alice_key, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = rpc.raw(ECHO, b'{"jsonrpc": "2.0", "pad": "' + b"x" * 2000 + b'"}', key=alice_key)
    assert response.status == 413 and response.body["error"]["code"] == -32600


def test_an_unknown_path_under_agents_is_404_in_json(client, db):
    response = client.get("/agents/acme/")
    assert response.status_code == 404 and response.json()["error"]


def test_a_database_down_before_the_caller_is_known_answers_503_in_json_rpc_not_a_page(
    rpc, echo_agent, alice_key, monkeypatch
):
    from django.db import OperationalError

    from protocols import auth

    def down(*args):
        raise OperationalError("connection refused")

    monkeypatch.setattr(auth, "_agent_and_credentials", down)
    monkeypatch.setattr(auth, "_cached", lambda *args: None)
    response = rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key)
    assert response.status == 503 and response.headers["Retry-After"] == "5"
    assert response.body == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32603, "message": "the task store is unavailable; try again in 5 s"},
    }


def test_a_key_s_last_use_is_recorded_once_a_minute_not_on_every_request(rpc, echo_agent, alice_key):
    from accounts import selectors

    stored = ApiKey.objects.get(principal="alice")
    assert stored.last_used_at is None
    rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key)
    stored.refresh_from_db()
    first = stored.last_used_at
    assert first is not None
    rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key)
    stored.refresh_from_db()
    assert stored.last_used_at == first
    assert not selectors.key_touch_due(stored.pk)
