"""Entries, versions and checks as the API shows them: plain dicts in the shapes of
registry.api.serializers, built from what registry.selectors reads.

An entry's summary is its listed face: the columns and the index of the version it is
searched by (the approved one while there is one, else the latest: registry.services._reindex),
so a list never reads more than one row per entry. The detail adds the card the caller may see
(registry.selectors.shown_version) and, for its owners and curators, its history, the domain
proof and the moves they may make."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework.request import Request

from .. import attestations, card_hosts, drafts, proofs, selectors, services
from ..models import Attestation, CardVersion, ConformanceResult, Entry, HealthCheck, Kind, ProofMethod

# Columns a list never needs: the search vector, and the card versions' heavy members.
LIST_DEFERRED = (
    "search",
    *(f"{rel}__{col}" for rel in ("approved_version", "current_version") for col in ("raw", "document", "signatures")),
)
VERSION_HEAVY = tuple(f"version__{col}" for col in ("raw", "document", "index", "signatures"))


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value if isinstance(v, str | int | float)] if isinstance(value, list | tuple) else []


def _skills(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list | tuple):
        return []
    return [
        {"id": str(s.get("id") or ""), "name": str(s.get("name") or s.get("id") or "")}
        for s in value
        if isinstance(s, dict)
    ]


def entry_url(request: Request, entry_id: int) -> str:
    return request.build_absolute_uri(reverse("registry-api:agent-detail", args=[entry_id]))


def page_url(request: Request, entry_id: int) -> str:
    return request.build_absolute_uri(f"/registry/{entry_id}/")


def version_url(request: Request, entry_id: int, number: int) -> str:
    return request.build_absolute_uri(reverse("registry-api:agent-version", args=[entry_id, number]))


def listed_version(entry: Entry) -> CardVersion | None:
    """The version the entry's columns and facets were copied from."""
    return entry.approved_version or entry.current_version


def summary(entry: Entry, request: Request, *, ranked: bool = False) -> dict[str, Any]:
    version = listed_version(entry)
    index: dict[str, Any] = version.index if version is not None and isinstance(version.index, dict) else {}
    proven = entry.proven
    return {
        "id": entry.pk,
        "url": entry_url(request, entry.pk),
        "page_url": page_url(request, entry.pk),
        "name": entry.name,
        "description": entry.description,
        "provider": entry.provider,
        "kind": entry.kind,
        "state": entry.state,
        "dialect": entry.dialect,
        "protocol_versions": _strings(index.get("protocol_versions")),
        "bindings": _strings(index.get("bindings")),
        "endpoint_url": entry.endpoint_url,
        "tags": _strings(index.get("tags")),
        "skills": _skills(index.get("skills")),
        "capabilities": _strings(index.get("capabilities")),
        "input_modes": _strings(index.get("input_modes")),
        "output_modes": _strings(index.get("output_modes")),
        "security": _strings(index.get("security_schemes")),
        "verified": entry.domain_proven,
        "proven": proven or None,
        "verified_by": (entry.domain_verified_by or None) if proven else None,
        "signed": entry.signed,
        "signing_kid": (entry.signing_kid or None) if entry.signed else None,
        "health": entry.health,
        "last_checked_at": entry.last_checked_at,
        "latency_ms": entry.latency_ms,
        "listed_at": entry.listed_at,
        "rank": getattr(entry, "rank", None) if ranked else None,
    }


def _signatures(version: CardVersion | None) -> list[dict[str, Any]]:
    if version is None or not isinstance(version.signatures, list):
        return []
    return [
        {
            "kid": str(s.get("kid") or ""),
            "alg": str(s.get("alg") or ""),
            "valid": bool(s.get("valid")),
            "reason": str(s.get("reason") or ""),
        }
        for s in version.signatures
        if isinstance(s, dict)
    ]


def _check(check: HealthCheck) -> dict[str, Any]:
    return {
        "at": check.at,
        "ok": check.ok,
        "card_ok": check.card_ok,
        "endpoint_ok": check.endpoint_ok,
        "status": check.status,
        "latency_ms": check.latency_ms,
        "detail": check.detail,
    }


def _result(result: ConformanceResult) -> dict[str, Any]:
    return {
        "check": result.name,
        "dialect": result.dialect,
        "binding": result.binding,
        "url": result.url,
        "outcome": result.outcome,
        "detail": result.detail,
        "at": result.at,
    }


