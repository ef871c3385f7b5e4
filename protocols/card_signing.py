"""The signatures on the cards this server serves (A2A 1.0 §8.4 `AgentCard.signatures`; 0.3's
`signatures` is the same object): each is a JWS (RFC 7515) in the flattened form without its
payload, `{protected, signature}`, signed ES256 with the server's card key (push.signing,
KeyPurpose.CARD). The protected header holds `alg`, `typ: JOSE`, `kid` and `jku`, the key set
next to the card (`<agent URL>.well-known/agent-card-jwks.json`, which a bound host name serves
at its root too).

The payload is the card's RFC 8785 canonical form (accounts.canonical) without `signatures`
and without empty strings, lists and objects: the form a2a-sdk 1.x signs and verifies, and one
the directory's verifier (registry.cards.signatures) accepts. a2a-sdk reads a card through its
protobuf AgentCard, and a document that reading changes (a 0.3 card, which it converts to 1.0;
a member at its protobuf default) gets a second signature over the card as a2a-sdk reads it,
so that its verifier, which needs one good signature, finds one.

Signing costs an ECDSA operation and an SDK parse; a card is read on every discovery. So the
signatures are kept per process, by the card's bytes, the key and the key set's URL: a GET
signs only when the card or the key changed. The current key is re-read at most every
KEY_CACHE_SECONDS, sooner when it stops signing, and at once when a key changes (the save is
announced, accounts.changes)."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from django.utils import timezone
from jwt.utils import base64url_encode, der_to_raw_signature

from accounts import changes
from accounts.canonical import canonical, without_empty
from push import signing
from push.models import KeyPurpose

from . import cards

log = logging.getLogger(__name__)

JWKS_NAME = ".well-known/agent-card-jwks.json"  # below an agent's URL, and at the site's root
ALGORITHM = signing.ALGORITHM
KEY_CACHE_SECONDS = 60.0
MAX_CACHED = 2000  # signed cards kept per process


@dataclass(frozen=True)
class _Current:
    kid: str
    private: ec.EllipticCurvePrivateKey
    until: float  # time.monotonic()


_lock = threading.Lock()
_current: _Current | None = None
_signed: OrderedDict[tuple[bytes, str, str], list[dict[str, str]]] = OrderedDict()


def forget() -> None:
    """Drop the cached key (a key was rotated, or any announced change). The signatures stay:
    they are kept by card and key, so none of them is ever stale."""
    global _current
    with _lock:
        _current = None


changes.on_change(forget)


def kept_for() -> float:
    """How long a replaced card key stays published after it stops signing: a card it signed
    may be cached by a client for AGENT_CARD_MAX_AGE, its key set for CARD_JWKS_MAX_AGE, and a
    process may sign with it for KEY_CACHE_SECONDS more before it re-reads the key."""
    return settings.AGENT_CARD_MAX_AGE + settings.CARD_JWKS_MAX_AGE + KEY_CACHE_SECONDS


def _key() -> _Current:
    global _current
    current = _current
    # Kept only while this process hears of every change (accounts.changes), as the agents
    # are: a process that does not (no Redis, the embedded mode) reads the key per card.
    usable = changes.caches_usable()
    if usable and current is not None and current.until > time.monotonic():
        return current
    key = signing.key_for_signing(purpose=KeyPurpose.CARD)
    ttl = KEY_CACHE_SECONDS if usable else 0.0
    if key.signs_until is not None:
        ttl = min(ttl, max((key.signs_until - timezone.now()).total_seconds(), 0.0))
    current = _Current(key.kid, signing.private_key(key), time.monotonic() + ttl)
    with _lock:
        _current = current
    return current


def jwks_url(agent_url: str) -> str:
    """The key set named in the signatures of the card of the agent at `agent_url` (ending in /)."""
    return f"{agent_url}{JWKS_NAME}"


def sdk_reading(unsigned: dict[str, Any]) -> bytes | None:
    """The canonical payload a2a-sdk 1.x computes for this card (its card resolver's parse,
    then its protobuf JSON without empty members); None when it cannot read the card."""
    from a2a.client.card_resolver import parse_agent_card
    from google.protobuf.json_format import MessageToDict, ParseError

    try:
        read = MessageToDict(parse_agent_card(orjson.loads(orjson.dumps(unsigned))))
    except (ParseError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("a2a-sdk cannot read this card (%s): it gets no signature of its own", exc)
        return None
    read.pop("signatures", None)
    try:
        return canonical(without_empty(read) or {})
    except ValueError:
        return None


def payloads(card: dict[str, Any]) -> list[bytes]:
    """What the card's signatures cover, in order: its canonical form (no `signatures`, no
    empty members), then, if a2a-sdk reads it as another document, that one's. ValueError for
    a card with no canonical form."""
    unsigned = {name: value for name, value in card.items() if name != "signatures"}
    served = canonical(without_empty(unsigned) or {})
    sdk = sdk_reading(unsigned)
    return [served] if sdk is None or sdk == served else [served, sdk]


def _sign(card: dict[str, Any], key: _Current, jku: str) -> list[dict[str, str]]:
    # Deterministic ECDSA (RFC 6979) over a header serialised one way: the same card and key
    # give the same bytes in every process and after every cache clear, so the card's ETag
    # holds across web processes and a client's If-None-Match keeps matching.
    header = orjson.dumps({"alg": ALGORITHM, "typ": "JOSE", "kid": key.kid, "jku": jku}, option=orjson.OPT_SORT_KEYS)
    protected = base64url_encode(header).decode("ascii")
    entries = []
    for payload in payloads(card):
        signing_input = f"{protected}.{base64url_encode(payload).decode('ascii')}".encode("ascii")
        der = key.private.sign(signing_input, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
        signature = base64url_encode(der_to_raw_signature(der, key.private.curve)).decode("ascii")
        entries.append({"protected": protected, "signature": signature})
    return entries


def signatures(card: dict[str, Any], *, jku: str, body: bytes | None = None) -> list[dict[str, str]] | None:
    """The `signatures` of `card` (which has none yet), from the cache when this card was
    signed with the current key before; `body` is its orjson bytes, when already made. None
    for a card with no canonical form, which is served unsigned rather than not at all."""
    key = _key()
    digest = hashlib.sha256(body if body is not None else orjson.dumps(card)).digest()
    cache_key = (digest, key.kid, jku)
    found = _signed.get(cache_key)
    if found is not None:
        return found
    try:
        entries = _sign(card, key, jku)
    except ValueError as exc:
        log.warning("a card with no canonical form is served unsigned: %s", exc)
        return None
    with _lock:
        _signed[cache_key] = entries
        while len(_signed) > MAX_CACHED:
            _signed.popitem(last=False)
    return entries


def signed(card: dict[str, Any], *, jku: str) -> dict[str, Any]:
    """`card` with its signatures (unsigned if it has no canonical form)."""
    entries = signatures(card, jku=jku)
    return card if entries is None else {**card, "signatures": entries}


def signed_body(card: dict[str, Any], *, jku: str) -> bytes:
    """The JSON bytes of `card` with its signatures: the card is serialised once, and the
    signatures are added to those bytes."""
    body = orjson.dumps(card)
    entries = signatures(card, jku=jku, body=body)
    if entries is None or not card:
        return body
    return body[:-1] + b',"signatures":' + orjson.dumps(entries) + b"}"


def signed_for(card: dict[str, Any], agent: Any, *, base_url: str, url: str = "") -> dict[str, Any]:
    """`card` (a card of `agent`: the extended one, returned by a method) with its signatures,
    naming the key set next to the agent's public card. May read the database."""
    return signed(card, jku=jwks_url(cards.agent_url(agent, base_url=base_url, url=url)))
