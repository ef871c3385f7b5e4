"""Checking the JWS signatures of an A2A card (A2A 0.3 and 1.0: `signatures`).

Each entry is a JWS in the flattened JSON form without its payload: `protected` (base64url
of the JSON header), `signature` (base64url) and an optional unprotected `header`. The
payload is the card's RFC 8785 canonical JSON without its `signatures` member. a2a-sdk
(1.x) signs that canonical form after dropping every empty string, list and object (and
null) at any level, since its protobuf cards cannot tell empty from absent, and over the card as
its protobuf parse reads it (a 0.3 card converted to 1.0, members at their defaults); so a
signature verifies over any of the three forms: as served, so cleaned, or so read (the reason
says which).

Keys come from the protected header's `jku` (through the SSRF guard, size-capped, must be a
JWKS), else from the card's origin's /.well-known/jwks.json, chosen by `kid`. Only public-key
algorithms are accepted. Every failure is a SignatureCheck with valid=False and a reason,
never an exception."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jwt
from jwt import api_jws

from accounts import storable
from protocols.card_signing import sdk_reading

from .canonical import canonical, without_empty
from .fetch import JWKS_PATH, fetch_jwks, origin
from .types import FetchFailed, SignatureCheck

ALGORITHMS = frozenset({"ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA"})
MAX_SIGNATURES = 10
MAX_KEYS = 100  # keys of one set looked at
UNDERSTOOD_CRITICAL = frozenset({"b64"})  # RFC 7797: an unencoded (b64: false) payload
PRIVATE_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")
_B64URL = re.compile(r"[A-Za-z0-9_-]+")

JwksFetcher = Callable[[str], dict[str, Any]]


def _b64url_decode(text: str) -> bytes:
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class _Invalid(Exception):
    """Ends one signature's check with a reason."""


@dataclass
class _Keys:
    """Key sets read during one call: one fetch per URL, failures remembered too."""

    fetch: JwksFetcher
    found: dict[str, dict[str, Any] | str] = field(default_factory=dict)

    def get(self, url: str) -> list[Any]:
        if url not in self.found:
            try:
                jwks = self.fetch(url)
                if not isinstance(jwks, dict) or not isinstance(jwks.get("keys"), list):
                    raise FetchFailed(f"the key set at {url} is not a JWKS (no list of keys)")
                self.found[url] = jwks
            except FetchFailed as exc:
                self.found[url] = str(exc)
            except Exception as exc:  # noqa: BLE001 - an injected fetcher's failure is a fact about the keys
                self.found[url] = f"the key set at {url} could not be read ({type(exc).__name__}: {exc})"
        found = self.found[url]
        if isinstance(found, str):
            raise _Invalid(found)
        return list(found["keys"])


@dataclass(frozen=True)
class _Payloads:
    """The canonical bytes a signature may cover: as served, and without empty members."""

    forms: tuple[tuple[bytes, str], ...]  # (payload, how it was formed)
    problem: str = ""


def _payloads(document: dict[str, Any]) -> _Payloads:
    unsigned = {key: value for key, value in document.items() if key != "signatures"}
    try:
        served = canonical(unsigned)
        cleaned = canonical(without_empty(unsigned) or {})
    except ValueError as exc:
        return _Payloads((), f"the card cannot be checked: {exc}")
    forms = [(served, "")]
    if cleaned != served:
        forms.append((cleaned, " (over the card without its empty members, as a2a-sdk signs cards)"))
    read = sdk_reading(unsigned)
    if read is not None and read not in (served, cleaned):
        forms.append((read, " (over the card as a2a-sdk 1.x reads it, as its signer covers a card it converts)"))
    return _Payloads(tuple(forms))


def _card_origin(document: dict[str, Any], card_url: str) -> str:
    interfaces = document.get("supportedInterfaces")
    first = interfaces[0] if isinstance(interfaces, list) and interfaces else None
    candidates = [card_url, first.get("url") if isinstance(first, dict) else None, document.get("url")]
    for candidate in candidates:
        if isinstance(candidate, str) and (found := origin(candidate)):
            return found
    return ""


