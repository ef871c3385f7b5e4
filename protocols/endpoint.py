"""The agent's JSON-RPC endpoint, apart from any HTTP framework.

Under daphne the Channels consumer (`consumers.AgentRpcConsumer`) serves it; Django's view
(`views.agent_rpc`) adapts the same pipeline for the test client and other servers. Order of
checks, each before anything later is looked at: agent exists -> caller authenticated ->
rate limit (`throttle`) -> body size (the site's, then the tenant's) -> Content-Type ->
JSON-RPC envelope (with every value the request holds, see `storable`) -> the dialect (A2A
version, method) -> extensions -> params. Whatever fails answers in JSON-RPC form (HTTP 401
for authentication, 429 with Retry-After for a rate limit or the tenant's cap on active
tasks), never with an error page. A streaming method that passes every check answers with an
`EventStream`, which the transport sends as `text/event-stream`; errors found before that are
plain JSON. docs/limits.md describes the limits.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from accounts.models import Agent
from tasks_app import storable, streams
from tasks_app.errors import (
    STORE_ERRORS,
    STORE_RETRY_AFTER,
    ContentTypeNotSupported,
    DomainError,
    ExtensionSupportRequired,
    TooManyActiveTasks,
)

from . import auth, dialects, jsonrpc, throttle
from .cards import required_extensions
from .exchange import Call, EventStream

log = logging.getLogger(__name__)

JSON = "application/json"
JSON_CONTENT_TYPES = {"application/json", "application/a2a+json"}

# Agent endpoints run without the site middleware: these are what it would have added.
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx and friends: pass each event on at once
    "Content-Encoding": "identity",  # never gzip: a compressing proxy would hold events back
    "X-Content-Type-Options": "nosniff",
}
KEEP_ALIVE = b": keep-alive\n\n"
# How long a client should wait before it sends again a request this process refused while
# shutting down (another process, or this one restarted, will answer it).
SHUTDOWN_RETRY_AFTER = 1


@dataclass(frozen=True)
class RpcRequest:
    tenant: str
    agent: str
    http_method: str
    headers: Mapping[str, str]  # lower-case names
    query: Mapping[str, str]
    body: bytes | None  # None: larger than DATA_UPLOAD_MAX_MEMORY_SIZE
    base_url: str
    client: str = ""  # the client's address, as the server saw it


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def all_headers(self) -> dict[str, str]:
        return {
            "Content-Type": JSON,
            "Content-Length": str(len(self.body)),
            "X-Content-Type-Options": "nosniff",
            **self.headers,
        }


@dataclass
class Streamed:
    """An open event stream and the JSON-RPC request id its events answer."""

    request_id: Any
    stream: EventStream
    headers: dict[str, str] = field(default_factory=dict)
    error: Callable[[Any, DomainError], bytes] = jsonrpc.domain_error  # the dialect's error response

    def all_headers(self) -> dict[str, str]:
        return {**SSE_HEADERS, **self.headers}

    async def frames(self) -> AsyncGenerator[bytes, None]:
        """The SSE frames: `id: <seq>` and one JSON-RPC response per event, comments as
        heartbeats. A failure mid-stream becomes a last JSON-RPC error event."""
        yield KEEP_ALIVE  # the headers go out now, not with the agent's first event
        try:
            async for item in self.stream.items:
                if item is None:
                    yield KEEP_ALIVE
                    continue
                seq, value = item
                yield b"id: %d\ndata: %s\n\n" % (seq, jsonrpc.result(self.request_id, value))
        except DomainError as exc:
            yield b"data: %s\n\n" % self.error(self.request_id, exc)
        except streams.Closing as exc:  # a comment: the stream ends, and no event is invented
            yield b": %s\n\n" % str(exc).encode()
        except Exception:  # noqa: BLE001 - e.g. the database went away mid-stream
            log.exception("stream for request %r failed", self.request_id)
            yield b"data: %s\n\n" % jsonrpc.error(
                self.request_id, jsonrpc.INTERNAL_ERROR, "internal error; it has been logged"
            )

    async def aclose(self) -> None:
        await self.stream.aclose()


def _error(request_id: Any, code: int, message: str, status: int = 200) -> Reply:
    return Reply(status, jsonrpc.error(request_id, code, message))


def _store_unavailable(request_id: Any, exc: Exception, where: str) -> Reply:
    """HTTP 503 with Retry-After: the request was fine, the store was not there to serve it."""
    log.warning("%s: the task store is unavailable (%s)", where, str(exc).strip())
    reply = _error(
        request_id, jsonrpc.INTERNAL_ERROR, f"the task store is unavailable; try again in {STORE_RETRY_AFTER} s", 503
    )
    reply.headers["Retry-After"] = str(STORE_RETRY_AFTER)
    return reply


def _rate_limited(refused: throttle.Refused, identity: str) -> Reply:
    """HTTP 429 before the body is read, so the id is null: the JSON-RPC error says why."""
    reply = _error(
        None,
        jsonrpc.RATE_LIMITED,
        f"rate limit of {refused.limit} requests per minute for {throttle.describe(identity)} exceeded; "
        f"retry in {refused.retry_after} s",
        429,
    )
    reply.headers["Retry-After"] = str(refused.retry_after)
    return reply


def _shutting_down(request_id: Any) -> Reply:
    """HTTP 503 with Retry-After for a request that reaches this process after it began to shut
    down: nothing was done, and the connection is closed so the client's next try goes elsewhere."""
    reply = _error(
        request_id,
        jsonrpc.INTERNAL_ERROR,
        f"the server is shutting down; send the request again in {SHUTDOWN_RETRY_AFTER} s",
        503,
    )
    reply.headers.update({"Retry-After": str(SHUTDOWN_RETRY_AFTER), "Connection": "close"})
    return reply


