"""The HTTP+JSON (REST) binding of A2A 1.0 (§11): routes below the agent's path, each one
method of the dialect. A route's path, query and body become that method's params, the very
params a JSON-RPC request would carry, so both bindings run the same method on the same
values; its result is the response body, its errors are google.rpc.Status objects (AIP-193)
with the HTTP status of the specification's table (§5.4) and a google.rpc.ErrorInfo.

The `/{tenant}/…` variant of each route (a2a.proto's additional bindings) is served too: its
segment is the request's `tenant`, which the agent's own path already decides here, as it is
for a JSON-RPC request's `tenant` param.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from accounts import storable
from tasks_app.errors import AGENTSERVER_ERROR_DOMAIN, DomainError

from .. import jsonrpc
from ..exchange import EventStream
from .base import INTERNAL, AgentRequest, ErrorWriter, Fault, Incoming, Reply, Streamed, json_body_refused

A2A_JSON = "application/a2a+json"
A2A_DOMAIN = jsonrpc.ERROR_DOMAIN
ERROR_INFO_TYPE = jsonrpc.ERROR_INFO_TYPE


@dataclass(frozen=True)
class Route:
    template: str  # as §11.3 writes it; `{name}` is one path segment, the method's param `name`
    methods: Mapping[str, str]  # HTTP method -> the dialect's method

    @property
    def pattern(self) -> re.Pattern[str]:
        segment = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", self.template)
        return re.compile(rf"(?:(?P<tenant>[^/]+)/)?{segment}")


# A2A 1.0 §11.3. The custom methods (`:cancel`, `:subscribe`) come before `tasks/{id}`, whose
# id would otherwise swallow them.
ROUTES = [
    Route("message:send", {"POST": "SendMessage"}),
    Route("message:stream", {"POST": "SendStreamingMessage"}),
    Route("tasks/{id}:cancel", {"POST": "CancelTask"}),
    # The proto says GET, the specification's text POST; clients use either.
    Route("tasks/{id}:subscribe", {"GET": "SubscribeToTask", "POST": "SubscribeToTask"}),
    Route(
        "tasks/{taskId}/pushNotificationConfigs/{id}",
        {"GET": "GetTaskPushNotificationConfig", "DELETE": "DeleteTaskPushNotificationConfig"},
    ),
    Route(
        "tasks/{taskId}/pushNotificationConfigs",
        {"POST": "CreateTaskPushNotificationConfig", "GET": "ListTaskPushNotificationConfigs"},
    ),
    Route("tasks/{id}", {"GET": "GetTask"}),
    Route("tasks", {"GET": "ListTasks"}),
    Route("extendedAgentCard", {"GET": "GetExtendedAgentCard"}),
]
_PATTERNS = [(route, route.pattern) for route in ROUTES]

# Query values are strings (§11.5); a method reads ProtoJSON, where an int32 may be a decimal
# string but a bool is only true or false. These are the request fields of a GET that are bools.
_BOOLEAN_QUERY = frozenset({"includeArtifacts", "include_artifacts"})
_BOOLEANS = {"true": True, "false": False}

# A2A 1.0 §5.4: (HTTP status, google.rpc.Code) of each A2A error, by its JSON-RPC code, and of
# the errors every binding shares (invalid params, the server's own limits).
DOMAIN_STATUS: dict[int, tuple[int, str]] = {
    -32001: (404, "NOT_FOUND"),  # TaskNotFound
    -32002: (409, "FAILED_PRECONDITION"),  # TaskNotCancelable
    -32003: (400, "UNIMPLEMENTED"),  # PushNotificationNotSupported
    -32004: (400, "UNIMPLEMENTED"),  # UnsupportedOperation
    -32005: (415, "INVALID_ARGUMENT"),  # ContentTypeNotSupported
    -32006: (502, "INTERNAL"),  # InvalidAgentResponse: the agent's fault, reported as a gateway's
    -32007: (400, "FAILED_PRECONDITION"),  # ExtendedAgentCardNotConfigured
    -32008: (400, "FAILED_PRECONDITION"),  # ExtensionSupportRequired
    -32009: (400, "UNIMPLEMENTED"),  # VersionNotSupported
    jsonrpc.INVALID_PARAMS: (400, "INVALID_ARGUMENT"),
    jsonrpc.INVALID_REQUEST: (400, "INVALID_ARGUMENT"),
    jsonrpc.PARSE_ERROR: (400, "INVALID_ARGUMENT"),
    jsonrpc.METHOD_NOT_FOUND: (404, "NOT_FOUND"),
    jsonrpc.RATE_LIMITED: (429, "RESOURCE_EXHAUSTED"),  # a rate limit, or the cap on active tasks
    jsonrpc.QUOTA_EXCEEDED: (429, "RESOURCE_EXHAUSTED"),  # the tenant's storage quota
    jsonrpc.INTERNAL_ERROR: (500, "INTERNAL"),
}
# The google.rpc.Code of an HTTP status the pipeline decided (google/rpc/code.proto's mapping).
HTTP_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    413: "RESOURCE_EXHAUSTED",  # as gRPC answers a message past its size limit
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
# The reasons of the JSON-RPC binding's own errors, as the a2a-sdk names them in A2A's domain.
CODE_REASONS = {
    jsonrpc.INVALID_PARAMS: "INVALID_PARAMS",
    jsonrpc.INVALID_REQUEST: "INVALID_REQUEST",
    jsonrpc.PARSE_ERROR: "INVALID_REQUEST",
    jsonrpc.METHOD_NOT_FOUND: "METHOD_NOT_FOUND",
    jsonrpc.INTERNAL_ERROR: "INTERNAL_ERROR",
}


def status_body(http: int, status: str, message: str, reason: str, domain: str) -> bytes:
    """A google.rpc.Status as AIP-193 writes it over HTTP, with its ErrorInfo."""
    info = {"@type": ERROR_INFO_TYPE, "reason": reason, "domain": domain}
    return orjson.dumps({"error": {"code": http, "status": status, "message": message, "details": [info]}})


def _unprefixed(message: str) -> str:
    """The methods name a field as a member of JSON-RPC's `params`; over HTTP+JSON the fields
    are the body's, the path's or the query's own."""
    return message.removeprefix("params.")


