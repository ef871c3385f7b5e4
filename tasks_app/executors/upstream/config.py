"""An `a2a-upstream` agent's settings: their JSON Schema and the check when the agent is saved
(`on_save`: the upstream's card fetched now, its content offered for ours), and the values a run
uses, checked again at the run (a stored agent may predate a rule)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings as site

from outbound import ssrf

from ..base import Misconfigured
from . import card as cards

CARD_PATH = "/.well-known/agent-card.json"
# A save waits at most this long for the upstream's card (or the settings' timeout, if less).
SAVE_TIMEOUT = 10.0
PLAIN_HTTP = "must use https (this server fronts plain http upstreams only with WEBHOOK_ALLOW_HTTP set)"
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
    if _plain_http(url):
        raise Misconfigured(f"settings['url'] {PLAIN_HTTP}")
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


def _plain_http(url: str) -> bool:
    return urlsplit(url).scheme.lower() == "http" and not site.WEBHOOK_ALLOW_HTTP


def chosen_interface(card: Any, protocol: str) -> cards.Chosen:
    """The card's interface to use (card.choose), refused (CardProblem) where it is plain http
    and this server fronts plain http upstreams only with WEBHOOK_ALLOW_HTTP: at every run, as
    when the agent was saved, since the card may change in between."""
    chosen = cards.choose(card, protocol)
    if _plain_http(chosen.interface.url):
        raise cards.CardProblem(f"offers {chosen.interface.url}, which {PLAIN_HTTP}")
    return chosen


def on_save(settings: dict[str, Any], secret: str) -> tuple[list[str], dict[str, Any]]:
    """Checked when a fronted agent is saved (docs/executors.md, "Checked when saved"): plain
    http only where webhooks may use it, the card fetched now through the outbound guard
    (bounded in time and bytes) and offering an interface the client can use there; its name,
    description, skills and modes offered as our card's content. Problems name what failed."""
    url = settings["url"]
    if _plain_http(url):
        return [f"settings['url']: {PLAIN_HTTP}"], {}
    try:
        config = read(settings, secret)
    except Misconfigured as exc:
        return [str(exc)], {}
    try:
        ssrf.check(config.card_url, unresolvable_ok=True)
        found = _sync(
            cards.fetch(config.card_url, timeout=min(config.timeout, SAVE_TIMEOUT), headers=config.auth, fresh=True)
        )
        chosen = chosen_interface(found, config.protocol)
    except ssrf.Refused as exc:
        return [f"settings['url']: the upstream's card at {config.card_url} may not be fetched: {exc}"], {}
    except cards.CardProblem as exc:
        text = str(exc)
        where = "" if text.startswith("the upstream") else f"the upstream's card at {config.card_url} "
        return [f"settings['url']: {where}{text}"], {}
    try:
        ssrf.check(chosen.interface.url, unresolvable_ok=True)
    except ssrf.Refused as exc:
        return [f"settings['url']: the upstream's card offers an interface at a refused address: {exc}"], {}
    return [], offered(found)


def offered(card: Any) -> dict[str, Any]:
    """The upstream card's content as our Agent's fields (cut to what they hold)."""
    skills = []
    for skill in list(card.skills)[:100]:
        entry: dict[str, Any] = {"id": skill.id[:200] or "skill"}
        if skill.name:
            entry["name"] = skill.name[:200]
        if skill.description:
            entry["description"] = skill.description[:2000]
        if skill.tags:
            entry["tags"] = [t[:200] for t in skill.tags if t][:50]
        if skill.examples:
            entry["examples"] = [e[:2000] for e in skill.examples][:50]
        if skill.input_modes:
            entry["inputModes"] = list(skill.input_modes)[:50]
        if skill.output_modes:
            entry["outputModes"] = list(skill.output_modes)[:50]
        skills.append(entry)
    return {
        "name": card.name,
        "description": card.description,
        "skills": skills,
        "input_modes": list(card.default_input_modes)[:50],
        "output_modes": list(card.default_output_modes)[:50],
    }


def _sync(coroutine: Any) -> Any:
    """Run a coroutine to its end from sync code, also where this thread runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
