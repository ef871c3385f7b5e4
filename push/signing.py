"""The server's signing keys, their JWKS, and the signature every notification carries.

Each key signs for one purpose (`KeyPurpose`: push notifications, agent cards, directory
attestations) and is published in that purpose's JWKS; the functions below take the purpose,
push's by default. A notification is signed with a compact JWS (ES256, `kid` in its header) whose claims bind it
to the exact body bytes (`request_body_sha256`), the task, the event and the receiver's URL.
Receivers verify it against the public keys at `/.well-known/jwks.json` (see docs/push.md and
push/verify.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import uuid
from datetime import datetime, timedelta
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.sealing import seal, unseal

from .models import KeyPurpose, SigningKey

ALGORITHM = "ES256"

_private_keys: dict[str, ec.EllipticCurvePrivateKey] = {}
_private_keys_lock = threading.Lock()


def _thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: the SHA-256 of the key's required members, as the key id."""
    canonical = json.dumps({k: jwk[k] for k in ("crv", "kty", "x", "y")}, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).decode().rstrip("=")


def _new_key(*, now: datetime, signs_from: datetime, purpose: str) -> SigningKey:
    private = ec.generate_private_key(ec.SECP256R1())
    public_jwk = jwt.algorithms.ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
    kid = _thumbprint(public_jwk)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    key = SigningKey.objects.create(
        kid=kid,
        purpose=purpose,
        private_key_sealed=seal(pem),
        public_jwk={**public_jwk, "kid": kid, "use": "sig", "alg": ALGORITHM},
        created_at=now,
        signs_from=signs_from,
    )
    with _private_keys_lock:
        _private_keys[kid] = private
    return key


def _private(key: SigningKey) -> ec.EllipticCurvePrivateKey:
    cached = _private_keys.get(key.kid)
    if cached is None:
        loaded = serialization.load_pem_private_key(unseal(key.private_key_sealed).encode(), password=None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        with _private_keys_lock:
            cached = _private_keys.setdefault(key.kid, loaded)
    return cached


def _signing_now(now: datetime) -> Q:
    return Q(signs_from__lte=now) & (Q(signs_until__isnull=True) | Q(signs_until__gt=now))


def key_for_signing(*, now: datetime | None = None, purpose: str = KeyPurpose.PUSH) -> SigningKey:
    """The purpose's newest key allowed to sign now; on first need (no key at all) one is created."""
    now = now or timezone.now()
    key = SigningKey.objects.filter(_signing_now(now), purpose=purpose).order_by("-signs_from", "-id").first()
    if key is None:
        # Two workers may both get here on a fresh install: both keys are published, both valid.
        key = _new_key(now=now, signs_from=now, purpose=purpose)
    return key


def private_key(key: SigningKey) -> ec.EllipticCurvePrivateKey:
    """The key's private half, unsealed once per process."""
    return _private(key)


def sign(claims: dict[str, Any], *, now: datetime | None = None) -> str:
    """A compact JWS over `claims` (which must already hold iat/exp) with push's current key."""
    key = key_for_signing(now=now)
    return jwt.encode(claims, _private(key), algorithm=ALGORITHM, headers={"kid": key.kid, "typ": "JWT"})


def notification_claims(
    *, body: bytes, task_id: str, event_id: str, audience: str, now: datetime | None = None
) -> dict[str, Any]:
    now = now or timezone.now()
    issued = int(now.timestamp())
    return {
        "iss": settings.PUSH_JWS_ISSUER,
        "aud": audience,
        "iat": issued,
        "exp": issued + settings.PUSH_JWS_LIFETIME,
        "jti": uuid.uuid4().hex,
        "taskId": task_id,
        "eventId": event_id,
        "request_body_sha256": hashlib.sha256(body).hexdigest(),
    }


def published_keys(*, now: datetime | None = None, purpose: str = KeyPurpose.PUSH) -> list[SigningKey]:
    now = now or timezone.now()
    return list(
        SigningKey.objects.filter(Q(unpublish_at__isnull=True) | Q(unpublish_at__gt=now), purpose=purpose).order_by(
            "-signs_from", "-id"
        )
    )


def jwks(*, now: datetime | None = None, purpose: str = KeyPurpose.PUSH) -> dict[str, Any]:
    return {"keys": [k.public_jwk for k in published_keys(now=now, purpose=purpose)]}


def key_rotate(
    *,
    publish_delay: float,
    now: datetime | None = None,
    purpose: str = KeyPurpose.PUSH,
    kept_for: float | None = None,
) -> tuple[SigningKey, int]:
    """Create a key of `purpose` that is published at once and signs after `publish_delay`
    seconds; the keys it replaces sign until then and stay published `kept_for` seconds more
    (by default push's: until their last notification's signature expires, plus the
    verification leeway). The purpose's keys past that are deleted. Returns (new key, deleted)."""
    now = now or timezone.now()
    if kept_for is None:
        kept_for = settings.PUSH_JWS_LIFETIME + settings.PUSH_JWS_LEEWAY
    with transaction.atomic():
        signs_from = now + timedelta(seconds=publish_delay)
        # Lock the keys being replaced so two rotations at once cannot interleave their updates.
        replaced = list(SigningKey.objects.select_for_update().filter(signs_until__isnull=True, purpose=purpose))
        new = _new_key(now=now, signs_from=signs_from, purpose=purpose)
        unpublish_at = signs_from + timedelta(seconds=kept_for)
        for key in replaced:
            key.signs_until = signs_from
            key.unpublish_at = unpublish_at
            key.save(update_fields=["signs_until", "unpublish_at"])
        deleted, _ = SigningKey.objects.filter(unpublish_at__lte=now, purpose=purpose).delete()
    return new, deleted
