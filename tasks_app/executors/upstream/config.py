"""An `a2a-upstream` agent's settings: their JSON Schema (checked when the agent is saved) and
the values a run uses, checked again at the run (a stored agent may predate a rule)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings as site

from ..base import Misconfigured

CARD_PATH = "/.well-known/agent-card.json"
PROTOCOLS = ("auto", "1.0", "0.3")
_TOKEN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"  # an HTTP header name (RFC 9110 token)
# Headers the client itself must set: a secret sent in one of them would break the request.
_RESERVED = frozenset(
    {"host", "content-length", "content-type", "transfer-encoding", "connection", "a2a-version", "accept"}
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url"],
    "properties": {
        "url": {
            "type": "string",
            "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://",
            "maxLength": 2000,
            "description": "the upstream agent's card URL, or its base URL (the card is then read from "
            "<url>/.well-known/agent-card.json)",
        },
        "protocol": {
            "enum": list(PROTOCOLS),
            "default": "auto",
            "description": "which A2A version to speak to it: auto (1.0 when its card offers it, else 0.3), 1.0 or 0.3",
        },
        "streaming": {
            "type": "boolean",
            "default": True,
            "description": "stream from the upstream when its card says it can (else send, then poll)",
        },
        "timeout": {
            "type": "number",
            "minimum": 1,
            "maximum": 600,
            "default": 30,
            "description": "seconds to connect, and to wait for each answer or the next bytes of a stream",
        },
        "auth_header": {
            "type": "string",
            "pattern": _TOKEN,
            "maxLength": 100,
            "default": "Authorization",
            "description": "the header that carries the agent's secret (no secret: none is sent)",
        },
        "auth_scheme": {
            "type": "string",
            "pattern": r"^[!#$%&'*+.^_`|~0-9A-Za-z-]*$",
            "maxLength": 50,
            "description": "written before the secret: Bearer by default in Authorization, nothing in "
            "any other header (X-API-Key: <secret>)",
        },
    },
}


@dataclass(frozen=True)
class UpstreamConfig:
    card_url: str
    protocol: str
    streaming: bool
    timeout: float
    auth: dict[str, str]  # the header that carries the secret, if there is one

    @property
    def max_body(self) -> int:
        return int(site.UPSTREAM_RESPONSE_MAX_BYTES)


def card_url(url: str) -> str:
    """The card's URL: `url` itself when it names a document (.json, a /.well-known/ path),
    else the agent-card.json under it (an agent hosted under a path, as this server hosts its
    own, keeps its card there; one at the root of its host has it at the root)."""
    parts = urlsplit(url)
    if parts.path.lower().endswith(".json") or "/.well-known/" in parts.path:
        return url
    return url.split("?", 1)[0].split("#", 1)[0].rstrip("/") + CARD_PATH


def read(settings: dict[str, Any], secret: str) -> UpstreamConfig:
    """The run's configuration; Misconfigured says what is wrong with the settings."""
    url = settings.get("url")
    if not isinstance(url, str) or not re.match(r"^https?://", url, re.I):
        raise Misconfigured("settings['url'] must be the upstream agent's http(s) URL")
    protocol = settings.get("protocol", "auto")
    if protocol not in PROTOCOLS:
        raise Misconfigured(f"settings['protocol'] must be one of {', '.join(PROTOCOLS)}")
    timeout = settings.get("timeout", 30)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 1 <= timeout <= 600:
        raise Misconfigured("settings['timeout'] must be a number of seconds from 1 to 600")
    header = settings.get("auth_header", "Authorization")
    if not isinstance(header, str) or not re.match(_TOKEN, header) or header.lower() in _RESERVED:
        raise Misconfigured(f"settings['auth_header'] {header!r} cannot carry the secret")
    default_scheme = "Bearer" if header.lower() == "authorization" else ""
    scheme = settings.get("auth_scheme", default_scheme)
    if not isinstance(scheme, str) or " " in scheme:
        raise Misconfigured("settings['auth_scheme'] must be one word (or empty)")
    auth = {header: f"{scheme} {secret}" if scheme else secret} if secret else {}
    return UpstreamConfig(
        card_url=card_url(url),
        protocol=protocol,
        streaming=bool(settings.get("streaming", True)),
        timeout=float(timeout),
        auth=auth,
    )
