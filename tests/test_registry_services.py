"""The directory's writes: submitting a remote agent, proving its domain, curators' decisions
pinned to the card's hash, a changed card going back to review, liveness, hosted agents'
entries and flags. Remote agents are real HTTP servers on loopback (tests/card_server.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from registry import proofs, selectors, services
from registry.models import CardVersion, Decision, Entry, Flag, Health, HealthCheck, Kind, State
from registry.services import RegistryError
from tests.card_examples import a2a_1_0
from tests.card_server import CardServer
from tests.conftest import make_agent
from tests.test_registry_card_signatures import es256_key, sdk_sign

pytestmark = pytest.mark.django_db

HOST = "planner.example.test"


@pytest.fixture
def server(dns):
    dns[HOST] = ["127.0.0.1"]
    running = CardServer().start()
    yield running
    running.stop()


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice")


@pytest.fixture
def curator():
    return get_user_model().objects.create_user("carol", is_staff=True, is_superuser=True)


def card_for(server: CardServer, **changes: Any) -> dict[str, Any]:
    card = a2a_1_0()
    card["supportedInterfaces"] = [
        {"url": server.url("/rpc", host=HOST), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    card.update(changes)
    return card


def serve_card(server: CardServer, **changes: Any) -> dict[str, Any]:
    card = card_for(server, **changes)
    server.serve("/.well-known/agent-card.json", card)
    server.serve("/rpc", b"", status=405)
    return card


def submitted(server: CardServer, user) -> Entry:
    serve_card(server)
    return services.entry_submit(url=server.url("/", host=HOST), user=user)


def prove(server: CardServer, entry: Entry) -> None:
    server.serve(proofs.WELL_KNOWN_PATH, f"{proofs.TOKEN_PREFIX}{entry.proof_token}\n".encode())
    result = services.entry_verify_domain(entry=entry, method="http", actor=entry.submitted_by)
    assert result.ok, result.detail


def check_now(entry: Entry) -> HealthCheck | None:
    Entry.objects.filter(pk=entry.pk).update(last_checked_at=None)
    return services.entry_check(entry_id=entry.pk)


def listed_names(q: str = "") -> list[str]:
    return [e.name for e in selectors.entry_search(selectors.Search(q=q))]


def test_submit_prove_review_approve_list_then_a_changed_card_goes_back_to_review(server, alice, curator):
    entry = submitted(server, alice)
    assert (entry.state, entry.kind, entry.domain) == (State.DRAFT, Kind.REMOTE, HOST)
    assert entry.current_version.number == 1 and entry.name == "Route Planner"
    assert not entry.is_listed and listed_names() == []

    with pytest.raises(RegistryError, match="prove control"):
        services.entry_decide(entry=entry, to=State.PENDING, actor=alice, role="owner")

    prove(server, entry)
    entry.refresh_from_db()
    assert entry.state == State.PENDING and entry.domain_verified_by == "http"

    with pytest.raises(RegistryError) as refused:
        services.entry_decide(entry=entry, to=State.APPROVED, actor=alice, role="owner")
    assert refused.value.code == "forbidden"

    first = entry.current_version
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator", version_hash=first.hash)
    entry.refresh_from_db()
    assert entry.state == State.APPROVED and entry.approved_version == first and entry.is_listed
    assert listed_names("cycling routes") == ["Route Planner"]

    # The agent changes its card: the liveness check keeps it as version 2 and sends the entry
    # back to review, while version 1 stays what the public sees.
    serve_card(server, description="Plans hiking trails through the mountains.")
    check_now(entry)
    entry.refresh_from_db()
    assert entry.state == State.PENDING and entry.current_version.number == 2
    assert entry.approved_version == first and entry.is_listed
    assert entry.description == "Plans cycling routes between two places."
    assert listed_names("mountains") == [] and listed_names("cycling") == ["Route Planner"]
    assert selectors.shown_version(entry).number == 1  # the public's
    assert selectors.shown_version(entry, user=curator).number == 2

    # Approving what the curator saw before the change approves nothing.
    with pytest.raises(RegistryError, match="changed since"):
        services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator", version_hash=first.hash)
    second = entry.current_version
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator", version_hash=second.hash)
    entry.refresh_from_db()
    assert entry.approved_version == second
    assert listed_names("mountains") == ["Route Planner"]

    trail = [(d.from_state, d.to_state, d.actor.username if d.actor else None) for d in selectors.decisions_of(entry)]
    assert trail[::-1] == [
        ("", "draft", "alice"),
        ("draft", "pending", "alice"),
        ("pending", "approved", "carol"),
        ("approved", "pending", None),
        ("pending", "approved", "carol"),
    ]


def test_an_unchanged_card_adds_no_version_and_keeps_the_approval(server, alice, curator):
    entry = submitted(server, alice)
    prove(server, entry)
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    check_now(entry)
    entry.refresh_from_db()
    assert entry.state == State.APPROVED and entry.versions.count() == 1


def test_rejecting_a_changed_card_unlists_the_entry_until_it_is_fixed(server, alice, curator):
    entry = submitted(server, alice)
    prove(server, entry)
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    serve_card(server, name="Totally Official Bank Agent")
    check_now(entry)
    with pytest.raises(RegistryError, match="reason is required"):
        services.entry_decide(entry=entry, to=State.REJECTED, actor=curator, role="curator")
    services.entry_decide(entry=entry, to=State.REJECTED, actor=curator, role="curator", reason="impersonation")
    entry.refresh_from_db()
    assert not entry.is_listed and listed_names() == []
    assert Decision.objects.filter(entry=entry, to_state=State.REJECTED, reason="impersonation").exists()
    services.entry_decide(entry=entry, to=State.PENDING, actor=alice, role="owner")  # resubmitted


def test_a_suspended_entry_is_not_listed_and_a_curator_may_reinstate_it(server, alice, curator):
    entry = submitted(server, alice)
    prove(server, entry)
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    services.entry_decide(entry=entry, to=State.SUSPENDED, actor=curator, role="curator", reason="abuse report")
    assert listed_names() == []
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    assert listed_names() == ["Route Planner"]


def test_a_deprecated_entry_stays_public_but_leaves_search_unless_asked_for(server, alice, curator):
    entry = submitted(server, alice)
    prove(server, entry)
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    services.entry_decide(entry=entry, to=State.DEPRECATED, actor=alice, role="owner", reason="use v2")
    assert listed_names() == []
    assert [e.pk for e in selectors.entry_search(selectors.Search(include_deprecated=True))] == [entry.pk]
    assert Entry.objects.listed().filter(pk=entry.pk).exists()


def test_a_wrong_token_proves_nothing_and_the_entry_stays_a_draft(server, alice):
    entry = submitted(server, alice)
    server.serve(proofs.WELL_KNOWN_PATH, b"agentserver-verification=someone-elses-token-0000000000000000")
    result = services.entry_verify_domain(entry=entry, method="http", actor=alice)
    entry.refresh_from_db()
    assert not result.ok and entry.state == State.DRAFT and entry.domain_verified_at is None


def test_the_database_refuses_an_approval_without_a_proven_domain(server, alice):
    from django.db import IntegrityError, transaction

    entry = submitted(server, alice)
    with pytest.raises(IntegrityError), transaction.atomic():
        Entry.objects.filter(pk=entry.pk).update(approved_version=entry.current_version)


def test_an_invalid_card_is_refused_with_each_problem_and_its_path(server, alice):
    card = card_for(server)
    card["skills"][0]["tags"] = "cycling"
    del card["name"]
    server.serve("/.well-known/agent-card.json", card)
    with pytest.raises(RegistryError) as refused:
        services.entry_submit(url=server.url("/", host=HOST), user=alice)
    paths = {p.path for p in refused.value.problems}
    assert {"/name", "/skills/0/tags"} <= paths or {"", "/skills/0/tags"} <= paths
    assert Entry.objects.count() == 0


def test_a_card_that_cannot_be_read_is_refused_saying_why(server, alice):
    with pytest.raises(RegistryError) as refused:
        services.entry_submit(url=server.url("/", host=HOST), user=alice)
    assert refused.value.code == "unavailable" and "404" in str(refused.value)
    with pytest.raises(RegistryError) as guarded:
        services.entry_submit(url="http://127.0.0.2:8080/", user=alice)
    assert guarded.value.code == "unavailable" and "this address is not allowed: 127.0.0.2" in str(guarded.value)
    assert "loopback" not in str(guarded.value)


def test_the_same_card_submitted_twice_finds_the_first_entry(server, alice):
    entry = submitted(server, alice)
    with pytest.raises(RegistryError) as again:
        services.entry_submit(url=server.url("/", host=HOST), user=alice)
    assert again.value.code == "conflict" and str(entry.pk) in str(again.value)


def test_a_dead_agent_fails_then_goes_stale_and_recovers(server, alice, settings):
    settings.REGISTRY_STALE_AFTER_FAILURES = 3
    entry = submitted(server, alice)
    check = check_now(entry)
    assert check is not None and check.ok and check.status == 405
    entry.refresh_from_db()
    assert entry.health == Health.HEALTHY and entry.last_ok_at is not None

    server.serve("/rpc", b"down", status=503)
    for expected in (Health.DEGRADED, Health.DEGRADED, Health.STALE):
        check = check_now(entry)
        entry.refresh_from_db()
        assert check is not None and not check.ok and "503" in check.detail
        assert entry.health == expected
    assert [e.pk for e in selectors.entry_search(selectors.Search(healthy=True), base=Entry.objects.all())] == []

    server.serve("/rpc", b"", status=405)
    check_now(entry)
    entry.refresh_from_db()
    assert entry.health == Health.HEALTHY and entry.consecutive_failures == 0
    assert selectors.uptime(entry, days=1) == 40.0


def test_an_agent_whose_server_is_gone_is_recorded_with_the_reason(server, alice):
    entry = submitted(server, alice)
    server.stop()
    check = check_now(entry)
    assert check is not None and not check.ok and not check.card_ok
    assert "card" in check.detail


def test_a_check_run_twice_at_once_records_one_check(server, alice):
    entry = submitted(server, alice)
    now = timezone.now()
    assert services.entry_check(entry_id=entry.pk, now=now) is not None
    assert services.entry_check(entry_id=entry.pk, now=now + timedelta(seconds=1)) is None
    assert HealthCheck.objects.filter(entry=entry).count() == 1


def test_due_entries_are_handed_out_once_until_their_interval_passes(server, alice):
    entry = submitted(server, alice)
    # A proven entry: an unproven draft is never due (tests/test_registry_squatting.py).
    Entry.objects.filter(pk=entry.pk).update(
        next_check_at=timezone.now() - timedelta(seconds=1), domain_verified_at=timezone.now()
    )
    assert services.entries_due() == [entry.pk]
    assert services.entries_due() == []


def test_a_hosted_agent_gets_an_entry_awaiting_review_with_its_generated_card(tenant):
    agent = make_agent(tenant, "helper", "echo")
    entry = services.hosted_entry_sync(agent_id=agent.pk)
    assert entry is not None
    assert (entry.kind, entry.state, entry.domain_verified_by) == (Kind.HOSTED, State.PENDING, "hosted")
    assert entry.current_version.dialect == "1.0" and entry.name == agent.name
    assert entry.card_url == f"http://localhost:8000{agent.path}.well-known/agent-card.json"
    assert entry.health == Health.HEALTHY


def test_a_hosted_agent_s_changed_card_goes_back_to_review(tenant, curator):
    agent = make_agent(tenant, "helper", "echo")
    entry = services.hosted_entry_sync(agent_id=agent.pk)
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    agent.description = "Now it also translates."
    agent.save()
    services.hosted_entry_sync(agent_id=agent.pk)
    entry.refresh_from_db()
    assert entry.state == State.PENDING and entry.current_version.number == 2 and entry.is_listed
    assert CardVersion.objects.filter(entry=entry).count() == 2
    assert services.hosted_entry_sync(agent_id=agent.pk) == entry
    assert CardVersion.objects.filter(entry=entry).count() == 2  # unchanged: no new version


@pytest.mark.django_db(transaction=True)
def test_saving_an_agent_makes_its_entry_once_the_save_commits(tenant):
    agent = make_agent(tenant, "fresh", "echo")
    assert Entry.objects.filter(agent=agent, kind=Kind.HOSTED).exists()


def test_a_user_flags_an_entry_once_until_a_curator_resolves_it(server, alice, curator):
    entry = submitted(server, alice)
    with pytest.raises(RegistryError):
        services.entry_flag(entry=entry, user=alice, reason="   ")
    flag = services.entry_flag(entry=entry, user=alice, reason="pretends to be a bank")
    with pytest.raises(RegistryError) as again:
        services.entry_flag(entry=entry, user=alice, reason="still")
    assert again.value.code == "conflict"
    services.flag_resolve(flag=flag, user=curator, resolution="checked: fine")
    services.entry_flag(entry=entry, user=alice, reason="it is back")
    assert Flag.objects.filter(entry=entry).count() == 2
    assert list(selectors.open_flags()) == [Flag.objects.get(resolved_at__isnull=True)]


def test_who_may_do_what_is_one_table(server, alice):
    entry = submitted(server, alice)
    assert services.allowed_targets(entry, "owner") == []  # the domain first
    entry.domain_verified_at = timezone.now()
    assert services.allowed_targets(entry, "owner") == [State.PENDING]
    assert services.allowed_targets(entry, "curator") == [State.PENDING]
    entry.state = State.PENDING
    assert sorted(services.allowed_targets(entry, "curator")) == sorted(
        [State.APPROVED, State.REJECTED, State.SUSPENDED]
    )
    assert services.allowed_targets(entry, "owner") == []


def test_a_card_changed_and_changed_back_is_the_approved_version_again_and_approved(server, alice, curator):
    entry = submitted(server, alice)
    prove(server, entry)
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    serve_card(server, description="A passing change.")
    check_now(entry)
    serve_card(server)  # as approved
    check_now(entry)
    entry.refresh_from_db()
    assert entry.state == State.APPROVED and entry.current_version == entry.approved_version
    assert entry.versions.count() == 2
    assert entry.decisions.first().reason == "the card is the approved version 1 again"


def test_a_card_back_to_its_approved_version_after_a_curator_s_decision_waits_for_a_curator(server, alice, curator):
    entry = submitted(server, alice)
    prove(server, entry)
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    services.entry_decide(entry=entry, to=State.SUSPENDED, actor=curator, role="curator", reason="checking")
    services.entry_decide(entry=entry, to=State.PENDING, actor=curator, role="curator")
    serve_card(server, description="Another.")
    check_now(entry)
    serve_card(server)
    check_now(entry)
    entry.refresh_from_db()
    assert entry.state == State.PENDING


def test_a_signed_card_makes_a_signed_entry_with_its_key_id_and_a_tampered_one_does_not(server, alice):
    private, jwk = es256_key()
    jku = server.jwks([{**jwk, "kid": "planner-2026"}])
    signed = sdk_sign(card_for(server), private, {"alg": "ES256", "kid": "planner-2026", "jku": jku, "typ": "JOSE"})
    server.serve("/.well-known/agent-card.json", signed)
    entry = services.entry_submit(url=server.url("/", host=HOST), user=alice)
    assert entry.signed and entry.signing_kid == "planner-2026"
    assert entry.current_version.signatures[0]["valid"] is True

    tampered = {**signed, "description": "Sends your money elsewhere."}
    server.serve("/other/.well-known/agent-card.json", tampered)
    other = services.entry_submit(url=server.url("/other/", host=HOST), user=alice)
    assert not other.signed and other.signing_kid == ""
    [check] = other.current_version.signatures
    assert check["valid"] is False and check["reason"]


@pytest.mark.parametrize("reason", ["a\x00b", "x" * 2001, "\ud800"])
def test_a_reason_the_store_cannot_hold_is_refused_saying_why(server, alice, curator, reason):
    entry = submitted(server, alice)
    prove(server, entry)
    with pytest.raises(RegistryError, match="the reason"):
        services.entry_decide(entry=entry, to=State.REJECTED, actor=curator, role="curator", reason=reason)
    with pytest.raises(RegistryError, match="a flag's reason"):
        services.entry_flag(entry=entry, user=alice, reason=reason)
    entry.refresh_from_db()
    assert entry.state == State.PENDING and not entry.flags.exists()


def test_uptime_over_a_day_a_week_and_a_month_counts_each_window_s_checks(server, alice):
    entry = submitted(server, alice)
    now = timezone.now()
    ages_and_results = [(0.5, True), (0.8, False), (3, True), (5, True), (20, False), (25, False), (40, True)]
    HealthCheck.objects.bulk_create(
        HealthCheck(entry=entry, at=now - timedelta(days=age), ok=ok, card_ok=ok, endpoint_ok=ok)
        for age, ok in ages_and_results
    )
    assert selectors.uptimes(entry, now=now) == {"1d": 50.0, "7d": 75.0, "30d": 50.0}
    assert [selectors.uptime(entry, days=d, now=now) for d in (1, 7, 30)] == [50.0, 75.0, 50.0]
