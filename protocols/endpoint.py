"""An agent's endpoint, for every binding, apart from any HTTP framework.

Under daphne the Channels consumer (`consumers.AgentConsumer`) serves it; Django's views
(`views.agent_rpc`, `views.agent_rest`) adapt the same pipeline for the test client and other
servers. The binding (`protocols.bindings`: JSON-RPC, HTTP+JSON) reads requests and writes
answers; everything else happens here, once, in one order, each step before anything later is
looked at: the route (HTTP method and path) -> agent exists -> caller authenticated -> rate
limit (`throttle`) -> body size (the site's, then the tenant's) -> the request read by its
binding (Content-Type, body with every value it holds, see `storable`; path, query) -> the
dialect (A2A version, method) -> extensions -> the method and its params. Whatever fails
answers in the binding's form (HTTP 401 for authentication, 429 with Retry-After for a rate
limit or the tenant's cap on active tasks), never with an error page. A streaming method that
passes every check answers with a `Streamed` event stream, which the transport sends as
`text/event-stream`; errors found before that are plain JSON. docs/limits.md describes the limits.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from accounts import storable
from accounts.logins import forwarded_client
from accounts.models import Agent
from accounts.selectors import Principal
from tasks_app import dbcalls, selectors, streams
from tasks_app.errors import (
    STORE_ERRORS,
    STORE_RETRY_AFTER,
    DomainError,
    RetryLater,
)

from . import auth, dialects, extensions, jsonrpc, metrics, throttle
from .bindings import AgentRequest, Binding, Fault, Incoming, Reply, Streamed
from .bindings.base import INTERNAL
from .exchange import Call, EventStream

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

# How long a client should wait before it sends again a request this process refused while
# shutting down (another process, or this one restarted, will answer it).
SHUTDOWN_RETRY_AFTER = 1


def _store_unavailable(exc: Exception, where: str) -> Fault:
    """HTTP 503 with Retry-After: the request was fine, the store was not there to serve it."""
    log.warning("%s: the task store is unavailable (%s)", where, str(exc).strip())
    return Fault(
        503,
        jsonrpc.INTERNAL_ERROR,
        f"the task store is unavailable; try again in {STORE_RETRY_AFTER} s",
        "STORE_UNAVAILABLE",
        {"Retry-After": str(STORE_RETRY_AFTER)},
    )


def _rate_limited(refused: throttle.Refused, identity: str) -> Fault:
    """HTTP 429 before the body is read: the error says why."""
    return Fault(
        429,
        jsonrpc.RATE_LIMITED,
        f"rate limit of {refused.limit} requests per minute for {throttle.describe(identity)} exceeded; "
        f"retry in {refused.retry_after} s",
        "RATE_LIMITED",
        {"Retry-After": str(refused.retry_after)},
    )


# A request that reaches this process after it began to shut down: nothing was done, and the
# connection is closed so the client's next try goes elsewhere.
SHUTTING_DOWN = Fault(
    503,
    jsonrpc.INTERNAL_ERROR,
    f"the server is shutting down; send the request again in {SHUTDOWN_RETRY_AFTER} s",
    "SHUTTING_DOWN",
    {"Retry-After": str(SHUTDOWN_RETRY_AFTER), "Connection": "close"},
)


def _too_large(message: str) -> Fault:
    return Fault(413, jsonrpc.INVALID_REQUEST, message, "REQUEST_TOO_LARGE")


def _refused(refusal: auth.Refusal) -> Fault:
    reason = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}.get(refusal.status, "UNAVAILABLE")
    return Fault(refusal.status, jsonrpc.INVALID_REQUEST, refusal.message, reason, dict(refusal.headers))


@dataclass
class _Seen:
    """What a request turned out to be, for its metrics: set as the pipeline learns it."""

    dialect: str = ""
    method: str = "unknown"  # only a method some dialect has: clients cannot grow the label
    outcome: str = ""


async def handle(binding: Binding, request: AgentRequest) -> Reply | Streamed:
    with tracer.start_as_current_span(f"agent request {binding.name}", kind=SpanKind.SERVER) as span:
        answer, seen = await _observed(binding, request)
        span.set_attributes(
            {
                "agentserver.agent": f"{request.tenant}/{request.agent}",
                "agentserver.dialect": seen.dialect,
                "agentserver.method": seen.method,
                "agentserver.outcome": seen.outcome or "ok",
            }
        )
    return answer


async def _observed(binding: Binding, request: AgentRequest) -> tuple[Reply | Streamed, _Seen]:
    seen = _Seen()
    started = time.perf_counter()
    try:
        answer = await _handle(binding, request, seen)
    except STORE_ERRORS as exc:
        seen.outcome = "STORE_UNAVAILABLE"
        answer = binding.fault(None, _store_unavailable(exc, f"/agents/{request.tenant}/{request.agent}/"), request)
    except Exception:  # noqa: BLE001 - e.g. the database is down: answer in the binding's form, never a page
        log.exception("agent endpoint /agents/%s/%s/ failed", request.tenant, request.agent)
        seen.outcome = "INTERNAL_ERROR"
        answer = binding.fault(None, Fault(500, jsonrpc.INTERNAL_ERROR, INTERNAL, "INTERNAL_ERROR"), request)
    seen.outcome = seen.outcome or ("stream" if isinstance(answer, Streamed) else "ok")
    metrics.REQUESTS.labels(binding.name, seen.dialect, seen.method, seen.outcome).inc()
    metrics.REQUEST_SECONDS.labels(binding.name, seen.method).observe(time.perf_counter() - started)
    return answer, seen


async def _handle(binding: Binding, request: AgentRequest, seen: _Seen) -> Reply | Streamed:
    target = binding.route(request)
    if isinstance(target, Reply):
        seen.outcome = f"HTTP_{target.status}"
        return target
    client = request.client
    if settings.NUM_PROXIES:  # behind proxies, the address the nearest one saw (docs/limits.md)
        client = forwarded_client(client, request.headers.get("x-forwarded-for"))
    caller = await auth.authenticate(tenant=request.tenant, agent=request.agent, headers=request.headers, client=client)
    if caller is None:
        where = f"no agent at /agents/{request.tenant}/{request.agent}/"
        return _refusal(binding, request, seen, None, Fault(404, jsonrpc.INVALID_REQUEST, where, "AGENT_NOT_FOUND"))
    if isinstance(caller, auth.Refusal):
        return _refusal(binding, request, seen, None, _refused(caller))
    found, principal = caller.agent, caller.principal
    refused = await throttle.check(tenant=found.tenant, identity=caller.identity)
    if refused is not None:
        return _refusal(binding, request, seen, None, _rate_limited(refused, caller.identity))

    if request.body is None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return _refusal(binding, request, seen, None, _too_large(f"request body is larger than {limit} bytes"))
    own_limit = found.tenant.max_request_bytes
    if own_limit is not None and len(request.body) > own_limit:
        message = f"request body is larger than this tenant's limit of {own_limit} bytes"
        return _refusal(binding, request, seen, None, _too_large(message))
    incoming = binding.read(target, request)
    if isinstance(incoming, Reply):
        seen.outcome = "INVALID_REQUEST"  # the binding could not read it (envelope, Content-Type)
        return incoming
    if streams.closing():
        return _refusal(binding, request, seen, incoming.id, SHUTTING_DOWN)
    return await _call(binding, request, incoming, found, principal, seen, identity=caller.identity)


def _refusal(binding: Binding, request: AgentRequest, seen: _Seen, request_id: Any, fault: Fault) -> Reply:
    seen.outcome = fault.reason
    return binding.fault(request_id, fault, request)


async def _by_task(
    candidates: list[dialects.WireDialect], incoming: Incoming, agent: Agent, principal: Principal
) -> dialects.WireDialect:
    """A method several header-less dialects have (tasks/get of A2A 0.1 and 0.3) is answered in
    the dialect of the task its `params.id` names, looked up for this caller (one query)."""
    task_id = incoming.params.get("id")
    found = (
        await dbcalls.run(selectors.task_key_for_caller, agent=agent, principal=principal, task_id=task_id)
        if isinstance(task_id, str)
        else None
    )
    return dialects.by_task(candidates, found[1] if found is not None else None)


async def _call(
    binding: Binding,
    request: AgentRequest,
    incoming: Incoming,
    agent: Agent,
    principal: Principal,
    seen: _Seen,
    *,
    identity: str = "",
) -> Reply | Streamed:
    activation = extensions.activate(request.headers, agent)
    extra = activation.echo()
    dialect = None
    try:
        version = (request.headers.get("a2a-version") or request.query.get("A2A-Version") or "").strip()
        # A binding that speaks one dialect (AIP's paths) names it; A2A's are told by version.
        candidates = (
            dialects.for_binding(incoming.dialect, incoming.method)
            if incoming.dialect
            else dialects.for_request(version, incoming.method)
        )
        if not candidates and (missing_version := dialects.version_missing(version, incoming.method)):
            raise missing_version
        if not candidates:
            message = f"method {storable.brief(incoming.method)} not found"
            fault = Fault(200, jsonrpc.METHOD_NOT_FOUND, message, "METHOD_NOT_FOUND")
            return _refusal(binding, request, seen, incoming.id, fault)
        dialect = candidates[0] if len(candidates) == 1 else await _by_task(candidates, incoming, agent, principal)
        seen.dialect, seen.method = dialect.name, incoming.method
        extra = activation.echo(dialect.extension_headers)
        if dialect.extension_headers:  # a dialect without A2A's extensions is not held to them
            extensions.check_required(agent, activation)
        context = Call(
            agent=agent,
            principal=principal,
            base_url=request.base_url,
            vouched=request.vouched,
            agent_url=request.agent_url,
            last_event_id=request.headers.get("last-event-id"),
            extensions=activation.uris,
            caller=identity,
        )
        value = await dialect.methods[incoming.method](context, incoming.params)
        if isinstance(value, EventStream):
            return binding.streamed(incoming, value, dialect.error, request, extra)
        return binding.result(incoming, value, extra, request)
    except DomainError as exc:
        seen.outcome = exc.reason or type(exc).__name__
        # Before a dialect is known (VersionNotSupported), the default's form.
        dialect_error = (dialect or dialects.default()).error
        if isinstance(exc, RetryLater):
            extra = {**extra, "Retry-After": str(exc.retry_after)}
        return binding.error(incoming, exc, dialect_error, request, extra)
    except STORE_ERRORS as exc:
        fault = _store_unavailable(exc, f"{incoming.method} on {request.tenant}/{request.agent}")
        return _refusal(binding, request, seen, incoming.id, fault)
    except Exception:  # noqa: BLE001 - a bug must answer in the binding's form, never as a traceback page
        log.exception("internal error in %s on %s/%s", incoming.method, request.tenant, request.agent)
        fault = Fault(200, jsonrpc.INTERNAL_ERROR, INTERNAL, "INTERNAL_ERROR")
        return _refusal(binding, request, seen, incoming.id, fault)
