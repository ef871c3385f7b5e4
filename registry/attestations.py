"""The directory's attestations: per approved entry, a statement of what the directory itself
verified (the card's hash, the proven domain and how, the last health, the conformance results,
when), signed as a compact JWS with the directory's own key (push.signing, KeyPurpose.DIRECTORY)
and verifiable offline against the JWKS at /registry/jwks.json. docs/registry.md says what each
claim promises and what it does not.

A statement is issued after each conformance run of an approved entry (registry.conformance)
and lives REGISTRY_ATTESTATION_LIFETIME seconds. It is withdrawn (`revoked_at`, with the reason)
as soon as the entry leaves the approved state (suspended, deprecated, its card changed, its
domain proof lapsed: registry.services and registry.freshness call `revoke`) or the card it
names is no longer the entry's: a verifier who asks its status URL learns so at once, one who
never asks stops trusting it at `exp`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import jwt
from django.conf import settings
from django.utils import timezone

from push import signing
from push.models import KeyPurpose

from . import card_hosts
from .models import Attestation, ConformanceResult, Entry, HealthCheck, State

TYPE = "agentserver-attestation+jwt"
ALGORITHM = signing.ALGORITHM
JWKS_PATH = "/registry/jwks.json"


def issuer() -> str:
    """Who signs: this server's public base URL (the directory's own address)."""
    return settings.PUBLIC_BASE_URL or settings.REGISTRY_HOSTED_BASE_URL


def entry_url(entry_id: int) -> str:
    """The entry's stable URL, the statement's `sub`."""
    return f"{issuer()}/registry/{entry_id}/"


def attestation_url(entry_id: int) -> str:
    """Where the entry's current statement is served (withdrawn: 410 with the reason)."""
    return f"{issuer()}/registry/{entry_id}/attestation.jwt"


def status_url(jti: str) -> str:
    """Where one statement's status is answered, for whoever holds it (its `jti` is random)."""
    return f"{issuer()}/registry/attestations/{jti}/"


def _iso(at: datetime | None) -> str | None:
    return at.isoformat().replace("+00:00", "Z") if at is not None else None


def claims_for(entry: Entry, *, results: list[ConformanceResult], at: datetime, jti: str) -> dict[str, Any]:
    """What the directory states about `entry` now (the caller holds its row lock)."""
    version = entry.approved_version
    assert version is not None
    issued = int(at.timestamp())
    last_check = HealthCheck.objects.filter(entry=entry).order_by("-at").first()
    return {
        "iss": issuer(),
        "sub": entry_url(entry.pk),
        "iat": issued,
        "nbf": issued,
        "exp": issued + int(settings.REGISTRY_ATTESTATION_LIFETIME),
        "jti": jti,
        "status": status_url(jti),
        "entry": {"id": entry.pk, "kind": entry.kind, "state": entry.state},
        "card": {
            "url": entry.card_url,
            "sha256": version.hash,
            "version": version.number,
            "dialect": version.dialect,
            "signed": entry.signed,
            "signing_kid": entry.signing_kid or None,
        },
        # A proof of one host:port (the well-known file over http or another port) is stated as
        # that, never as the domain: a verifier reading `domain` reads only a proven domain.
        ("domain" if entry.domain_proven else "host_port"): {
            "name": entry.proven,
            "method": entry.domain_verified_by,
            "proven_at": _iso(entry.domain_verified_at),
            "last_found_at": _iso(entry.proof_checked_at or entry.domain_verified_at),
        },
        "health": {
            "state": entry.health,
            "last_checked_at": _iso(entry.last_checked_at),
            "last_ok_at": _iso(entry.last_ok_at),
            "last_check_ok": last_check.ok if last_check is not None else None,
        },
        "conformance": {
            "at": _iso(entry.conformance_at),
            "results": [
                {"check": r.name, "dialect": r.dialect, "binding": r.binding, "url": r.url, "outcome": r.outcome}
                for r in results
            ],
        },
        "flags": [flag.code for flag in card_hosts.host_flags(entry, version)],
    }


