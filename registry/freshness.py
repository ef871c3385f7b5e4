"""Keeping what the directory proved fresh: a remote entry's domain proof is looked for again on
a schedule, and a card whose endpoints, or whose signature's key set (`jku`), sit on a host
other than the proven card host is flagged.

A proof found again moves `proof_checked_at` on. Not found REGISTRY_PROOF_LAPSE_AFTER_FAILURES
times in a row, it has lapsed: an approved entry goes back to review (as one whose card changed:
registry.services.entry_back_to_review), its attestation is withdrawn whatever its state, and it
cannot be approved again until its owner proves the domain again (entry_verify_domain). A single
miss (a DNS timeout, a restart of the agent's web server) lapses nothing.

The flags are read from the shown card, never stored: they change exactly when the card does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from . import attestations, proofs, services
from .models import CardVersion, Entry, Kind, ProofMethod, State

# Entries whose proof is re-checked: every proven remote entry but those the directory let go.
_RECHECKED_STATES = (State.PENDING, State.APPROVED, State.DEPRECATED, State.SUSPENDED)


# --- flags ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostFlag:
    code: str  # "endpoint_host" or "jku_host"
    host: str  # the other host
    detail: str  # a sentence for the page


def _host(url: Any) -> str:
    if not isinstance(url, str) or not url:
        return ""
    try:
        return proofs.domain_of(url)
    except ValueError:
        return ""


def host_flags(entry: Entry, version: CardVersion | None) -> list[HostFlag]:
    """What in `version` points away from the host whose control was proven (entry.domain):
    an endpoint on another host (the proof says nothing of who answers there), a signature
    whose keys were fetched from another host (whoever runs that host vouches for the card)."""
    if version is None:
        return []
    flags: list[HostFlag] = []
    seen: set[tuple[str, str]] = set()
    index = version.index if isinstance(version.index, dict) else {}
    endpoints = index.get("endpoints")
    for endpoint in endpoints if isinstance(endpoints, list) else []:
        host = _host(endpoint.get("url") if isinstance(endpoint, dict) else None)
        if host and host != entry.domain and ("endpoint_host", host) not in seen:
            seen.add(("endpoint_host", host))
            flags.append(
                HostFlag(
                    "endpoint_host",
                    host,
                    f"an endpoint is on {host}, not on the proven card host {entry.domain}",
                )
            )
    signatures = version.signatures if isinstance(version.signatures, list) else []
    for check in signatures:
        host = _host(check.get("jku") if isinstance(check, dict) else None)
        if host and host != entry.domain and ("jku_host", host) not in seen:
            seen.add(("jku_host", host))
            flags.append(
                HostFlag(
                    "jku_host",
                    host,
                    f"a signature's key set (jku) is on {host}, not on the card's host {entry.domain}",
                )
            )
    return flags


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
