"""Keeping proofs fresh (registry/freshness.py): the beat re-checks proven remote entries' domain
proofs on a schedule, and a card pointing away from its proven host is flagged on the page, in
the API and in the admin. The agent's web server is on 127.0.0.1; nothing leaves the machine."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from registry import card_hosts, freshness, proofs
from registry.models import Entry, State
from tests.conformance_agent import CARD_PATH, HOST, approved_entry, running_agent
from tests.registry_factories import make_entry

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(dns):
    yield from running_agent(dns)


def test_an_endpoint_on_another_host_is_flagged_and_one_on_the_card_s_host_is_not(client):
    elsewhere = make_entry(
        name="Elsewhere",
        card_url="https://cards.example.test/.well-known/agent-card.json",
        url="https://runs.other.test/rpc",
    )
    home = make_entry(
        name="Home",
        card_url="https://home.example.test/.well-known/agent-card.json",
        url="https://home.example.test/rpc",
    )
    (flag,) = card_hosts.host_flags(elsewhere, elsewhere.approved_version)
    assert (flag.code, flag.host) == ("endpoint_host", "runs.other.test")
    assert card_hosts.host_flags(home, home.approved_version) == []
    page = client.get(f"/registry/{elsewhere.pk}/").content.decode()
    assert "Endpoint elsewhere" in page and "runs.other.test" in page
    assert "Endpoint elsewhere" not in client.get(f"/registry/{home.pk}/").content.decode()
    api = client.get(f"/api/registry/agents/{elsewhere.pk}/").json()["trust"]["flags"]
    assert api == [{"code": "endpoint_host", "host": "runs.other.test", "detail": flag.detail}]


def test_a_signature_whose_key_set_is_on_another_host_is_flagged(client):
    entry = make_entry(
        name="Signed",
        card_url="https://home.example.test/.well-known/agent-card.json",
        url="https://home.example.test/rpc",
        signed_kid="k1",
    )
    version = entry.approved_version
    version.signatures = [{"kid": "k1", "alg": "ES256", "jku": "https://keys.third.test/jwks.json", "valid": True}]
    version.save(update_fields=["signatures"])
    (flag,) = card_hosts.host_flags(entry, version)
    assert (flag.code, flag.host) == ("jku_host", "keys.third.test")
    assert "Key set elsewhere" in client.get(f"/registry/{entry.pk}/").content.decode()
    # The same host for the key set is no flag.
    version.signatures = [{"kid": "k1", "alg": "ES256", "jku": "https://home.example.test/jwks.json", "valid": True}]
    assert card_hosts.host_flags(entry, version) == []


def test_the_flags_show_in_the_admin(client):
    entry = make_entry(
        name="Elsewhere",
        card_url="https://cards.example.test/.well-known/agent-card.json",
        url="https://runs.other.test/rpc",
    )
    admin = get_user_model().objects.create_superuser("root", password="pw")
    client.force_login(admin)
    page = client.get(f"/admin/registry/entry/{entry.pk}/change/").content.decode()
    assert "runs.other.test" in page and "not on the proven card host" in page


def test_proofs_due_are_proven_remote_entries_handed_out_once(agent):
    entry = approved_entry(agent)
    hosted_like = make_entry(name="Unproven", state=State.DRAFT, verified=False)
    due = freshness.proofs_due()
    assert entry.pk in due and hosted_like.pk not in due
    assert entry.pk not in freshness.proofs_due()  # leased for an interval
    entry.refresh_from_db()
    assert entry.next_proof_check_at > timezone.now() + timedelta(hours=23)


def test_a_proof_found_again_moves_on_and_a_run_twice_does_nothing(agent):
    entry = approved_entry(agent)
    agent.serve(proofs.WELL_KNOWN_PATH, f"{proofs.TOKEN_PREFIX}{entry.proof_token}".encode(), Content_Type="text/plain")
    later = timezone.now() + timedelta(days=1, minutes=1)
    assert freshness.entry_recheck_proof(entry_id=entry.pk, now=later).ok
    assert freshness.entry_recheck_proof(entry_id=entry.pk, now=later + timedelta(minutes=1)) is None
    entry.refresh_from_db()
    assert entry.proof_checked_at == later and entry.state == State.APPROVED
    asked = [p for p in agent.paths() if p == proofs.WELL_KNOWN_PATH]
    assert len(asked) == 1


def test_a_lapsed_pending_entry_stays_pending_and_a_curator_cannot_approve_it(agent, settings):
    settings.REGISTRY_PROOF_LAPSE_AFTER_FAILURES = 1
    entry = approved_entry(agent, state=State.PENDING)
    later = timezone.now() + timedelta(days=2)
    assert not freshness.entry_recheck_proof(entry_id=entry.pk, now=later).ok
    entry.refresh_from_db()
    assert entry.state == State.PENDING and entry.proof_lapsed_at == later
    assert Entry.objects.get(pk=entry.pk).decisions.count() == 1  # nothing decided: it was waiting already
    from registry import services

    curator = get_user_model().objects.create_superuser("curator")
    with pytest.raises(services.RegistryError) as refused:
        services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    assert refused.value.code == "conflict"
    assert CARD_PATH and HOST  # the card stays served: only the proof is gone


def test_the_beat_hands_out_the_conformance_runs_and_the_proof_re_checks_that_are_due(agent):
    from registry.models import Attestation
    from registry.tasks import check_due_entries

    entry = approved_entry(agent)
    agent.serve(proofs.WELL_KNOWN_PATH, f"{proofs.TOKEN_PREFIX}{entry.proof_token}".encode(), Content_Type="text/plain")
    Entry.objects.filter(pk=entry.pk).update(domain_verified_at=timezone.now() - timedelta(days=2))
    done = check_due_entries()  # its jobs run at once here (task_always_eager)
    assert done["conformance"] >= 1 and done["proofs"] >= 1
    entry.refresh_from_db()
    assert entry.conformance_at is not None and entry.proof_checked_at is not None
    assert Attestation.objects.filter(entry=entry, revoked_at__isnull=True).count() == 1
    again = check_due_entries()
    assert again["conformance"] == 0 and again["proofs"] == 0  # each is leased for its interval


def test_the_beat_takes_every_lease_before_it_hands_out_its_first_job(agent, monkeypatch):
    """A check job locks its entry's row to record what it found. Started before the beat's
    later selections, which skip locked rows, it would hide a just-approved entry from its
    conformance run and its proof's re-check until the next beat (the live worker showed it)."""
    from registry import tasks

    entry = approved_entry(agent)
    long_ago = timezone.now() - timedelta(days=2)
    Entry.objects.filter(pk=entry.pk).update(
        next_check_at=long_ago, next_conformance_at=long_ago, next_proof_check_at=None, domain_verified_at=long_ago
    )
    leases_when_handed_out = []

    def hand_out(entry_id: int) -> None:
        leases_when_handed_out.append(
            Entry.objects.filter(pk=entry_id).values_list("next_conformance_at", "next_proof_check_at").get()
        )

    for job in (tasks.check_entry, tasks.check_conformance, tasks.recheck_proof):
        monkeypatch.setattr(job, "delay", hand_out)
    done = tasks.check_due_entries()
    assert (done["due"], done["conformance"], done["proofs"]) == (1, 1, 1)
    assert len(leases_when_handed_out) == 3
    assert all(conforming > timezone.now() and proving is not None for conforming, proving in leases_when_handed_out)
