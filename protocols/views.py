"""HTTP endpoints of hosted agents through Django: the agent card, and the Django adapter of
the agent endpoint for each binding (the pipeline itself is in `endpoint`)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils.http import http_date, parse_http_date_safe
from django.views.decorators.csrf import csrf_exempt

from accounts.selectors import agent_get, oidc_issuer_of
from push import signing
from push.models import KeyPurpose
from tasks_app import streams
from tasks_app.lifecycle import Dialect

from . import card_signing, cards, dialects, endpoint, hosts
from .bindings import HTTP_JSON, JSONRPC, AgentRequest, Binding, Reply, Streamed, base
from .bindings.http_json import not_allowed
from .dialects.aip.binding import BINDING as AIP
from .responses import json_response as _json
from .responses import with_headers as _with_headers


def _base_url(request: HttpRequest) -> tuple[str, bool]:
    # A bound host name's origin first: such a request never asks get_host() (protocols.hosts).
    named = hosts.origin_of(request.META) or settings.PUBLIC_BASE_URL
    return hosts.base_url_of(request.META, scheme=request.scheme or "http", host="" if named else request.get_host())


@csrf_exempt
async def agent_rpc(request: HttpRequest, tenant: str, agent: str) -> HttpResponse:
    """The JSON-RPC endpoint at the agent's path."""
    return await _serve(JSONRPC, request, tenant, agent, "")


@csrf_exempt
async def agent_rest(request: HttpRequest, tenant: str, agent: str, path: str) -> HttpResponse:
    """The HTTP+JSON routes below the agent's path."""
    return await _serve(HTTP_JSON, request, tenant, agent, path)


@csrf_exempt
async def agent_aip(request: HttpRequest, tenant: str, agent: str, path: str = "") -> HttpResponse:
    """ACPs AIP's paths below the agent's (`aip/rpc`, `aip/stream`, …)."""
    return await _serve(AIP, request, tenant, agent, path)


async def _serve(binding: Binding, request: HttpRequest, tenant: str, agent: str, path: str) -> HttpResponse:
    """An agent endpoint through Django (the test client, servers other than daphne); daphne
    serves it with `consumers.AgentConsumer`. Both run `endpoint.handle`."""
    try:
        body: bytes | None = request.body
    except RequestDataTooBig:
        body = None
    base_url, vouched = _base_url(request)
    outcome = await endpoint.handle(
        binding,
        AgentRequest(
            tenant=tenant,
            agent=agent,
            http_method=request.method or "",
            headers={name.lower(): value for name, value in request.headers.items()},
            # Read as the consumer reads it (not request.GET, which refuses a query of many
            # fields with an error page of its own).
            query=base.query_of(request.META.get("QUERY_STRING", "")),
            body=body,
            base_url=base_url,
            vouched=vouched,
            agent_url=hosts.agent_url_of(request.META),
            client=request.META.get("REMOTE_ADDR", ""),
            path=path,
        ),
    )
    if isinstance(outcome, Reply):
        return _with_headers(HttpResponse(outcome.body, status=outcome.status), outcome.all_headers())
    return _with_headers(StreamingHttpResponse(_frames_then_close(outcome)), outcome.all_headers())


async def _frames_then_close(outcome: Streamed) -> AsyncIterator[bytes]:
    try:
        async with aclosing(outcome.frames()) as frames:
            async for frame in frames:
                yield frame
    finally:
        await outcome.aclose()


def agent_card_view(request: HttpRequest, tenant: str, agent: str) -> HttpResponse:
    """The A2A 1.0 card (or the one of the version the request names), at `.well-known/agent-card.json`."""
    return _card(request, tenant, agent, None)


def agent_card_v01_view(request: HttpRequest, tenant: str, agent: str) -> HttpResponse:
    """The A2A 0.1 card, at `.well-known/agent.json` (where 0.1 clients look)."""
    return _card(request, tenant, agent, dialects.named(Dialect.A2A_0_1))


CARD_METHODS = ("GET", "HEAD")
# 0.1's card has no `signatures` member; 0.3's and 1.0's do.
SIGNED_CARDS = frozenset({Dialect.A2A_1_0, Dialect.A2A_0_3})


