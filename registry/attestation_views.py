"""The directory's attestations on the web, for verifiers (no sign-in, no JavaScript):

- `/registry/jwks.json`: the directory's public keys (KeyPurpose.DIRECTORY only);
- `/registry/<id>/attestation.jwt`: the entry's current statement as a compact JWS
  (`application/jwt`); 410 with the reason once withdrawn or expired; 404 when there never was
  one, or for an entry the caller may not see (exactly as for no entry at all);
- `/registry/attestations/<jti>/`: one statement's status, for whoever holds it (its `jti` is
  random: knowing it means holding the statement), whether or not its entry is listed now.

Every answer is JSON but the JWS itself; every read is registry.selectors'.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

from . import attestations, selectors
from .models import Attestation

NO_ENTRY = "no entry with this id (or not one you may see)"


def _iso(at: Any) -> str | None:
    return at.isoformat().replace("+00:00", "Z") if at is not None else None


def _standing(attestation: Attestation) -> dict[str, Any]:
    status = attestations.status_of(attestation)
    return {
        "state": status.state,
        "reason": status.reason or None,
        "jti": attestation.jti,
        "entry": attestation.entry_id,
        "card_sha256": attestation.card_hash,
        "issued_at": _iso(attestation.issued_at),
        "expires_at": _iso(attestation.expires_at),
        "revoked_at": _iso(attestation.revoked_at),
    }


@require_safe
def jwks(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(attestations.jwks())
    response["Cache-Control"] = f"public, max-age={settings.PUSH_JWKS_MAX_AGE}"
    return response


@require_safe
def entry_attestation(request: HttpRequest, pk: int) -> HttpResponse:
    entry = selectors.entries_visible_to(request.user).only("pk").filter(pk=pk).first()
    if entry is None:
        return JsonResponse({"detail": NO_ENTRY}, status=404)
    attestation = selectors.attestation_of(entry)
    if attestation is None:
        return JsonResponse(
            {"detail": "the directory has not attested this entry (it attests approved entries after checking them)"},
            status=404,
        )
    standing = _standing(attestation)
    if standing["state"] != "valid":
        return JsonResponse(
            {"detail": f"the attestation is {standing['state']}: {standing['reason']}", **standing}, status=410
        )
    response = HttpResponse(attestation.token, content_type="application/jwt")
    response["Cache-Control"] = "no-cache"  # a withdrawal must be seen at once
    return response


@require_safe
def attestation_status(request: HttpRequest, jti: str) -> JsonResponse:
    attestation = selectors.attestation_by_jti(jti)
    if attestation is None:
        return JsonResponse({"detail": "no attestation with this id"}, status=404)
    standing = _standing(attestation)
    response = JsonResponse(standing, status=200 if standing["state"] == "valid" else 410)
    response["Cache-Control"] = "no-cache"
    return response