def issue(*, entry: Entry, results: list[ConformanceResult], at: datetime | None = None) -> Attestation | None:
    """Sign and keep a new statement about an approved entry (inside the caller's transaction,
    its row locked): the entry's earlier live statements are superseded (revoked, "superseded").
    None for an entry that is not approved, or whose proof lapsed."""
    at = at or timezone.now()
    if entry.state != State.APPROVED or entry.approved_version is None or entry.proof_lapsed_at is not None:
        return None
    if entry.current_version_id != entry.approved_version_id:
        return None
    jti = uuid.uuid4().hex
    claims = claims_for(entry, results=results, at=at, jti=jti)
    key = signing.key_for_signing(now=at, purpose=KeyPurpose.DIRECTORY)
    token = jwt.encode(claims, signing.private_key(key), algorithm=ALGORITHM, headers={"kid": key.kid, "typ": TYPE})
    revoke(entry=entry, reason="superseded by a newer attestation", at=at)
    return Attestation.objects.create(
        entry=entry,
        jti=jti,
        token=token,
        card_hash=claims["card"]["sha256"],
        issued_at=at,
        expires_at=at + timedelta(seconds=settings.REGISTRY_ATTESTATION_LIFETIME),
    )


def revoke(*, entry: Entry, reason: str, at: datetime | None = None) -> int:
    """Withdraw the entry's statements still standing; how many. Inside or outside a transaction."""
    return Attestation.objects.filter(entry=entry, revoked_at__isnull=True).update(
        revoked_at=at or timezone.now(), revoked_reason=reason[:2000]
    )


def revoke_changed_card(*, entry: Entry, card_hash: str, at: datetime) -> int:
    """Withdraw the statements about a card that is no longer the entry's."""
    return (
        Attestation.objects.filter(entry=entry, revoked_at__isnull=True)
        .exclude(card_hash=card_hash)
        .update(revoked_at=at, revoked_reason="the card changed: the attested card is no longer the entry's")
    )


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    """One statement's standing: `valid` (served as it is), `revoked` or `expired`."""

    attestation: Attestation
    state: str
    reason: str


def status_of(attestation: Attestation, *, now: datetime | None = None) -> Status:
    now = now or timezone.now()
    if attestation.revoked_at is not None:
        return Status(attestation, "revoked", attestation.revoked_reason)
    if attestation.expires_at <= now:
        return Status(attestation, "expired", "its validity ran out; a newer one comes with the next conformance run")
    return Status(attestation, "valid", "")


def jwks(*, now: datetime | None = None) -> dict[str, Any]:
    """The directory's public keys: every attestation it signed and that may still be valid
    verifies against one of them."""
    return signing.jwks(now=now, purpose=KeyPurpose.DIRECTORY)


def verify(token: str, keys: dict[str, Any]) -> dict[str, Any]:
    """The claims of a statement, checked against a JWKS alone (no server): the key by `kid`,
    ES256, the `typ`, `iat`/`nbf`/`exp`. jwt.InvalidTokenError when it does not verify. What the
    tests and docs/registry.md's example do; a verifier needs nothing else of this server."""
    header = jwt.get_unverified_header(token)
    if header.get("typ") != TYPE:
        raise jwt.InvalidTokenError(f"typ is {header.get('typ')!r}, not {TYPE!r}")
    if header.get("alg") != ALGORITHM:
        raise jwt.InvalidAlgorithmError(f"alg is {header.get('alg')!r}, not {ALGORITHM}")
    found = next((k for k in keys.get("keys", []) if k.get("kid") == header.get("kid")), None)
    if found is None:
        raise jwt.InvalidKeyError(f"no key {header.get('kid')!r} in the key set")
    public = jwt.PyJWK(found, algorithm=ALGORITHM)
    return jwt.decode(token, public, algorithms=[ALGORITHM], options={"require": ["iss", "sub", "iat", "exp", "jti"]})
