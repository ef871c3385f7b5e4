"""The directory's liveness job across the real thing: the beat task sent through Redis to a
real Celery worker, which re-reads a remote agent's card and probes its endpoint (a real HTTP
server on loopback), records the checks and marks the dead agent stale. Also the pages and the
API served by daphne."""

from __future__ import annotations

import time

import httpx
import pytest
from django.contrib.auth import get_user_model

from agentserver.celery import app as celery_app
from registry import proofs, services
from registry.models import Entry, Health, HealthCheck, State
from tests.card_examples import a2a_1_0
from tests.card_server import CardServer

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def agent_server():
    running = CardServer().start()
    yield running
    running.stop()


def wait_for_checks(entry: Entry, count: int, timeout: float = 30) -> list[HealthCheck]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        checks = list(HealthCheck.objects.filter(entry=entry).order_by("at"))
        if len(checks) >= count:
            return checks
        time.sleep(0.2)
    raise AssertionError(f"the worker recorded {HealthCheck.objects.filter(entry=entry).count()} checks, not {count}")


def make_due(entry: Entry, **fields) -> None:
    Entry.objects.filter(pk=entry.pk).update(next_check_at="2000-01-01T00:00:00Z", last_checked_at=None, **fields)


def test_the_beat_job_on_a_real_worker_checks_an_agent_and_marks_it_stale_when_it_dies(live, agent_server):
    card = a2a_1_0()
    card["supportedInterfaces"] = [
        {"url": agent_server.url("/rpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    agent_server.serve("/.well-known/agent-card.json", card)
    agent_server.serve("/rpc", b"", status=405)
    alice = get_user_model().objects.create_user("alice")
    entry = services.entry_submit(url=agent_server.url("/"), user=alice)
    agent_server.serve(proofs.WELL_KNOWN_PATH, f"{proofs.TOKEN_PREFIX}{entry.proof_token}".encode())
    assert services.entry_verify_domain(entry=entry, method="http", actor=alice).ok
    services.entry_decide(entry=entry, to=State.APPROVED, actor=None, role="curator")

    make_due(entry)
    celery_app.send_task("registry.tasks.check_due_entries")
    [first] = wait_for_checks(entry, 1)
    entry.refresh_from_db()
    assert first.ok and first.status == 405 and entry.health == Health.HEALTHY
    assert "/rpc" in agent_server.paths()

    # The agent's endpoint dies; two failures were counted before this check.
    agent_server.serve("/rpc", b"gone", status=502)
    make_due(entry, consecutive_failures=2)
    celery_app.send_task("registry.tasks.check_due_entries")
    second = wait_for_checks(entry, 2)[-1]
    entry.refresh_from_db()
    assert not second.ok and "502" in second.detail
    assert entry.health == Health.STALE

    # The API and the directory's healthy filter, served by daphne, agree.
    listed = httpx.get(f"{live.url}/api/registry/agents/", params={"healthy": "true"}, timeout=10)
    assert listed.status_code == 200 and listed.json()["results"] == []
    every = httpx.get(f"{live.url}/api/registry/agents/", timeout=10).json()["results"]
    assert [(e["id"], e["health"]) for e in every] == [(entry.pk, "stale")]


def test_the_beat_on_a_real_worker_checks_an_approved_agent_and_daphne_serves_an_attestation_that_verifies_offline(
    live, agent_server
):
    import jwt

    from registry.models import Attestation, ConformanceResult
    from tests.conformance_agent import conforming_jsonrpc

    card = a2a_1_0()
    card["supportedInterfaces"] = [
        {"url": agent_server.url("/rpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    agent_server.serve("/.well-known/agent-card.json", card)
    agent_server.posts["/rpc"] = conforming_jsonrpc
    alice = get_user_model().objects.create_user("alice")
    entry = services.entry_submit(url=agent_server.url("/"), user=alice)
    agent_server.serve(proofs.WELL_KNOWN_PATH, f"{proofs.TOKEN_PREFIX}{entry.proof_token}".encode())
    assert services.entry_verify_domain(entry=entry, method="http", actor=alice).ok
    services.entry_decide(entry=entry, to=State.APPROVED, actor=None, role="curator")

    celery_app.send_task("registry.tasks.check_due_entries")  # approval made the run due at once
    deadline = time.monotonic() + 30
    while not Attestation.objects.filter(entry=entry).exists():
        assert time.monotonic() < deadline, "the worker signed no attestation"
        time.sleep(0.2)
    entry.refresh_from_db()
    results = list(ConformanceResult.objects.filter(entry=entry).order_by("id"))
    assert {r.outcome for r in results} == {"passed"} and [r.name for r in results][:3] == [
        "card",
        "unknown_task",
        "malformed",
    ]

    # Fetched from daphne once each; verified with nothing but the key set.
    keys = httpx.get(f"{live.url}/registry/jwks.json", timeout=10).json()
    token = httpx.get(f"{live.url}/registry/{entry.pk}/attestation.jwt", timeout=10).text
    key = jwt.PyJWKSet.from_dict(keys)[jwt.get_unverified_header(token)["kid"]]
    claims = jwt.decode(token, key, algorithms=["ES256"])
    assert claims["card"]["sha256"] == entry.approved_version.hash
    assert [r["check"] for r in claims["conformance"]["results"]] == [r.name for r in results]
    shown = httpx.get(f"{live.url}/api/registry/agents/{entry.pk}/", timeout=10).json()
    assert shown["attestation"]["state"] == "valid" and shown["attestation"]["token"] == token