def domain_status(exc: DomainError) -> tuple[int, bytes]:
    http, status = DOMAIN_STATUS.get(exc.code, (500, "INTERNAL"))
    reason = exc.reason or CODE_REASONS.get(exc.code, "INTERNAL_ERROR")
    return http, status_body(http, status, _unprefixed(exc.message), reason, exc.domain or A2A_DOMAIN)


def _headers(request: AgentRequest, headers: dict[str, str] | None = None) -> dict[str, str]:
    """An answer's headers. Its Content-Type is application/json, as A2A 1.0 §11.1 has it, or
    application/a2a+json for a client that asks for it (the specification after 1.0 prefers it)."""
    accept = request.headers.get("accept", "")
    wanted = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    return {**(headers or {}), **({"Content-Type": A2A_JSON} if A2A_JSON in wanted else {})}


def not_allowed(http_method: str, where: str, allowed: tuple[str, ...], headers: dict[str, str]) -> Reply:
    """405 for a method the path does not take, answered before the caller is known."""
    names = ", ".join(allowed)
    message = f"{storable.brief(http_method)} is not allowed on {where}; use {names}"
    body = status_body(405, "UNIMPLEMENTED", message, "METHOD_NOT_FOUND", A2A_DOMAIN)
    return Reply(405, body, {**headers, "Allow": names})


def _bad(message: str, reason: str, request: AgentRequest) -> Reply:
    return Reply(400, status_body(400, "INVALID_ARGUMENT", message, reason, A2A_DOMAIN), _headers(request))


def _path(request: AgentRequest) -> str:
    # A client that joins the interface's URL (with its slash) and "/message:send" by hand
    # asks for "//message:send": the route is the same.
    return request.path.lstrip("/")


def _query_params(query: Mapping[str, str]) -> dict[str, Any]:
    return {
        name: _BOOLEANS.get(value, value) if name in _BOOLEAN_QUERY else value
        for name, value in query.items()
        if name != "A2A-Version"  # a service parameter (§3.6.1), not one of the request's fields
    }


