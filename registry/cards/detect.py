"""Which format a card document is in, from the members only that format has."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from .fetch import CARD_PATH, LEGACY_CARD_PATH
from .types import CardRejected, Problem, Version

# 0.2.x cards carry the members 0.3 has (but signatures) and speak the same JSON-RPC methods,
# so they are read as 0.3.
_V03_PROTOCOL = re.compile(r"0\.[23](\.\d+)?([-+.].*)?")
# Members that appeared in 0.2 or 0.3 and that no 0.1 card has.
_V03_MEMBERS = (
    "preferredTransport",
    "additionalInterfaces",
    "securitySchemes",
    "security",
    "supportsAuthenticatedExtendedCard",
    "signatures",
)
LOOKED_FOR = (
    "supportedInterfaces (A2A 1.0); aic or endPoints (ACPs ACS); protocolVersion 0.3.x or 0.2.x, or url with "
    "preferredTransport, additionalInterfaces or another member 0.2/0.3 added, or url and capabilities served at "
    f"{CARD_PATH} (A2A 0.3); url and capabilities with authentication, or served at {LEGACY_CARD_PATH} (A2A 0.1)"
)


def _served_at(fetched_from: str, suffix: str) -> bool:
    try:
        path = urlsplit(fetched_from).path
    except ValueError:
        return False
    return path.endswith(suffix)


def detect_version(document: Any, *, fetched_from: str = "") -> Version:
    """The format of `document` (rules in order):

    - 1.0: it has `supportedInterfaces`;
    - acs: it has `aic` or `endPoints` (ACS member names);
    - 0.3: `protocolVersion` is 0.3.x (or 0.2.x); or, without a protocolVersion, `url` with any
      member 0.2/0.3 added (preferredTransport, additionalInterfaces, securitySchemes,
      security, supportsAuthenticatedExtendedCard, signatures);
    - 0.1: no protocolVersion, `url`, `capabilities` and `authentication` (0.1's own member);
    - then, for `url` and `capabilities` alone, where it was served: 0.3 at
      /.well-known/agent-card.json (a path only 0.3 and later use), 0.1 at
      /.well-known/agent.json.

    Anything else is CardRejected with one problem naming what was looked for."""
    if not isinstance(document, dict):
        raise CardRejected([Problem("", "must be a JSON object (an agent card), not " + _kind(document))])
    if "supportedInterfaces" in document:
        return "1.0"
    if "aic" in document or "endPoints" in document:
        return "acs"
    protocol = document.get("protocolVersion")
    if "protocolVersion" in document:
        if isinstance(protocol, str) and _V03_PROTOCOL.fullmatch(protocol.strip()):
            return "0.3"
        shown = repr(protocol)[:40]
        raise CardRejected(
            [
                Problem(
                    "/protocolVersion",
                    f"names a protocol version this registry does not read ({shown}); it reads A2A 1.0 cards "
                    "(supportedInterfaces), A2A 0.3 and 0.2 cards (protocolVersion 0.3.x or 0.2.x) and A2A 0.1 "
                    "cards (no protocolVersion)",
                )
            ]
        )
    has_url = "url" in document
    if has_url and any(member in document for member in _V03_MEMBERS):
        return "0.3"
    if has_url and "capabilities" in document:
        if "authentication" in document:
            return "0.1"
        if _served_at(fetched_from, CARD_PATH):
            return "0.3"
        if _served_at(fetched_from, LEGACY_CARD_PATH):
            return "0.1"
    raise CardRejected([Problem("", f"is not an agent card this registry reads: it looked for {LOOKED_FOR}")])


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    return "a " + type(value).__name__