def attestation(found: Attestation | None, request: Request, entry_id: int) -> dict[str, Any] | None:
    """The entry's newest attestation and its standing; the JWS itself only while it stands."""
    if found is None:
        return None
    status = attestations.status_of(found)
    return {
        "state": status.state,
        "reason": status.reason or None,
        "url": request.build_absolute_uri(reverse("registry:attestation", args=[entry_id])),
        "status_url": request.build_absolute_uri(reverse("registry:attestation-status", args=[found.jti])),
        "jwks_url": request.build_absolute_uri(reverse("registry:jwks")),
        "jti": found.jti,
        "card_sha256": found.card_hash,
        "issued_at": found.issued_at,
        "expires_at": found.expires_at,
        "revoked_at": found.revoked_at,
        "token": found.token if status.state == "valid" else None,
    }


def proof(entry: Entry) -> dict[str, Any] | None:
    """What the submitter publishes to prove the card's domain (remote entries only)."""
    if entry.kind != Kind.REMOTE or not entry.proof_token:
        return None
    try:
        steps = proofs.instructions(card_url=entry.card_url, token=entry.proof_token)
    except ValueError as exc:
        steps = {"domain": entry.domain, "unavailable": str(exc)}
    methods = [ProofMethod.HTTP.value] + ([] if "dns_unavailable" in steps else [ProofMethod.DNS.value])
    return {
        "token": entry.proof_token,
        "verified": entry.domain_verified_at is not None,
        "methods": methods,
        "instructions": {str(k): str(v) for k, v in steps.items()},
        "expires_at": drafts.draft_expires_at(entry),
    }


def detail(entry: Entry, request: Request) -> dict[str, Any]:
    user = request.user
    role = selectors.role_of(user, entry)
    shown = selectors.shown_version(entry, user=user)
    versions = selectors.versions_of(entry, user=user).only("entry_id", "number", "hash", "dialect", "fetched_at")
    proven = entry.proven
    data = summary(entry, request)
    data.update(
        {
            "state_changed_at": entry.state_changed_at,
            "card_url": entry.card_url,
            "card": shown.document if shown is not None else None,
            "card_version": shown.number if shown is not None else None,
            "versions": [
                {
                    "number": v.number,
                    "hash": v.hash,
                    "dialect": v.dialect,
                    "fetched_at": v.fetched_at,
                    "url": version_url(request, entry.pk, v.number),
                }
                for v in versions
            ],
            "health": {
                "state": entry.health,
                "last_checked_at": entry.last_checked_at,
                "last_ok_at": entry.last_ok_at,
                "latency_ms": entry.latency_ms,
                "consecutive_failures": entry.consecutive_failures,
                "uptime": selectors.uptimes(entry),
                "checks": [_check(c) for c in selectors.checks_of(entry, limit=50)],
            },
            "trust": {
                "domain": entry.domain,
                "verified": entry.domain_proven,
                "proven": proven or None,
                "verified_by": (entry.domain_verified_by or None) if proven else None,
                "verified_at": entry.domain_verified_at,
                "signed": entry.signed,
                "signing_kid": (entry.signing_kid or None) if entry.signed else None,
                "signatures": _signatures(shown),
                "proof_checked_at": entry.proof_checked_at,
                "proof_lapsed_at": entry.proof_lapsed_at,
                "flags": [
                    {"code": f.code, "host": f.host, "detail": f.detail} for f in card_hosts.host_flags(entry, shown)
                ],
            },
            "conformance": {
                "at": entry.conformance_at,
                "results": [_result(r) for r in selectors.conformance_of(entry)],
            },
            "attestation": attestation(selectors.attestation_of(entry), request, entry.pk),
            "decisions": None,
            "proof": None,
            "allowed_transitions": None,
        }
    )
    if selectors.sees_everything_of(user, entry):
        data["decisions"] = [
            {
                "from_state": d.from_state,
                "to_state": d.to_state,
                "actor": d.actor.get_username() if d.actor else None,
                "reason": d.reason,
                "at": d.at,
                "version": d.version.number if d.version else None,
            }
            for d in selectors.decisions_of(entry).defer(*VERSION_HEAVY)
        ]
    if role is not None:
        data["proof"] = proof(entry)
        data["allowed_transitions"] = services.allowed_targets(entry, role)
    return data


def version(version: CardVersion, entry: Entry) -> dict[str, Any]:
    return {
        "entry": entry.pk,
        "number": version.number,
        "hash": version.hash,
        "dialect": version.dialect,
        "fetched_from": version.fetched_from,
        "fetched_at": version.fetched_at,
        "etag": version.etag,
        "approved": version.pk == entry.approved_version_id,
        "raw": version.raw,
        "document": version.document,
        "index": version.index,
        "signatures": _signatures(version),
    }
