"""Bearer tokens from a tenant's OpenID Connect issuer: a JWT signed with one of the keys the
issuer publishes at its JWKS URL, checked before the request's body is read (docs/oidc.md).

What a token must be: a JWS in compact form (three base64url parts, at most
`MAX_TOKEN_LENGTH` characters) signed with an asymmetric algorithm (`ALGORITHMS`: never HS*,
whose secret would be the issuer's *public* key here, nor `none`) by a key in the issuer's
JWKS; its claims `exp`, `iss` (exactly the issuer's), `aud` (containing the issuer's
audience) and `sub` (a string of 1 to `MAX_SUBJECT_LENGTH` characters) present, `nbf` and
`iat` honoured, each time with `LEEWAY_SECONDS` for clocks that disagree.

The JWKS is fetched through the outbound guard (the tenant chooses the URL: it must be a
public address, or one OUTBOUND_ALLOW_NETS names), off the event loop, with a timeout and a
size cap, and kept per URL for OIDC_JWKS_CACHE_SECONDS. A token naming a key (kid) the cached
set lacks fetches the set again (the issuer rotated its keys), at most once per
`REFETCH_INTERVAL` per URL, so tokens with made-up kids cannot make this server hammer the
issuer. A JWKS that cannot be fetched or read is `IssuerUnavailable` (the server's problem,
503), not the caller's.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jwt
import orjson
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from django.conf import settings

from accounts.models import OidcIssuer
from outbound import client, ssrf

log = logging.getLogger(__name__)

MAX_TOKEN_LENGTH = 8192
# The principal is "oidc:<sub>" in a 150-character column (Task.owner).
MAX_SUBJECT_LENGTH = 140
LEEWAY_SECONDS = 30
JWKS_MAX_BYTES = 256 * 1024
REFETCH_INTERVAL = 30.0
# After a failed fetch, requests are answered 503 at once for this long instead of each
# waiting out its own attempt on an issuer that is down; it is also the Retry-After.
FAILED_FETCH_BACKOFF = 10.0
_WAIT_STEP = 0.02  # how often a request waiting for another's fetch looks again

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
_CURVES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1"}
_KEY_TYPES = ("RSA", "EC", "OKP")  # never "oct": a shared secret published is no secret

# A JWS in compact serialization; the signature may be empty so that `none` is refused by name.
_COMPACT_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_COMPACT_JWE = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]*){4}")
# What a principal name cannot hold: Postgres text takes no U+0000 and UTF-8 no lone
# surrogate; control characters would only confuse logs and the admin.
_UNFIT_SUBJECT = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class BearerRefused(Exception):
    """The token is not valid for the issuer; the message says why, safely (it goes into a
    WWW-Authenticate header: no quotes, nothing of the token)."""


class IssuerUnavailable(Exception):
    """The issuer's keys could not be fetched or read: nothing the caller did. The message is
    safe to show (addresses stay in the log); try again after `retry_after` seconds."""

    def __init__(self, message: str, *, retry_after: float = FAILED_FETCH_BACKOFF) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# --- the token's header ------------------------------------------------------------------


def _b64decode(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _read_header(token: str) -> tuple[str, str | None]:
    """The token's algorithm and key id, refusing cheaply what is no signed JWT at all."""
    if len(token) > MAX_TOKEN_LENGTH:
        raise BearerRefused(f"malformed: the token is longer than {MAX_TOKEN_LENGTH} characters")
    if not _COMPACT_JWS.fullmatch(token):
        if _COMPACT_JWE.fullmatch(token):
            raise BearerRefused("malformed: encrypted tokens (JWE) are not accepted; send a signed JWT")
        raise BearerRefused("malformed: the token is not a JWT (three base64url parts separated by dots)")
    try:
        # The parser PyJWT reads it with later, so that whatever passes here passes there.
        header = json.loads(_b64decode(token.partition(".")[0]))
    except (binascii.Error, ValueError, RecursionError):  # UnicodeDecodeError, JSONDecodeError are ValueErrors
        raise BearerRefused("malformed: the token's header is not base64url-encoded JSON") from None
    if not isinstance(header, dict):
        raise BearerRefused("malformed: the token's header is not a JSON object")
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALGORITHMS:
        raise BearerRefused(f"algorithm not allowed: the token must be signed with one of {', '.join(ALGORITHMS)}")
    if kid is not None and not (isinstance(kid, str) and kid):
        raise BearerRefused("malformed: the token's key id (kid) is not a non-empty string")
    if "crit" in header:
        # RFC 7515: a recipient that does not understand every critical extension refuses.
        raise BearerRefused("malformed: the token requires extensions (crit) this server does not support")
    return alg, kid


