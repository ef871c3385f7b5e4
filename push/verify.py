"""Verifying an agentserver push notification, for receivers (see docs/push.md).

Standalone on purpose: it needs PyJWT with cryptography (`pip install "pyjwt[crypto]"`) and
the standard library, not Django, so a receiver can copy this file. The server's tests
verify every notification they receive with it.

    jwks = JwksCache("https://agents.example.com/.well-known/jwks.json")

    def webhook(request):
        try:
            n = verify_notification(body=request.body, headers=request.headers, jwks=jwks,
                                    issuer="https://agents.example.com",
                                    audience="https://me.example.com/a2a-hook")
        except VerificationError as exc:
            return 401
        if seen_before(n.event_id):  # at least once: the same event may come again
            return 200
        handle(n.event)              # the StreamResponse: statusUpdate, artifactUpdate or message
        return 200
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt

SIGNATURE_HEADER = "A2A-Push-Signature"
EVENT_ID_HEADER = "A2A-Push-Event-Id"
ALGORITHMS = ["ES256"]
REQUIRED_CLAIMS = ["iss", "iat", "exp", "jti", "taskId", "eventId", "request_body_sha256"]


class VerificationError(Exception):
    """The notification is not authentic, not intact, or too old: reject it."""


@dataclass(frozen=True)
class Notification:
    event: dict[str, Any]  # the StreamResponse
    task_id: str
    event_id: str  # "<task id>:<seq>": deduplicate on it
    jti: str  # unique per attempt: reject a jti seen before to stop replays
    claims: dict[str, Any]


class JwksCache:
    """The server's public keys, fetched on first use, again after `max_age` seconds, and at
    once (at most every `min_refetch` seconds) when a notification names an unknown key."""

    def __init__(
        self,
        url: str,
        *,
        max_age: float = 300,
        min_refetch: float = 10,
        timeout: float = 5,
        fetch: Callable[[str], Mapping[str, Any]] | None = None,
    ) -> None:
        self.url = url
        self.max_age = max_age
        self.min_refetch = min_refetch
        self.timeout = timeout
        self._fetch = fetch or self._http_get
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = float("-inf")
        self._lock = threading.Lock()

    def _http_get(self, url: str) -> Mapping[str, Any]:
        with urllib.request.urlopen(url, timeout=self.timeout) as response:  # noqa: S310 - the operator's URL
            return json.loads(response.read())

    def _refresh(self) -> None:
        try:
            fetched = self._fetch(self.url)
        except (OSError, ValueError) as exc:
            if self._keys:
                return  # keep the keys we have; a kid we lack is reported by the caller
            raise VerificationError(f"the JWKS at {self.url} could not be fetched: {exc}") from None
        keys = {}
        for jwk in fetched.get("keys", []):
            if jwk.get("kid"):
                try:
                    keys[jwk["kid"]] = jwt.PyJWK(jwk)
                except jwt.PyJWKError:
                    continue  # a key type this PyJWT cannot use is not one we need
        self._keys = keys
        self._fetched_at = time.monotonic()

    def key(self, kid: str) -> jwt.PyJWK:
        with self._lock:
            age = time.monotonic() - self._fetched_at
            if age > self.max_age or (kid not in self._keys and age > self.min_refetch):
                self._refresh()
            if kid not in self._keys:
                raise VerificationError(f"unknown signing key {kid!r}")
            return self._keys[kid]


class StaticJwks:
    """A JWKS you already hold (e.g. pinned in configuration)."""

    def __init__(self, jwks: Mapping[str, Any]) -> None:
        self._keys = {k["kid"]: jwt.PyJWK(k) for k in jwks.get("keys", []) if k.get("kid")}

    def key(self, kid: str) -> jwt.PyJWK:
        if kid not in self._keys:
            raise VerificationError(f"unknown signing key {kid!r}")
        return self._keys[kid]


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        lowered = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lowered), None)
    return value


def _task_id_of(event: Any) -> str | None:
    if not isinstance(event, dict):
        return None
    for member in ("statusUpdate", "artifactUpdate", "message"):
        if isinstance(event.get(member), dict):
            return event[member].get("taskId")
    if isinstance(event.get("task"), dict):
        return event["task"].get("id")
    return None


def verify_notification(
    *,
    body: bytes,
    headers: Mapping[str, str],
    jwks: JwksCache | StaticJwks,
    issuer: str,
    audience: str | None = None,
    max_age: float = 300,
    leeway: float = 60,
) -> Notification:
    """Check a notification exactly as received (the raw body bytes, not a re-serialisation):
    signature by a published key, issuer, audience (your webhook URL, when given), expiry,
    age of `iat` (at most `max_age`, plus `leeway` for clock skew), the body's SHA-256, and
    that the body, the claims and the event-id header name the same task and event."""
    token = _header(headers, SIGNATURE_HEADER)
    if not token:
        raise VerificationError(f"no {SIGNATURE_HEADER} header")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise VerificationError(f"malformed signature: {exc}") from None
    if header.get("alg") not in ALGORITHMS or not header.get("kid"):
        raise VerificationError("the signature must be ES256 and name its key (kid)")
    key = jwks.key(header["kid"])
    try:
        claims = jwt.decode(
            token,
            key.key,
            algorithms=ALGORITHMS,
            issuer=issuer,
            audience=audience,
            leeway=leeway,
            options={"require": REQUIRED_CLAIMS, "verify_aud": audience is not None},
        )
    except jwt.PyJWTError as exc:
        raise VerificationError(f"invalid signature or claims: {exc}") from None
    if time.time() - claims["iat"] > max_age + leeway:
        raise VerificationError("the notification is too old")
    if not hmac.compare_digest(str(claims["request_body_sha256"]), hashlib.sha256(body).hexdigest()):
        raise VerificationError("the body does not match the signed hash")
    try:
        event = json.loads(body)
    except ValueError:
        raise VerificationError("the body is not JSON") from None
    task_id = _task_id_of(event)
    if task_id is not None and task_id != claims["taskId"]:
        raise VerificationError("the body's task is not the signed task")
    event_id = _header(headers, EVENT_ID_HEADER)
    if event_id is not None and event_id != claims["eventId"]:
        raise VerificationError("the event id header is not the signed event id")
    if not str(claims["eventId"]).startswith(f"{claims['taskId']}:"):
        raise VerificationError("the signed event id does not belong to the signed task")
    return Notification(
        event=event, task_id=claims["taskId"], event_id=claims["eventId"], jti=claims["jti"], claims=claims
    )