class HttpJsonBinding:
    name = "HTTP+JSON"

    def _match(self, path: str) -> tuple[Route, dict[str, str]] | None:
        for route, pattern in _PATTERNS:
            found = pattern.fullmatch(path)
            if found is not None:
                return route, {k: v for k, v in found.groupdict().items() if v is not None}
        return None

    def route(self, request: AgentRequest) -> Any:
        matched = self._match(_path(request))
        if matched is None:
            message = f"no A2A HTTP+JSON route at {storable.brief(request.path)} below this agent's path"
            return Reply(404, status_body(404, "NOT_FOUND", message, "METHOD_NOT_FOUND", A2A_DOMAIN), _headers(request))
        route, _ = matched
        method = route.methods.get(request.http_method)
        if method is None:
            return not_allowed(request.http_method, route.template, tuple(route.methods), _headers(request))
        return method, matched[1]

    def read(self, target: Any, request: AgentRequest) -> Incoming | Reply:
        method, from_path = target
        if request.http_method == "POST":
            read = self._body(request)
            if isinstance(read, Reply):
                return read
            given: dict[str, Any] = read
        else:  # GET and DELETE have no body (§11.5): the query holds the request's fields
            given = _query_params(request.query)
        # The path and the query did not come through the strict JSON reader: they pass the same
        # check as a body's values (as members of params, as in a JSON-RPC request).
        try:
            storable.check({"params": from_path})
            if request.http_method != "POST":
                storable.check({"params": given})
        except storable.Refused as exc:
            return _bad(_unprefixed(str(exc)), "INVALID_PARAMS", request)
        return Incoming(method=method, params={**given, **from_path})

    def _body(self, request: AgentRequest) -> dict[str, Any] | Reply:
        body = request.body or b""
        if not body.strip():
            return {}  # :cancel and :subscribe need none
        refused = json_body_refused(request.headers)
        if refused is not None:
            return Reply(*domain_status(refused), _headers(request))
        try:
            value = storable.loads(body)
        except (storable.Malformed, storable.Refused) as exc:
            return _bad(f"request body is not valid JSON: {exc}", "INVALID_REQUEST", request)
        if not isinstance(value, dict):
            return _bad("the request body must be a JSON object", "INVALID_REQUEST", request)
        try:
            # The body is what a JSON-RPC request's params are: checked as them (one level below
            # an envelope), so that the same values pass or fail alike in both bindings, with the
            # same words.
            storable.check({"params": value}, strings=storable.escapes_unstorable(body))
        except storable.Refused as exc:
            return _bad(_unprefixed(str(exc)), "INVALID_PARAMS", request)
        return value

    def result(self, incoming: Incoming, value: Any, headers: dict[str, str], request: AgentRequest) -> Reply:
        return Reply(200, storable.dumps(value), _headers(request, headers))

    def fault(self, request_id: Any, fault: Fault, request: AgentRequest) -> Reply:
        http = fault.status if fault.status != 200 else DOMAIN_STATUS[fault.code][0]
        status = HTTP_STATUS.get(http, "UNKNOWN")
        domain = A2A_DOMAIN if fault.reason in CODE_REASONS.values() else AGENTSERVER_ERROR_DOMAIN
        body = status_body(http, status, fault.message, fault.reason, domain)
        return Reply(http, body, _headers(request, fault.headers))

    def error(
        self,
        incoming: Incoming | None,
        exc: DomainError,
        dialect_error: ErrorWriter,
        request: AgentRequest,
        headers: dict[str, str],
    ) -> Reply:
        http, body = domain_status(exc)
        return Reply(http, body, _headers(request, headers))

    def streamed(
        self,
        incoming: Incoming,
        stream: EventStream,
        dialect_error: ErrorWriter,
        request: AgentRequest,
        headers: dict[str, str],
    ) -> Streamed:
        def failure(exc: DomainError | None) -> bytes:
            if exc is None:
                body = status_body(500, "INTERNAL", INTERNAL, "INTERNAL_ERROR", A2A_DOMAIN)
            else:
                body = domain_status(exc)[1]
            # As the a2a-sdk's REST client reads a failure mid-stream (§11.7 names none).
            return b"event: error\ndata: %s\n\n" % body

        return Streamed(stream, storable.dumps, failure, headers)


BINDING = HttpJsonBinding()
