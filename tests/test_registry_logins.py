"""Password guessing at the registry's token endpoint and the admin's login form: the client's
address is the connection's (X-Forwarded-For only as far as NUM_PROXIES trusts it), throttles
and failed sign-ins are counted in Redis (shared by every process), and a username or an
address that failed too often is locked out of both, while everybody else signs in as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.test import Client

from accounts import logins
from tests import registry_factories

fresh_cache = registry_factories.fresh_cache  # the fixture

pytestmark = pytest.mark.django_db

TOKEN = "/api/registry/token/"
PASSWORD = "pw-" + "x" * 12
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def lockout(settings, fresh_cache):
    """Small limits, long lockouts: 3 failures per username, 5 per address."""
    settings.LOGIN_FAILURES_PER_USERNAME = 3
    settings.LOGIN_FAILURES_PER_ADDRESS = 5
    settings.LOGIN_FAILURE_WINDOW = 600
    settings.LOGIN_LOCKOUT_SECONDS = 600
    return settings


@pytest.fixture
def people(django_user_model):
    return {
        name: django_user_model.objects.create_user(name, password=PASSWORD, is_staff=True)
        for name in ("olivia", "sam")
    }


def token_post(client: Client, username: str, password: str, **extra):
    return client.post(TOKEN, {"username": username, "password": password}, content_type="application/json", **extra)


def admin_post(client: Client, username: str, password: str, **extra):
    return client.post("/admin/login/?next=/admin/", {"username": username, "password": password}, **extra)


# --- the client's address ---------------------------------------------------------------------


def test_a_new_x_forwarded_for_per_request_does_not_escape_the_throttle(client, settings, fresh_cache):
    settings.REGISTRY_WRITE_RATE = "3/min"
    answers = [
        token_post(client, "olivia", "guess", headers={"X-Forwarded-For": f"203.0.113.{i}"}) for i in range(1, 6)
    ]
    assert [a.status_code for a in answers] == [400, 400, 400, 429, 429]
    assert int(answers[-1]["Retry-After"]) > 0 and "throttled" in answers[-1].json()["detail"]


def test_behind_n_proxies_the_address_is_the_one_the_nearest_proxy_saw(settings):
    request = {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "198.51.100.1, 203.0.113.9"}
    assert logins.client_address(request) == "10.0.0.1"  # NUM_PROXIES = 0: the header is not taken
    settings.NUM_PROXIES = 1
    assert logins.client_address(request) == "203.0.113.9"  # the client may have written the rest
    settings.NUM_PROXIES = 2
    assert logins.client_address(request) == "198.51.100.1"
    assert logins.client_address({"REMOTE_ADDR": "10.0.0.1"}) == "10.0.0.1"


# --- the token endpoint -------------------------------------------------------------------------


def _fail_in_another_process(settings, username: str, address: str) -> str:
    """A second server process (the production settings, the same Redis and key prefix) records
    one failed sign-in; what it then sees of the lockout."""
    script = textwrap.dedent(
        f"""
        import django
        django.setup()
        from accounts import logins
        logins.failed(username={username!r}, address={address!r})
        lock = logins.locked(username={username!r}, address={address!r})
        print(lock.of if lock else "open")
        """
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentserver.settings",
        "CACHE_KEY_PREFIX": settings.CACHES["default"]["KEY_PREFIX"],
        "LOGIN_FAILURES_PER_USERNAME": str(settings.LOGIN_FAILURES_PER_USERNAME),
        "LOGIN_FAILURES_PER_ADDRESS": str(settings.LOGIN_FAILURES_PER_ADDRESS),
        "LOGIN_FAILURE_WINDOW": str(settings.LOGIN_FAILURE_WINDOW),
        "LOGIN_LOCKOUT_SECONDS": str(settings.LOGIN_LOCKOUT_SECONDS),
    }
    env.pop("AGENTSERVER_EMBEDDED", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip().splitlines()[-1]


def test_a_username_is_locked_out_of_the_token_endpoint_counted_across_processes(client, lockout, people):
    assert isinstance(caches["default"], RedisCache)
    assert [token_post(client, "olivia", "guess").status_code for _ in range(2)] == [400, 400]
    # The third failure comes through another process: the count is Redis's, not this one's.
    assert _fail_in_another_process(lockout, "olivia", "192.0.2.50") == "username"

    refused = token_post(client, "olivia", PASSWORD)  # even the right password, from anywhere
    assert refused.status_code == 429
    assert 500 < int(refused["Retry-After"]) <= 600
    assert refused.json()["detail"].startswith("Too many failed sign-ins for this username")
    assert "token" not in refused.json()
    assert token_post(client, "OLIVIA ", PASSWORD).status_code == 429  # the same username, as typed otherwise

    # Everybody else signs in as before, from the same address.
    other = token_post(client, "sam", PASSWORD)
    assert other.status_code == 200 and other.json()["token"]


def test_a_right_password_forgets_the_username_s_failures(client, lockout, people):
    for _ in range(2):
        assert token_post(client, "olivia", "guess").status_code == 400
    assert token_post(client, "olivia", PASSWORD).status_code == 200
    for _ in range(2):
        assert token_post(client, "olivia", "guess").status_code == 400
    assert token_post(client, "olivia", PASSWORD).status_code == 200


def test_an_address_that_guesses_at_many_usernames_is_locked_out(client, lockout, people):
    lockout.LOGIN_FAILURES_PER_USERNAME = 0  # off: only the address counts here
    guesser = {"REMOTE_ADDR": "198.51.100.7"}
    for i in range(4):
        forged = {"X-Forwarded-For": f"203.0.113.{i}"}
        assert token_post(client, f"user{i}", "guess", headers=forged, **guesser).status_code == 400
    locked = token_post(client, "user9", "guess", **guesser)
    assert locked.status_code == 429 and "your address" in locked.json()["detail"]
    assert token_post(client, "sam", PASSWORD, **guesser).status_code == 429
    assert token_post(client, "sam", PASSWORD, REMOTE_ADDR="198.51.100.8").status_code == 200


# --- the admin's login form -----------------------------------------------------------------------


def test_a_username_is_locked_out_of_the_admin_login_and_of_the_token_endpoint(client, lockout, people):
    for _ in range(2):
        page = admin_post(client, "olivia", "guess")
        assert page.status_code == 200 and "Please enter the correct username and password" in page.content.decode()
    third = admin_post(client, "olivia", "guess")
    assert "Too many failed sign-ins for this username" in third.content.decode()

    right = admin_post(client, "olivia", PASSWORD)
    assert right.status_code == 200 and "Too many failed sign-ins for this username" in right.content.decode()
    assert "_auth_user_id" not in client.session
    assert token_post(client, "olivia", PASSWORD).status_code == 429  # one count for both doors

    other = Client()
    signed_in = admin_post(other, "sam", PASSWORD)
    assert signed_in.status_code == 302 and signed_in["Location"] == "/admin/"
    assert other.session["_auth_user_id"] == str(people["sam"].pk)


def test_admin_failures_and_token_failures_add_up(client, lockout, people):
    assert admin_post(client, "olivia", "guess").status_code == 200
    assert token_post(client, "olivia", "guess").status_code == 400
    assert token_post(client, "olivia", "guess").status_code == 429  # the third failure locks
    assert "Too many failed sign-ins" in admin_post(client, "olivia", PASSWORD).content.decode()


# --- the production settings ----------------------------------------------------------------------


def _production(**env: str) -> dict:
    script = (
        "import json, django; from django.conf import settings; django.setup(); "
        "print(json.dumps({'caches': settings.CACHES, 'proxies': settings.REST_FRAMEWORK.get('NUM_PROXIES')}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTSERVER_", "CACHE_", "NUM_PROXIES"))}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "agentserver.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_production_counts_in_redis_and_trusts_no_forwarded_header_unless_told():
    served = _production(REDIS_URL="redis://127.0.0.1:6379/3")
    assert served["proxies"] == 0
    assert served["caches"]["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert served["caches"]["default"]["LOCATION"] == "redis://127.0.0.1:6379/3"
    assert _production(NUM_PROXIES="1")["proxies"] == 1
    embedded = _production(AGENTSERVER_EMBEDDED="1")
    assert embedded["caches"]["default"]["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"