# --- the issuer's keys -------------------------------------------------------------------


@dataclass(frozen=True)
class _Key:
    kid: str | None
    alg: str | None  # as the JWK declares it, if it does
    key: Any  # a cryptography public key

    def fits(self, alg: str) -> bool:
        if self.alg is not None and self.alg != alg:
            return False
        if alg[:2] in ("RS", "PS"):
            return isinstance(self.key, rsa.RSAPublicKey)
        if alg in _CURVES:
            return isinstance(self.key, ec.EllipticCurvePublicKey) and self.key.curve.name == _CURVES[alg]
        return isinstance(self.key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey)


@dataclass
class _Entry:
    """One JWKS URL's keys, and when they were last fetched (or tried to be)."""

    keys: tuple[_Key, ...] | None = None
    expires_at: float = 0.0
    attempted_at: float = float("-inf")
    failure: str | None = None  # why the last fetch failed, if it did
    lock: threading.Lock = field(default_factory=threading.Lock)  # held by the one fetch under way


# Tests move the clock.
_clock = time.monotonic
_entries: dict[str, _Entry] = {}
_entries_lock = threading.Lock()


def cache_clear() -> None:
    """Forget every fetched key set (tests; an operator in a shell after an issuer's incident)."""
    with _entries_lock:
        _entries.clear()


def _entry(url: str) -> _Entry:
    entry = _entries.get(url)
    if entry is None:
        with _entries_lock:
            entry = _entries.setdefault(url, _Entry())
    return entry


def _cached(entry: _Entry, kid: str | None, now: float, *, fetch_under_way: bool = False) -> tuple[_Key, ...] | None:
    """The keys that answer for `kid` without a fetch, or None when a fetch is due (or one is
    under way that may bring the kid). While the backoff after a failed fetch lasts, that
    failure, at once."""
    keys = entry.keys
    if keys is not None and now < entry.expires_at:
        if kid is None or any(k.kid == kid for k in keys):
            return keys
        # A kid the set lacks: the set as it is, unless fetching again is due or under way.
        return keys if now - entry.attempted_at < REFETCH_INTERVAL and not fetch_under_way else None
    since = now - entry.attempted_at
    if entry.failure is not None and since < FAILED_FETCH_BACKOFF and not fetch_under_way:
        raise IssuerUnavailable(entry.failure, retry_after=FAILED_FETCH_BACKOFF - since)
    return None


def _fetch_unless_busy(entry: _Entry, url: str, kid: str | None) -> tuple[_Key, ...] | None:
    """Fetch the keys if that is still due, or None if another thread is fetching them.
    Blocking: run in a thread. Never waits for the lock: requests waiting for one issuer's
    fetch must not hold threads every other request needs too."""
    if not entry.lock.acquire(blocking=False):
        return None
    try:
        keys = _cached(entry, kid, _clock())  # a fetch may have ended since the caller looked
        if keys is not None:
            return keys
        entry.attempted_at = _clock()
        try:
            keys = _fetch(url)
        except IssuerUnavailable as exc:
            entry.failure = str(exc)
            raise
        entry.keys, entry.failure = keys, None
        entry.expires_at = _clock() + settings.OIDC_JWKS_CACHE_SECONDS
        return keys
    finally:
        entry.lock.release()


