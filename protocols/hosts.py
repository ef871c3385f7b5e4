"""Agents at their own host names (docs/tenancy.md): on a host name bound to an agent
(`accounts.hosts`), every path is that agent's, as if below its path: the card at
`/.well-known/agent-card.json`, JSON-RPC at `/`, HTTP+JSON's routes and AIP's below it. The
agent's own path-based URLs answer there too; nothing else does (no admin, no API, no other
agent: `/admin/` is an HTTP+JSON route that does not exist, 404).

One resolution (`resolve`), two adapters: the ASGI router (`agentserver/asgi.py`, daphne) and
`BoundHostMiddleware` (Django's handler: the test client, other servers), each rewriting the
path to the agent's own and noting the host's origin, which the card and the endpoint read
(`origin_of`, `agent_url_of`): a card names the URL the request came by.

Bound names pass Django's ALLOWED_HOSTS check without being listed: a request on one never
reaches `request.get_host()` (the site middleware and the other views), and the binding table is
its allow-list. Unknown names keep today's behaviour.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest
from django.http.request import split_domain_port
from django.urls import Resolver404, resolve

from accounts.hosts import Bound, agent_at, agent_at_cached, host_name
from tasks_app import dbcalls

from .responses import not_found

# Set on the scope (ASGI) and in request.META (Django) of a request that came by a bound name.
ORIGIN_KEY = "agentserver.host_origin"  # "https://name[:port]": the URL the request came by
ROOT_KEY = "agentserver.host_root"  # True when the path was one below the name's root (not the agent's own)
CARD_KEY = "agentserver.host_card"  # the version of the card the root gives a request naming none


@dataclass(frozen=True)
class Resolved:
    path: str  # the agent's own path for it
    origin: str
    at_root: bool
    bound: Bound

    def marks(self) -> dict[str, Any]:
        return {ORIGIN_KEY: self.origin, ROOT_KEY: self.at_root, CARD_KEY: self.bound.card_version}


def _origin(scheme: str, name: str, raw_host: str, forwarded_proto: str | None) -> str:
    if settings.NUM_PROXIES and forwarded_proto in ("http", "https"):
        scheme = forwarded_proto  # the proxy in front terminated TLS (docs/tenancy.md)
    raw_host = raw_host.strip()
    port = raw_host.rpartition("]")[2] if raw_host.startswith("[") else raw_host
    _, colon, digits = port.rpartition(":")
    shown = f"[{name}]" if ":" in name else name
    return f"{scheme}://{shown}:{digits}" if colon and digits else f"{scheme}://{shown}"


def _rewrite(path: str, bound: Bound) -> tuple[str, bool]:
    own = f"/agents/{bound.tenant}/{bound.agent}/"
    if path == own[:-1] or path.startswith(own):
        return path, False
    return own + path.removeprefix("/"), True


def _resolved(
    path: str, raw_host: str, name: str, bound: Bound | None, scheme: str, proto: str | None
) -> Resolved | None:
    if bound is None:
        return None
    rewritten, at_root = _rewrite(path, bound)
    return Resolved(rewritten, _origin(scheme, name, raw_host, proto), at_root, bound)


def _header(headers: Iterable[tuple[bytes, bytes]], wanted: bytes) -> str | None:
    for name, value in headers:
        if name == wanted:
            return value.decode("latin-1")
    return None


async def resolve_scope(scope: dict[str, Any]) -> dict[str, Any] | None:
    """The scope of an ASGI request on a bound name, as if it came by the agent's path; None
    for any other name (the server's own ask nothing of the database)."""
    headers = scope.get("headers") or ()
    raw_host = _header(headers, b"host")
    name = host_name(raw_host) if raw_host else None
    if name is None:
        return None
    known, bound = agent_at_cached(name)
    if not known:
        bound = await dbcalls.run(agent_at, name)
    found = _resolved(
        scope["path"], raw_host or "", name, bound, scope.get("scheme", "http"), _header(headers, b"x-forwarded-proto")
    )
    if found is None:
        return None
    rewritten = {key: value for key, value in scope.items() if key != "raw_path"}
    return {**rewritten, "path": found.path, **found.marks()}


def _request_host(request: HttpRequest) -> str:
    meta = request.META
    return str(meta.get("HTTP_HOST") or f"{meta.get('SERVER_NAME', '')}:{meta.get('SERVER_PORT', '')}")


def _resolve_request(request: HttpRequest, bound: Bound | None, name: str, raw_host: str) -> Resolved | None:
    proto = request.META.get("HTTP_X_FORWARDED_PROTO")
    return _resolved(request.path_info, raw_host, name, bound, request.scheme or "http", proto)


def origin_of(meta_or_scope: Any) -> str | None:
    """The origin of a request that came by a bound name, else None."""
    return meta_or_scope.get(ORIGIN_KEY)


def base_url_of(meta_or_scope: Any, *, scheme: str, host: str) -> tuple[str, bool]:
    """The base URL a request's cards and links name, and whether the server vouches for it
    (its card key signs only cards at such a URL): a bound name's origin, PUBLIC_BASE_URL, else
    the request's own `host`, vouched for only when `known_host`."""
    origin = origin_of(meta_or_scope)
    if origin:
        return origin, True
    if settings.PUBLIC_BASE_URL:
        return settings.PUBLIC_BASE_URL, True
    return f"{scheme}://{host}", known_host(host)


def known_host(host: str) -> bool:
    """Whether `host` (a Host header) is one the operator named: exactly in ALLOWED_HOSTS (a
    wildcard names every host, so none), or, under DEBUG, loopback. Any client can send any
    Host; a card signed for it would vouch for an attacker's address."""
    domain, _ = split_domain_port(host)
    if not domain:
        return False
    if any(entry.lower() == domain for entry in settings.ALLOWED_HOSTS if entry != "*" and not entry.startswith(".")):
        return True
    if not settings.DEBUG:
        return False
    if domain == "localhost":
        return True
    try:
        return ipaddress.ip_address(domain.strip("[]")).is_loopback
    except ValueError:
        return False


def agent_url_of(meta_or_scope: Any) -> str:
    """The agent's URL when the request came by a bound name's root ("https://name/"), else ""
    (the caller names the path-based one)."""
    origin = meta_or_scope.get(ORIGIN_KEY)
    return f"{origin}/" if origin and meta_or_scope.get(ROOT_KEY) else ""


def root_card_version(meta_or_scope: Any) -> str:
    """The card version a bound name's root gives a request naming none ("" for the default)."""
    return (meta_or_scope.get(CARD_KEY) or "") if meta_or_scope.get(ROOT_KEY) else ""


class BoundHostMiddleware:
    """First in MIDDLEWARE: a request on a bound name is served by the agent's view at once,
    without the site middleware (as daphne's router serves it) and without a look at
    ALLOWED_HOSTS; any other passes on unchanged."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if self.is_async:
            return self._acall(request)
        raw_host = _request_host(request)
        name = host_name(raw_host)
        found = _resolve_request(request, agent_at(name), name, raw_host) if name else None
        if found is None:
            return self.get_response(request)
        view, args, kwargs = _view(request, found)
        if iscoroutinefunction(view):
            return async_to_sync(view)(request, *args, **kwargs)
        return view(request, *args, **kwargs)

    async def _acall(self, request: HttpRequest):
        raw_host = _request_host(request)
        name = host_name(raw_host)
        found = None
        if name:
            known, bound = agent_at_cached(name)
            if not known:
                bound = await dbcalls.run(agent_at, name)
            found = _resolve_request(request, bound, name, raw_host)
        if found is None:
            return await self.get_response(request)
        view, args, kwargs = _view(request, found)
        if iscoroutinefunction(view):
            return await view(request, *args, **kwargs)
        return await sync_to_async(view)(request, *args, **kwargs)


def _view(request: HttpRequest, found: Resolved):
    request.path_info = request.path = found.path
    request.META.update(found.marks())
    try:
        # The agent API's paths alone (the routes import the views, which import this module).
        match = resolve(found.path, urlconf="protocols.routes")
    except Resolver404:
        return not_found, (), {}
    return match.func, match.args, match.kwargs