def _header(entry: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(protected header, unprotected header) of a signature entry, or _Invalid."""
    protected = entry.get("protected")
    try:
        raw = _b64url_decode(protected) if isinstance(protected, str) else b""
    except (ValueError, binascii.Error):
        raise _Invalid("its protected header is not base64url") from None
    try:
        header = storable.loads(raw)
        storable.check(header, where="the protected header")
    except (storable.Malformed, storable.Refused) as exc:
        raise _Invalid(f"its protected header is not a JSON object ({exc})") from None
    if not isinstance(header, dict):
        raise _Invalid("its protected header is not a JSON object")
    unprotected = entry.get("header", {})
    if not isinstance(unprotected, dict):
        raise _Invalid("its unprotected header is not an object")
    both = sorted(set(header) & set(unprotected))
    if both:
        raise _Invalid(f"the header parameter {both[0]!r} is both protected and unprotected (RFC 7515 forbids it)")
    return header, unprotected


def _check_algorithm(alg: Any, header: dict[str, Any]) -> str:
    if not isinstance(alg, str) or not alg:
        raise _Invalid("its protected header names no algorithm (alg)")
    if alg.lower() == "none":
        raise _Invalid("alg none is no signature at all")
    if alg.upper().startswith("HS"):
        raise _Invalid(f"{alg} is a shared-secret algorithm: a card's signature must be checkable with a public key")
    if alg not in ALGORITHMS:
        raise _Invalid(f"the algorithm {alg[:40]!r} is not accepted (only {', '.join(sorted(ALGORITHMS))})")
    critical = header.get("crit")
    if critical is not None:
        if not isinstance(critical, list) or not critical or not all(isinstance(c, str) for c in critical):
            raise _Invalid("its crit header parameter is not a list of names")
        unknown = [c for c in critical if c not in UNDERSTOOD_CRITICAL]
        if unknown:
            raise _Invalid(f"it requires header parameters this registry does not understand: {unknown[:5]}")
    if "b64" in header and not (header["b64"] in (True, False) and "b64" in (critical or [])):
        raise _Invalid("its b64 header parameter is not a boolean listed in crit (RFC 7797)")
    return alg


def _key(jwk: dict[str, Any], alg: str) -> jwt.PyJWK:
    if jwk.get("kty") == "oct":
        raise _Invalid("the key is a shared secret (kty oct), not a public key")
    if any(member in jwk for member in PRIVATE_MEMBERS):
        raise _Invalid("the key set publishes private key material: its keys prove nothing")
    if jwk.get("use") not in (None, "sig"):
        raise _Invalid(f"the key is for {str(jwk.get('use'))[:20]!r}, not for signatures")
    if jwk.get("alg") not in (None, alg):
        raise _Invalid(f"the key is for {str(jwk.get('alg'))[:20]}, not {alg}")
    try:
        return jwt.PyJWK(jwk, algorithm=alg)
    except (jwt.PyJWTError, ValueError, TypeError, KeyError, AttributeError, NotImplementedError) as exc:
        raise _Invalid(f"the key is not a usable {alg} public key ({type(exc).__name__}: {exc})") from None


def _verify(entry: dict[str, Any], header: dict[str, Any], key: jwt.PyJWK, alg: str, payloads: _Payloads) -> str:
    """How the signature verified (the payload form), or _Invalid."""
    protected, signature = entry["protected"], entry["signature"]
    if not isinstance(signature, str) or not _B64URL.fullmatch(signature) or len(signature) % 4 == 1:
        raise _Invalid("its signature is not base64url")
    options: Any = {"enforce_minimum_key_length": True}
    for payload, how in payloads.forms:
        try:
            if header.get("b64") is False:
                api_jws.decode_complete(
                    f"{protected}..{signature}", key=key, algorithms=[alg], options=options, detached_payload=payload
                )
            else:
                api_jws.decode_complete(
                    f"{protected}.{_b64url(payload)}.{signature}", key=key, algorithms=[alg], options=options
                )
        except jwt.InvalidSignatureError:
            continue
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise _Invalid(f"it could not be checked ({type(exc).__name__}: {exc})") from None
        return how
    raise _Invalid("the signature does not match the card: it was changed after signing, or signed with another key")


def _check(
    index: int, entry: Any, document: dict[str, Any], payloads: _Payloads, keys: _Keys, card_url: str
) -> SignatureCheck:
    kid = alg = jku = ""
    try:
        if not isinstance(entry, dict) or not isinstance(entry.get("protected"), str):
            raise _Invalid("it is not an object with a protected header and a signature (strings)")
        if not isinstance(entry.get("signature"), str):
            raise _Invalid("it has no signature (a string)")
        header, unprotected = _header(entry)
        named_alg = header.get("alg")
        alg = named_alg[:40] if isinstance(named_alg, str) else ""
        if "alg" in unprotected:
            raise _Invalid("its algorithm is in the unprotected header, where anyone could change it")
        named_kid = header.get("kid", unprotected.get("kid"))
        named_jku = header.get("jku", unprotected.get("jku"))
        if named_kid is not None and not isinstance(named_kid, str):
            raise _Invalid("its kid is not a string")
        if named_jku is not None and not isinstance(named_jku, str):
            raise _Invalid("its jku is not a string")
        if named_jku and len(named_jku) > 2048:
            raise _Invalid("its jku is longer than 2048 characters")
        kid = (named_kid or "")[:200]
        _check_algorithm(header.get("alg"), header)
        if named_jku:
            jku = named_jku
        else:
            card_origin = _card_origin(document, card_url)
            if not card_origin:
                raise _Invalid("it names no key set (jku) and the card has no http(s) URL to find one at")
            jku = card_origin + JWKS_PATH
        if payloads.problem:
            raise _Invalid(payloads.problem)
        candidates = [k for k in keys.get(jku)[:MAX_KEYS] if isinstance(k, dict)]
        if named_kid is None:
            if len(candidates) != 1:
                raise _Invalid(f"it names no key (kid) and the key set at {jku} holds {len(candidates)} keys")
        else:
            candidates = [k for k in candidates if k.get("kid") == named_kid]
            if not candidates:
                raise _Invalid(f"the key set at {jku} has no key with the kid {named_kid[:80]!r}")
        reasons: list[str] = []
        for jwk in candidates:
            try:
                how = _verify(entry, header, _key(jwk, alg), alg, payloads)
            except _Invalid as exc:
                reasons.append(str(exc))
                continue
            shown = f"the key {kid!r}" if kid else "the only key"
            return SignatureCheck(kid, alg, jku, True, f"verified with {shown} of {jku}{how}")
        raise _Invalid(reasons[0])
    except _Invalid as exc:
        return SignatureCheck(kid, alg, jku, False, f"signature {index}: {exc}")


def verify_signatures(
    document: dict[str, Any], *, jwks_fetcher: JwksFetcher | None = None, card_url: str = ""
) -> list[SignatureCheck]:
    """One SignatureCheck per entry of the card's `signatures` ([] for an unsigned card).

    `jwks_fetcher(url)` returns a JWKS or raises (default: a guarded, size-capped GET);
    `card_url` is where the card was read from, whose origin's /.well-known/jwks.json holds
    the keys of a signature that names no jku (without it: the card's own first URL's)."""
    if not isinstance(document, dict):
        return []
    entries = document.get("signatures")
    if not isinstance(entries, list) or not entries:
        return []
    payloads = _payloads(document)
    keys = _Keys(jwks_fetcher or fetch_jwks)
    checks = [_check(i, entry, document, payloads, keys, card_url) for i, entry in enumerate(entries[:MAX_SIGNATURES])]
    if len(entries) > MAX_SIGNATURES:
        checks.append(
            SignatureCheck(
                "",
                "",
                "",
                False,
                f"{len(entries) - MAX_SIGNATURES} more signatures were not checked (at most {MAX_SIGNATURES})",
            )
        )
    return checks
