"""Keeping what the directory proved fresh: a remote entry's domain proof is looked for again on
a schedule (the flags for a card pointing away from its proven host are registry.card_hosts).

A proof found again moves `proof_checked_at` on. Not found REGISTRY_PROOF_LAPSE_AFTER_FAILURES
times in a row, it has lapsed: an approved entry goes back to review (as one whose card changed:
registry.services.entry_back_to_review), its attestation is withdrawn whatever its state, and it
cannot be approved again until its owner proves the domain again (entry_verify_domain). A single
miss (a DNS timeout, a restart of the agent's web server) lapses nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from . import attestations, proofs, services
from .models import Entry, Kind, ProofMethod, State

# Entries whose proof is re-checked: every proven remote entry but those the directory let go.
_RECHECKED_STATES = (State.PENDING, State.APPROVED, State.DEPRECATED, State.SUSPENDED)


# --- proofs re-verified --------------------------------------------------------------------


def proofs_due(*, now: datetime | None = None, limit: int = 100) -> list[int]:
    """Remote entries whose proof is due to be looked for again, their next look moved on (a
    lease: the beat job does not hand one out twice while its check runs)."""
    now = now or timezone.now()
    with transaction.atomic():
        ids = list(
            Entry.objects.select_for_update(skip_locked=True)
            .filter(kind=Kind.REMOTE, state__in=_RECHECKED_STATES, domain_verified_at__isnull=False)
            .filter(domain_verified_by__in=(ProofMethod.HTTP, ProofMethod.DNS), proof_lapsed_at__isnull=True)
            .filter(Q(next_proof_check_at__isnull=True) | Q(next_proof_check_at__lte=now))
            .order_by("next_proof_check_at")
            .values_list("pk", flat=True)[:limit]
        )
        Entry.objects.filter(pk__in=ids).update(
            next_proof_check_at=now + timedelta(seconds=settings.REGISTRY_PROOF_RECHECK_INTERVAL)
        )
    return ids


def entry_recheck_proof(*, entry_id: int, now: datetime | None = None) -> proofs.ProofResult | None:
    """Look for an entry's proof again, by the method that proved it (network I/O first, then
    one short transaction). None when there is nothing to re-check. Safe to run twice: a second
    run within half an interval of a found proof does nothing."""
    now = now or timezone.now()
    entry = Entry.objects.filter(pk=entry_id, kind=Kind.REMOTE, state__in=_RECHECKED_STATES).first()
    if entry is None or entry.domain_verified_at is None or entry.proof_lapsed_at is not None:
        return None
    if entry.domain_verified_by not in (ProofMethod.HTTP, ProofMethod.DNS) or not entry.proof_token:
        return None
    recent = entry.proof_checked_at or entry.domain_verified_at
    if now - recent < timedelta(seconds=settings.REGISTRY_PROOF_RECHECK_INTERVAL / 2):
        return None
    result = proofs.check(card_url=entry.card_url, token=entry.proof_token, method=entry.domain_verified_by)  # type: ignore[arg-type]
    with transaction.atomic():
        locked = (
            Entry.objects.select_for_update(of=("self",))
            .select_related("current_version", "approved_version")
            .get(pk=entry_id)
        )
        if locked.proof_lapsed_at is not None or locked.domain_verified_at is None:
            return result
        if result.ok:
            locked.proof_checked_at, locked.proof_failures = now, 0
            locked.save(update_fields=["proof_checked_at", "proof_failures", "updated_at"])
            return result
        locked.proof_failures += 1
        fields = ["proof_failures", "updated_at"]
        if locked.proof_failures >= settings.REGISTRY_PROOF_LAPSE_AFTER_FAILURES:
            locked.proof_lapsed_at = now
            fields.append("proof_lapsed_at")
        locked.save(update_fields=fields)
        if locked.proof_lapsed_at is not None:
            why = f"the domain proof lapsed ({locked.proof_failures} re-checks did not find it: {result.detail})"
            attestations.revoke(entry=locked, reason=why, at=now)
            services.entry_back_to_review(entry=locked, why=why, version=locked.current_version, at=now)
    return result
