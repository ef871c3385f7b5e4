"""Reading a card (or a key set) from the address a submitter gave: through the SSRF guard,
one GET per candidate URL, no redirect followed, a capped body, strict JSON."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from accounts import storable
from outbound import client, ssrf

from .types import Fetched, FetchFailed

CARD_PATH = "/.well-known/agent-card.json"  # A2A 0.3 and 1.0
LEGACY_CARD_PATH = "/.well-known/agent.json"  # A2A 0.1 (and 0.2)
ACS_PATH = "/.well-known/acs.json"  # ACPs
JWKS_PATH = "/.well-known/jwks.json"

_HEADERS = {"Accept": "application/json", "User-Agent": "agentserver-registry"}
_MOVE_ON = (404, 410)  # nothing here: try the next place


def max_card_bytes() -> int:
    return int(getattr(settings, "REGISTRY_CARD_MAX_BYTES", 262144))


def max_jwks_bytes() -> int:
    return int(getattr(settings, "REGISTRY_JWKS_MAX_BYTES", 65536))


def default_timeout() -> float:
    return float(getattr(settings, "REGISTRY_CARD_FETCH_TIMEOUT", 10.0))


def is_card_path(path: str) -> bool:
    """A path that already names a document (not an agent's endpoint)."""
    return path.lower().endswith(".json") or "/.well-known/" in path


def origin(url: str) -> str:
    """scheme://host[:port] of an http(s) URL, or "" for anything else."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        return ""
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return ""
    return urlunsplit((parts.scheme.lower(), parts.netloc, "", "", ""))


def card_urls(url: str) -> list[str]:
    """Where to look for the card of a submitted URL, in order.

    A URL whose path already names a card (ends with .json, or is a .well-known path) is used
    as it is. Otherwise: for a URL with a path (an agent hosted under a path, as this server
    and others host theirs), that path's own /.well-known/agent-card.json; then the origin's
    agent-card.json (A2A 1.0 and 0.3), agent.json (0.1) and acs.json (ACPs)."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return [url]
    base = origin(url.strip())
    if not base:
        return [url]  # fetching says why it is not a URL the registry reads
    if is_card_path(parts.path):
        return [urlunsplit((parts.scheme.lower(), parts.netloc, parts.path, parts.query, ""))]
    found: list[str] = []
    path = parts.path.rstrip("/")
    if path:
        found.append(f"{base}{path}{CARD_PATH}")
    found += [f"{base}{CARD_PATH}", f"{base}{LEGACY_CARD_PATH}", f"{base}{ACS_PATH}"]
    return found


def _get(url: str, *, max_bytes: int, timeout: float) -> client.Response:
    """One guarded GET of `url` reading at most `max_bytes` + 1 bytes; FetchFailed when no HTTP
    answer came (refused by the guard, unresolved, no answer)."""
    try:
        destination = ssrf.check(url)
    except ssrf.Refused as exc:
        raise FetchFailed(f"{url} was not fetched: {exc}") from None
    except ssrf.Unresolved as exc:
        raise FetchFailed(f"{url} was not fetched: {exc}") from None
    assert destination is not None  # check() without unresolvable_ok never gives None
    try:
        return client.get(destination, headers=_HEADERS, timeout=timeout, max_body=max_bytes + 1)
    except client.SendError as exc:
        raise FetchFailed(f"{url} did not answer ({exc}, after {exc.latency_ms} ms)") from None


def _document(url: str, response: client.Response, *, max_bytes: int, what: str) -> dict[str, Any]:
    """The JSON object `response` carries, or FetchFailed saying why not."""
    status = response.status
    if 300 <= status < 400:
        where = response.headers.get("location")
        to = f" to {where[:200]}" if where else ""
        raise FetchFailed(
            f"{url} answered with a redirect (HTTP {status}{to}), which is not followed: submit the final URL"
        )
    if status != 200:
        raise FetchFailed(f"{url} answered HTTP {status} instead of the {what}")
    if len(response.body) > max_bytes:
        raise FetchFailed(f"the {what} at {url} is larger than {max_bytes} bytes")
    if response.truncated:
        raise FetchFailed(f"the {what} at {url} took too long to arrive")
    body = response.body
    if body.startswith(b"\xef\xbb\xbf"):  # a byte order mark: JSON has none, but readers may skip it
        body = body[3:]
    try:
        value = storable.loads(body)
    except storable.Malformed as exc:
        raise FetchFailed(f"the {what} at {url} is not JSON: {exc}") from None
    try:
        storable.check(value, where=f"the {what}")
    except storable.Refused as exc:
        raise FetchFailed(f"the {what} at {url} was refused: {exc}") from None
    if not isinstance(value, dict):
        kind = "a list" if isinstance(value, list) else "a string" if isinstance(value, str) else "a bare value"
        raise FetchFailed(f"the {what} at {url} is not a JSON object but {kind}")
    return value


def fetch_card(url: str, *, timeout: float | None = None) -> Fetched:
    """The card of a submitted URL: tries `card_urls(url)` in order; a 404 or 410 moves on to
    the next, any other failure stops with FetchFailed, which says why in one sentence."""
    if timeout is None:
        timeout = default_timeout()
    cap = max_card_bytes()
    missing: list[str] = []
    for candidate in card_urls(url):
        response = _get(candidate, max_bytes=cap, timeout=timeout)
        if response.status in _MOVE_ON:
            missing.append(f"{candidate} (HTTP {response.status})")
            continue
        document = _document(candidate, response, max_bytes=cap, what="card")
        return Fetched(
            url=candidate,
            document=document,
            body=response.body,
            etag=response.headers.get("etag"),
            status=response.status,
            latency_ms=response.latency_ms,
        )
    raise FetchFailed("no agent card was found at " + ", ".join(missing))


def fetch_jwks(url: str, *, timeout: float | None = None) -> dict[str, Any]:
    """A JSON Web Key Set, through the guard and size-capped; FetchFailed if it is not one."""
    cap = max_jwks_bytes()
    response = _get(url, max_bytes=cap, timeout=default_timeout() if timeout is None else timeout)
    document = _document(url, response, max_bytes=cap, what="key set")
    if not isinstance(document.get("keys"), list):
        raise FetchFailed(f"the key set at {url} is not a JWKS (no list of keys)")
    return document