def _id_if_any(body: bytes) -> Any:
    """The id of the request in `body`, if it has a usable one: an answer that refuses the
    request before reading it (its Content-Type) still goes to the right caller."""
    try:
        return jsonrpc.parse(body).id
    except jsonrpc.EnvelopeError as exc:
        return exc.request_id


def _activated_extensions(headers: Mapping[str, str], agent: Agent) -> list[str]:
    """The extensions the client asked for (A2A-Extensions) that this agent supports."""
    requested = {u.strip() for u in headers.get("a2a-extensions", "").split(",") if u.strip()}
    return [e["uri"] for e in agent.extensions if e.get("uri") in requested]


async def handle(request: RpcRequest) -> Reply | Streamed:
    try:
        return await _handle(request)
    except STORE_ERRORS as exc:
        return _store_unavailable(None, exc, f"/agents/{request.tenant}/{request.agent}/")
    except Exception:  # noqa: BLE001 - e.g. the database is down: answer in JSON-RPC, never a page
        log.exception("agent endpoint /agents/%s/%s/ failed", request.tenant, request.agent)
        return _error(None, jsonrpc.INTERNAL_ERROR, "internal error; it has been logged", 500)


async def _handle(request: RpcRequest) -> Reply | Streamed:
    if request.http_method != "POST":
        reply = _error(None, jsonrpc.INVALID_REQUEST, "send JSON-RPC requests with POST", 405)
        reply.headers["Allow"] = "POST"
        return reply
    caller = await auth.authenticate(
        tenant=request.tenant, agent=request.agent, headers=request.headers, client=request.client
    )
    if caller is None:
        return _error(None, jsonrpc.INVALID_REQUEST, f"no agent at /agents/{request.tenant}/{request.agent}/", 404)
    if isinstance(caller, auth.Refusal):
        reply = _error(None, jsonrpc.INVALID_REQUEST, caller.message, caller.status)
        reply.headers.update(caller.headers)
        return reply
    found, principal = caller.agent, caller.principal
    refused = await throttle.check(tenant=found.tenant, identity=caller.identity)
    if refused is not None:
        return _rate_limited(refused, caller.identity)

    if request.body is None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return _error(None, jsonrpc.INVALID_REQUEST, f"request body is larger than {limit} bytes", 413)
    own_limit = found.tenant.max_request_bytes
    if own_limit is not None and len(request.body) > own_limit:
        return _error(
            None, jsonrpc.INVALID_REQUEST, f"request body is larger than this tenant's limit of {own_limit} bytes", 413
        )
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type not in JSON_CONTENT_TYPES:
        exc = ContentTypeNotSupported(
            f"Content-Type {storable.brief(content_type or '(none)')} is not supported; use {JSON}"
        )
        return Reply(200, jsonrpc.domain_error(_id_if_any(request.body), exc))
    try:
        call = jsonrpc.parse(request.body)
    except jsonrpc.EnvelopeError as exc:
        return _error(exc.request_id, exc.code, exc.message)
    if streams.closing():
        return _shutting_down(call.id)

    activated = _activated_extensions(request.headers, found)
    extra = {"A2A-Extensions": ", ".join(activated)} if activated else {}
    dialect = None
    try:
        version = (request.headers.get("a2a-version") or request.query.get("A2A-Version") or "").strip()
        dialect = dialects.for_request(version, call.method)
        if dialect is None:
            return _error(call.id, jsonrpc.METHOD_NOT_FOUND, f"method {storable.brief(call.method)} not found")
        missing = [uri for uri in required_extensions(found) if uri not in activated]
        if missing:
            raise ExtensionSupportRequired(
                f"this agent requires the extension(s) {', '.join(missing)}; activate them with the "
                "A2A-Extensions header"
            )
        context = Call(
            agent=found,
            principal=principal,
            base_url=request.base_url,
            last_event_id=request.headers.get("last-event-id"),
        )
        value = await dialect.methods[call.method](context, call.params)
        if isinstance(value, EventStream):
            return Streamed(call.id, value, extra, error=dialect.error)
        return Reply(200, jsonrpc.result(call.id, value), extra)
    except TooManyActiveTasks as exc:
        body = (dialect.error if dialect else dialects.default().error)(call.id, exc)
        return Reply(429, body, {**extra, "Retry-After": str(exc.retry_after)})
    except DomainError as exc:
        # Before a dialect is known (VersionNotSupported), the default's form.
        return Reply(200, (dialect.error if dialect else dialects.default().error)(call.id, exc), extra)
    except STORE_ERRORS as exc:
        return _store_unavailable(call.id, exc, f"{call.method} on {request.tenant}/{request.agent}")
    except Exception:  # noqa: BLE001 - a bug must answer as JSON-RPC, never as a traceback page
        log.exception("internal error in %s on %s/%s", call.method, request.tenant, request.agent)
        return _error(call.id, jsonrpc.INTERNAL_ERROR, "internal error; it has been logged")