async def _keys(url: str, kid: str | None) -> tuple[_Key, ...]:
    """The keys to check a token naming `kid` with: from the cache (the common request: no
    thread hop), or fetched in a thread, one fetch per URL at a time; who arrives during a
    fetch waits for its result on the event loop."""
    entry = _entry(url)
    # A fetch ends within its timeouts, plus the resolver's own (which no setting bounds).
    give_up = time.monotonic() + 3 * settings.OIDC_JWKS_TIMEOUT + 5
    while True:
        busy = entry.lock.locked()
        keys = _cached(entry, kid, _clock(), fetch_under_way=busy)
        if keys is not None:
            return keys
        if not busy:
            keys = await asyncio.to_thread(_fetch_unless_busy, entry, url, kid)
            if keys is not None:
                return keys
        if time.monotonic() > give_up:
            raise IssuerUnavailable(
                "the token issuer's signing keys are still being fetched; try again later", retry_after=1
            )
        await asyncio.sleep(_WAIT_STEP)


def _unavailable(url: str, detail: str) -> IssuerUnavailable:
    log.warning("OIDC: the JWKS at %s cannot be used: %s", url, detail)
    return IssuerUnavailable("the token issuer's signing keys cannot be fetched just now; try again later")


def _fetch(url: str) -> tuple[_Key, ...]:
    try:
        destination = ssrf.check(url)
    except (ssrf.Refused, ssrf.Unresolved) as exc:
        raise _unavailable(url, str(exc)) from None
    assert destination is not None  # without unresolvable_ok a name that does not resolve raises
    try:
        response = client.get(
            destination,
            headers={"Accept": "application/jwk-set+json, application/json"},
            timeout=settings.OIDC_JWKS_TIMEOUT,
            max_body=JWKS_MAX_BYTES,
        )
    except client.SendError as exc:
        raise _unavailable(url, str(exc)) from None
    if response.status != 200:
        raise _unavailable(url, f"it answered HTTP {response.status}")
    if response.truncated:
        raise _unavailable(url, f"it is larger than {JWKS_MAX_BYTES} bytes (or too slow to arrive)")
    if response.headers.get("content-encoding", "identity").strip().lower() not in ("", "identity"):
        raise _unavailable(url, "it came compressed although no compression was asked for")
    try:
        document = orjson.loads(response.body)
    except orjson.JSONDecodeError as exc:
        raise _unavailable(url, f"it is not JSON ({exc})") from None
    keys = _parse_jwks(document)
    if not keys:
        raise _unavailable(url, "it holds no usable signing key (RSA, EC or OKP, for signatures)")
    return keys


def _parse_jwks(document: Any) -> tuple[_Key, ...]:
    members = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(members, list):
        return ()
    keys = []
    for data in members:
        if not isinstance(data, dict) or data.get("kty") not in _KEY_TYPES or "d" in data:
            continue  # not a JWK, a shared secret, or (an issuer's blunder) a private key
        if data.get("use", "sig") != "sig":
            continue
        ops = data.get("key_ops")
        if ops is not None and not (isinstance(ops, list) and "verify" in ops):
            continue
        alg, kid = data.get("alg"), data.get("kid")
        if alg is not None and alg not in ALGORITHMS:
            continue
        try:
            # Without an alg PyJWK would take an OKP key for Ed25519 only; Ed448 signs EdDSA too.
            parsed = jwt.PyJWK(data, algorithm="EdDSA" if alg is None and data["kty"] == "OKP" else None)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            continue  # one key this server cannot use does not spoil the others
        keys.append(_Key(kid=kid if isinstance(kid, str) else None, alg=alg, key=parsed.key))
    return tuple(keys)


def _choose(keys: tuple[_Key, ...], *, alg: str, kid: str | None) -> Any:
    named = [k for k in keys if kid is None or k.kid == kid]
    if not named:
        raise BearerRefused("unknown key: the issuer publishes no key with the token's key id (kid)")
    fitting = [k for k in named if k.fits(alg)]
    if not fitting:
        raise BearerRefused("algorithm not allowed: the issuer's key is not one for the token's algorithm")
    if kid is None and len(fitting) > 1:
        raise BearerRefused("unknown key: the token names no key id (kid) and the issuer publishes several keys")
    return fitting[0].key


