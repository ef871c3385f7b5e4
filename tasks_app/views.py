"""HTTP endpoints of hosted agents: the JSON-RPC endpoint and the agent card.

Order of checks on the JSON-RPC endpoint, each before anything later is looked at:
agent exists -> caller authenticated -> Content-Type -> JSON-RPC envelope -> A2A version
-> method -> params. Whatever fails answers in JSON-RPC form (HTTP 401 for authentication),
never with a Django error page.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.utils.http import http_date, parse_http_date_safe
from django.views.decorators.csrf import csrf_exempt

from registry.models import Agent
from registry.selectors import Principal, agent_get, api_key_authenticate, caller_cached

from . import dbcalls, jsonrpc
from .cards import API_KEY_HEADER, agent_card, required_extensions
from .dialects.a2a_v1.methods import METHODS as A2A_V1_METHODS, Call
from .errors import ContentTypeNotSupported, DomainError, ExtensionSupportRequired, VersionNotSupported

log = logging.getLogger(__name__)

JSON = "application/json"
JSON_CONTENT_TYPES = {"application/json", "application/a2a+json"}


def _json(body: bytes, status: int = 200, **headers: str) -> HttpResponse:
    # Agent endpoints run without the site middleware (agentserver/asgi.py): set what it would.
    response = HttpResponse(body, status=status, content_type=JSON)
    response["Content-Length"] = str(len(body))
    response["X-Content-Type-Options"] = "nosniff"
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def _base_url(request: HttpRequest) -> str:
    return settings.PUBLIC_BASE_URL or f"{request.scheme}://{request.get_host()}"


def _lookup(tenant: str, agent: str, presented: str | None) -> tuple[Agent | None, Principal | None]:
    found = agent_get(tenant_slug=tenant, agent_slug=agent)
    if found is None:
        return None, None
    if presented:
        return found, api_key_authenticate(agent=found, presented=presented)
    return found, Principal.ANONYMOUS if found.is_public else None


def _unauthorized(message: str) -> HttpResponse:
    body = jsonrpc.error(None, jsonrpc.INVALID_REQUEST, message)
    return _json(body, 401, WWW_Authenticate=f'ApiKey header="{API_KEY_HEADER}"')


def _requested_version(request: HttpRequest) -> str:
    return (request.headers.get("A2A-Version") or request.GET.get("A2A-Version") or "").strip()


def _check_version(version: str) -> None:
    if version in ("1.0", "1", "1.0.0", "1.0.1"):
        return
    if version in ("", "0.3", "0.3.0"):
        raise VersionNotSupported(
            "a request without A2A-Version means A2A 0.3, which this server does not speak yet; "
            "send the header A2A-Version: 1.0"
        )
    raise VersionNotSupported(f"A2A version {version!r} is not supported; this endpoint speaks 1.0")


@csrf_exempt
async def agent_rpc(request: HttpRequest, tenant: str, agent: str) -> HttpResponse:
    try:
        return await _agent_rpc(request, tenant, agent)
    except Exception:  # noqa: BLE001 - e.g. the database is down: answer in JSON-RPC, never a page
        log.exception("agent endpoint /agents/%s/%s/ failed", tenant, agent)
        return _json(jsonrpc.error(None, jsonrpc.INTERNAL_ERROR, "internal error; it has been logged"), 500)


async def _agent_rpc(request: HttpRequest, tenant: str, agent: str) -> HttpResponse:
    if request.method != "POST":
        response = _json(jsonrpc.error(None, jsonrpc.INVALID_REQUEST, "send JSON-RPC requests with POST"), 405)
        response["Allow"] = "POST"
        return response
    presented = request.headers.get(API_KEY_HEADER)
    cached = caller_cached(tenant_slug=tenant, agent_slug=agent, presented=presented)
    found, principal = cached or await dbcalls.run(_lookup, tenant, agent, presented)
    if found is None:
        return _json(jsonrpc.error(None, jsonrpc.INVALID_REQUEST, f"no agent at /agents/{tenant}/{agent}/"), 404)
    if principal is None:
        return _unauthorized(
            "invalid API key" if presented else f"this agent needs an API key in the {API_KEY_HEADER} header"
        )

    content_type = (request.content_type or "").lower()
    if content_type not in JSON_CONTENT_TYPES:
        exc = ContentTypeNotSupported(f"Content-Type {content_type or '(none)'!r} is not supported; use {JSON}")
        return _json(jsonrpc.domain_error(None, exc))

    try:
        body = request.body
    except RequestDataTooBig:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return _json(jsonrpc.error(None, jsonrpc.INVALID_REQUEST, f"request body is larger than {limit} bytes"), 413)
    try:
        call = jsonrpc.parse(body)
    except jsonrpc.EnvelopeError as exc:
        return _json(jsonrpc.error(exc.request_id, exc.code, exc.message))

    activated = _activated_extensions(request, found)
    extra = {"A2A_Extensions": ", ".join(activated)} if activated else {}
    try:
        _check_version(_requested_version(request))
        handler = A2A_V1_METHODS.get(call.method)
        if handler is None:
            return _json(jsonrpc.error(call.id, jsonrpc.METHOD_NOT_FOUND, f"method {call.method!r} not found"))
        missing = [uri for uri in required_extensions(found) if uri not in activated]
        if missing:
            raise ExtensionSupportRequired(
                f"this agent requires the extension(s) {', '.join(missing)}; activate them with the "
                "A2A-Extensions header"
            )
        value = await handler(Call(agent=found, principal=principal, base_url=_base_url(request)), call.params)
    except DomainError as exc:
        return _json(jsonrpc.domain_error(call.id, exc), **extra)
    except Exception:  # noqa: BLE001 - a bug must answer as JSON-RPC, never as a traceback page
        log.exception("internal error in %s on %s/%s", call.method, tenant, agent)
        return _json(jsonrpc.error(call.id, jsonrpc.INTERNAL_ERROR, "internal error; it has been logged"))
    return _json(jsonrpc.result(call.id, value), **extra)


def _activated_extensions(request: HttpRequest, agent: Agent) -> list[str]:
    """The extensions the client asked for (A2A-Extensions) that this agent supports."""
    requested = {u.strip() for u in request.headers.get("A2A-Extensions", "").split(",") if u.strip()}
    return [e["uri"] for e in agent.extensions if e.get("uri") in requested]


def agent_card_view(request: HttpRequest, tenant: str, agent: str) -> HttpResponse:
    found = agent_get(tenant_slug=tenant, agent_slug=agent)
    if found is None:
        return _json(orjson.dumps({"error": f"no agent at /agents/{tenant}/{agent}/"}), 404)
    body = orjson.dumps(agent_card(found, base_url=_base_url(request)))
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    last_modified = max(found.updated_at, found.tenant.created_at)
    headers: dict[str, Any] = {
        "ETag": etag,
        "Last-Modified": http_date(last_modified.timestamp()),
        "Cache-Control": f"public, max-age={settings.AGENT_CARD_MAX_AGE}",
    }
    if_none_match = request.headers.get("If-None-Match")
    if_modified_since = parse_http_date_safe(request.headers.get("If-Modified-Since", ""))
    not_modified = (
        etag in [t.strip() for t in if_none_match.split(",")] if if_none_match
        else if_modified_since is not None and int(last_modified.timestamp()) <= if_modified_since
    )
    response = HttpResponse(status=304) if not_modified else _json(body)
    for name, value in headers.items():
        response[name] = value
    return response


def healthz(request: HttpRequest) -> HttpResponse:
    return _json(b'{"ok":true}')


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404 in JSON under /agents/ (clients there parse JSON); Django's page elsewhere."""
    if request.path.startswith("/agents/"):
        return _json(orjson.dumps({"error": f"nothing at {request.path}"}), 404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)
