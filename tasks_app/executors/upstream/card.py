"""The upstream's card: fetched through the SSRF guard, read as A2A 1.0 or 0.3 with the
a2a-sdk's own types, and the interface a run uses chosen from it. A card read is kept in the
process for AGENT_CARD_MAX_AGE seconds, so a busy agent costs its upstream one card fetch per
process that often, not one per message; a failed read is not kept."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import pydantic
from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.versions import is_legacy_version
from a2a.types import AgentCard, AgentInterface
from django.conf import settings
from google.protobuf import json_format
from packaging.version import InvalidVersion, Version

from outbound import transport

# What the SDK's client can speak here (gRPC needs grpcio, which this server does not carry).
USABLE_BINDINGS = ("JSONRPC", "HTTP+JSON")
MAX_CACHED = 256

# (card URL, the credential sent) -> (until, card): an agent never gets a card that was
# fetched with another agent's secret.
_cache: dict[tuple[str, str], tuple[float, AgentCard]] = {}
_lock = threading.Lock()


class CardProblem(Exception):
    """The card cannot be read or used; the message says what, for the task's reason."""


@dataclass(frozen=True)
class Chosen:
    card: AgentCard  # the upstream's card with only the chosen interface: what the SDK is given
    interface: AgentInterface
    version: str  # "1.0" or "0.3"

    @property
    def streams(self) -> bool:
        return bool(self.card.capabilities.streaming)


def _summary(exc: pydantic.ValidationError) -> str:
    shown = [f"{'.'.join(map(str, e['loc'])) or '(the card)'}: {e['msg']}" for e in exc.errors()[:3]]
    more = exc.error_count() - len(shown)
    return "; ".join(shown) + (f" (and {more} more)" if more > 0 else "")


def parse(data: Any) -> AgentCard:
    """A card document as the SDK's 1.0 AgentCard (a 0.3 one through the SDK's conversion)."""
    if not isinstance(data, dict):
        raise CardProblem("is not a JSON object")
    if "supportedInterfaces" in data:
        try:
            # Unknown members are ignored, as the SDK's own resolver does: a later 1.x card
            # may add some.
            return json_format.ParseDict(data, AgentCard(), ignore_unknown_fields=True)
        except (json_format.ParseError, TypeError, ValueError) as exc:
            raise CardProblem(f"is not a valid A2A 1.0 card: {exc}") from None
    if "url" in data:
        try:
            legacy = types_v03.AgentCard.model_validate(data)
        except pydantic.ValidationError as exc:
            raise CardProblem(f"is not a valid A2A 0.3 card: {_summary(exc)}") from None
        return conversions.to_core_agent_card(legacy)
    raise CardProblem("is not an A2A card: it has neither supportedInterfaces (A2A 1.0) nor url (A2A 0.3)")


def _family(version: str) -> str | None:
    if not version:  # a 1.0 card that names no version: the SDK speaks its own, 1.0
        return "1.0"
    try:
        major = Version(version).major
    except InvalidVersion:
        return None
    if major == 1:
        return "1.0"
    return "0.3" if is_legacy_version(version) else None


def choose(card: AgentCard, protocol: str) -> Chosen:
    """The interface to use: A2A 1.0 before 0.3 (unless `protocol` names one), JSON-RPC
    before HTTP+JSON, and among equals the card's own order (its preference)."""
    wanted = ("1.0", "0.3") if protocol == "auto" else (protocol,)
    for family in wanted:
        for binding in USABLE_BINDINGS:
            for interface in card.supported_interfaces:
                if interface.protocol_binding == binding and _family(interface.protocol_version) == family:
                    narrowed = AgentCard()
                    narrowed.CopyFrom(card)
                    del narrowed.supported_interfaces[:]
                    narrowed.supported_interfaces.append(interface)
                    return Chosen(card=narrowed, interface=interface, version=family)
    offered = ", ".join(
        f"{i.protocol_binding or '(no binding)'} {i.protocol_version or '(no version)'}"
        for i in card.supported_interfaces
    )
    versions = "A2A 1.0 or 0.3" if protocol == "auto" else f"A2A {protocol}"
    raise CardProblem(
        f"offers no interface this server's A2A client can use ({' or '.join(USABLE_BINDINGS)}, {versions}); "
        f"it offers {offered or 'none'}"
    )


def _key(url: str, headers: dict[str, str]) -> tuple[str, str]:
    credential = hashlib.sha256(json.dumps(sorted(headers.items())).encode()).hexdigest() if headers else ""
    return url, credential


def _cached(key: tuple[str, str]) -> AgentCard | None:
    with _lock:
        found = _cache.get(key)
    if found is None or found[0] < time.monotonic():
        return None
    return found[1]


def _keep(key: tuple[str, str], card: AgentCard) -> None:
    with _lock:
        if len(_cache) >= MAX_CACHED:
            _cache.pop(min(_cache, key=lambda k: _cache[k][0]))
        _cache[key] = (time.monotonic() + settings.AGENT_CARD_MAX_AGE, card)


def forget() -> None:
    with _lock:
        _cache.clear()


async def fetch(url: str, *, timeout: float, headers: dict[str, str] | None = None, fresh: bool = False) -> AgentCard:
    """The upstream's card at `url` (kept for a while); CardProblem says why there is none.
    `headers`: the agent's credential, sent with the card too (an upstream behind a gateway
    may guard its card as it guards its endpoint; the tenant chose this URL). `fresh`: fetched
    now whatever is kept (an agent being saved checks the upstream as it is)."""
    key = _key(url, headers or {})
    found = None if fresh else _cached(key)
    if found is not None:
        return found
    limit = int(settings.UPSTREAM_CARD_MAX_BYTES)
    where = f"the upstream's card at {url}"
    try:
        async with transport.guarded_client(
            timeout=timeout, max_body=limit, headers={"Accept": "application/json", **(headers or {})}
        ) as http:
            response = await http.get(url)
    except transport.Refused as exc:
        raise CardProblem(f"{where} may not be fetched: {exc}") from None
    except transport.TooLarge:
        raise CardProblem(f"{where} is larger than {limit} bytes") from None
    except httpx.TimeoutException:
        raise CardProblem(f"{where} did not arrive within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise CardProblem(f"{where} could not be fetched ({type(exc).__name__}: {exc})") from None
    if response.status_code != 200:
        raise CardProblem(f"{where} could not be fetched: HTTP {response.status_code}")
    try:
        data = json.loads(response.content)
    except ValueError as exc:
        raise CardProblem(f"{where} is not JSON ({exc})") from None
    try:
        card = parse(data)
    except CardProblem as exc:
        raise CardProblem(f"{where} {exc}") from None
    _keep(key, card)
    return card