# --- the claims --------------------------------------------------------------------------


def _claims(token: str, key: Any, *, alg: str, issuer: OidcIssuer) -> dict[str, Any]:
    try:
        return jwt.decode(
            token,
            key,
            algorithms=[alg],
            issuer=issuer.issuer,
            audience=issuer.audience,
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "iss", "aud", "sub"], "enforce_minimum_key_length": True},
        )
    except jwt.InvalidSignatureError:
        raise BearerRefused("bad signature: the token's signature does not verify") from None
    except jwt.ExpiredSignatureError:
        raise BearerRefused("expired: the token has expired") from None
    except jwt.ImmatureSignatureError:
        raise BearerRefused("not yet valid: the token's nbf or iat is in the future") from None
    except jwt.MissingRequiredClaimError as exc:
        raise BearerRefused(f"malformed: the token has no {exc.claim} claim") from None
    except jwt.InvalidAudienceError:
        raise BearerRefused("wrong audience: the token's aud does not name this server's audience") from None
    except jwt.InvalidIssuerError:
        raise BearerRefused("wrong issuer: the token's iss is not this tenant's issuer") from None
    except jwt.InvalidAlgorithmError:
        raise BearerRefused("algorithm not allowed: the token's algorithm does not fit its key") from None
    except jwt.InvalidKeyError:
        raise BearerRefused("unusable key: the issuer's key for this token is too weak") from None
    except jwt.exceptions.InvalidSubjectError:
        raise BearerRefused("malformed: the token's subject (sub) is not a string") from None
    except jwt.PyJWTError:
        # What is left: a claim of the wrong type (exp, nbf or iat not a number, jti not a
        # string), a payload that is not a JSON object.
        raise BearerRefused("malformed: the token's claims are not valid (a claim of the wrong type)") from None
    except (ValueError, TypeError, OverflowError, RecursionError):
        # Only a signature that verified gets this far, but the issuer's JSON is still data.
        raise BearerRefused("malformed: the token's claims cannot be read") from None


def _subject(claims: dict[str, Any]) -> str:
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise BearerRefused("malformed: the token's subject (sub) is empty or not a string")
    if len(sub) > MAX_SUBJECT_LENGTH:
        raise BearerRefused(f"malformed: the token's subject (sub) is longer than {MAX_SUBJECT_LENGTH} characters")
    if _UNFIT_SUBJECT.search(sub):
        raise BearerRefused("malformed: the token's subject (sub) holds control characters")
    return sub


async def verify(token: str, issuer: OidcIssuer) -> str:
    """The token's subject, if `issuer` signed it for its audience and it is valid now;
    BearerRefused (why) if not, IssuerUnavailable if the issuer's keys cannot be had."""
    return (await verify_until(token, issuer))[0]


async def verify_until(token: str, issuer: OidcIssuer) -> tuple[str, datetime]:
    """As `verify`, with the token's `exp`: what the token made (a group membership) must not
    outlive it."""
    subject, expires_at, _ = await verify_claims(token, issuer)
    return subject, expires_at


async def verify_claims(token: str, issuer: OidcIssuer) -> tuple[str, datetime, dict[str, Any]]:
    """As `verify_until`, with the token's verified claims (the tenant API reads its role
    claim from them)."""
    alg, kid = _read_header(token)
    key = _choose(await _keys(issuer.jwks_url, kid), alg=alg, kid=kid)
    claims = _claims(token, key, alg=alg, issuer=issuer)
    # PyJWT checked that exp is a number in the future; one past year 9999 is "no end" to us.
    return _subject(claims), datetime.fromtimestamp(min(float(claims["exp"]), _LAST_EXP), tz=UTC), claims


_LAST_EXP = 253402300799.0  # 9999-12-31T23:59:59Z