def _not_a_card_method(request: HttpRequest, what: str) -> HttpResponse | None:
    if request.method in CARD_METHODS:
        return None
    # A card is read, never sent to: answered before anyone is looked up, as HTTP+JSON
    # answers a method its route does not take (the card's path is one below the agent's).
    reply = not_allowed(request.method or "", what, CARD_METHODS, {})
    return _with_headers(HttpResponse(reply.body, status=reply.status), reply.all_headers())


def _card(request: HttpRequest, tenant: str, agent: str, dialect: dialects.WireDialect | None) -> HttpResponse:
    refused = _not_a_card_method(request, "an agent card")
    if refused is not None:
        return refused
    found = agent_get(tenant_slug=tenant, agent_slug=agent)
    if found is None:
        return _json(orjson.dumps({"error": f"no agent at /agents/{tenant}/{agent}/"}), 404)
    if dialect is None:
        # A2A 1.0's card unless the request names another version (docs/dialects.md): the
        # 1.0 and 0.3 cards cannot be one document.
        query = base.query_of(request.META.get("QUERY_STRING", ""))  # as the endpoint reads it: never an error page
        version = (request.headers.get("A2A-Version") or query.get("A2A-Version") or "").strip()
        # A bound name's root may give another version's card to a request naming none.
        dialect = dialects.card_for(version or hosts.root_card_version(request.META))
    assert dialect.card is not None  # card_for and named() here give A2A dialects, which all have cards
    (base_url, vouched), url = _base_url(request), hosts.agent_url_of(request.META)
    card = dialect.card(found, base_url=base_url, url=url)
    # Signed only at an address the server knows as its own (protocols.hosts.known_host): a
    # card naming a Host any client sent is served, but the server's key does not vouch for it.
    if dialect.name in SIGNED_CARDS and vouched:
        # The signature names its key by kid: a new card key is a new body, so a new ETag.
        jku = card_signing.jwks_url(cards.agent_url(found, base_url=base_url, url=url))
        body = card_signing.signed_body(card, jku=jku)
    else:
        body = orjson.dumps(card)
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    issuer = oidc_issuer_of(found)  # its schemes are on the card too
    last_modified = max(found.updated_at, found.tenant.updated_at, *([issuer.updated_at] if issuer else []))
    headers: dict[str, Any] = {
        "ETag": etag,
        "Last-Modified": http_date(last_modified.timestamp()),
        "Cache-Control": f"public, max-age={settings.AGENT_CARD_MAX_AGE}",
        "Vary": "A2A-Version",
    }
    if_none_match = request.headers.get("If-None-Match")
    if_modified_since = parse_http_date_safe(request.headers.get("If-Modified-Since", ""))
    not_modified = (
        etag in [t.strip() for t in if_none_match.split(",")]
        if if_none_match
        else if_modified_since is not None and int(last_modified.timestamp()) <= if_modified_since
    )
    response = HttpResponse(status=304) if not_modified else _json(body)
    for name, value in headers.items():
        response[name] = value
    return response


def card_jwks_view(request: HttpRequest, tenant: str | None = None, agent: str | None = None) -> HttpResponse:
    """The public keys of the server's card signatures (protocols.card_signing), at the site's
    `/.well-known/agent-card-jwks.json` and next to each agent's card (the `jku` its signatures
    name; a bound host name's root serves it too). The same set everywhere: the keys are the
    server's, not a tenant's."""
    refused = _not_a_card_method(request, "a key set")
    if refused is not None:
        return refused
    if tenant is not None and agent is not None and agent_get(tenant_slug=tenant, agent_slug=agent) is None:
        return _json(orjson.dumps({"error": f"no agent at /agents/{tenant}/{agent}/"}), 404)
    # A fresh install has no card key until a card is served: make the one that will sign, so
    # a client that reads the set first finds it there.
    signing.key_for_signing(purpose=KeyPurpose.CARD)
    keys = orjson.dumps(signing.jwks(purpose=KeyPurpose.CARD))
    response = HttpResponse(keys, content_type="application/jwk-set+json")
    # A key is published CARD_KEY_PUBLISH_DELAY before it signs; keep caches shorter than that.
    response["Cache-Control"] = f"public, max-age={settings.CARD_JWKS_MAX_AGE}"
    return response


def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness, and the SSE streams this process holds open (a stream whose client left
    must not be counted for long: operators and tests read this to see leaks)."""
    return _json(orjson.dumps({"ok": True, "streams": streams.open_stream_count()}))
