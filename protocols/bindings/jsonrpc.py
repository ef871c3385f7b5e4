"""The JSON-RPC 2.0 binding: one POST to the agent's path, the method and params in an envelope
(`protocols.jsonrpc`); every answer is a JSON-RPC response with the request's id, an error
inside a well-formed exchange with HTTP 200. Streams carry one JSON-RPC response per event."""

from __future__ import annotations

from typing import Any

from tasks_app.errors import DomainError, RetryLater

from .. import jsonrpc
from ..exchange import EventStream
from .base import INTERNAL, AgentRequest, ErrorWriter, Fault, Incoming, Reply, Streamed, json_body_refused


def _id_if_any(body: bytes) -> Any:
    """The id of the request in `body`, if it has a usable one: an answer that refuses the
    request before reading it (its Content-Type) still goes to the right caller."""
    try:
        return jsonrpc.parse(body).id
    except jsonrpc.EnvelopeError as exc:
        return exc.request_id


class JsonRpcBinding:
    name = "JSONRPC"

    def route(self, request: AgentRequest) -> Any:
        if request.http_method != "POST":
            reply = Reply(405, jsonrpc.error(None, jsonrpc.INVALID_REQUEST, "send JSON-RPC requests with POST"))
            reply.headers["Allow"] = "POST"
            return reply
        return ""  # the method is in the body

    def read(self, target: Any, request: AgentRequest) -> Incoming | Reply:
        body = request.body or b""
        refused = json_body_refused(request.headers)
        if refused is not None:
            return Reply(200, jsonrpc.domain_error(_id_if_any(body), refused))
        try:
            call = jsonrpc.parse(body)
        except jsonrpc.EnvelopeError as exc:
            return Reply(200, jsonrpc.error(exc.request_id, exc.code, exc.message))
        return Incoming(method=call.method, params=call.params, id=call.id)

    def result(self, incoming: Incoming, value: Any, headers: dict[str, str], request: AgentRequest) -> Reply:
        return Reply(200, jsonrpc.result(incoming.id, value), headers)

    def fault(self, request_id: Any, fault: Fault, request: AgentRequest) -> Reply:
        return Reply(fault.status, jsonrpc.error(request_id, fault.code, fault.message), dict(fault.headers))

    def error(
        self,
        incoming: Incoming | None,
        exc: DomainError,
        dialect_error: ErrorWriter,
        request: AgentRequest,
        headers: dict[str, str],
    ) -> Reply:
        # A cap that frees up by itself is a "try later" (with Retry-After): 429, as a rate limit.
        status = 429 if isinstance(exc, RetryLater) else 200
        return Reply(status, dialect_error(incoming.id if incoming else None, exc), headers)

    def streamed(
        self,
        incoming: Incoming,
        stream: EventStream,
        dialect_error: ErrorWriter,
        request: AgentRequest,
        headers: dict[str, str],
    ) -> Streamed:
        request_id = incoming.id

        def failure(exc: DomainError | None) -> bytes:
            if exc is None:
                body = jsonrpc.error(request_id, jsonrpc.INTERNAL_ERROR, INTERNAL)
            else:
                body = dialect_error(request_id, exc)
            return b"data: %s\n\n" % body

        return Streamed(stream, lambda value: jsonrpc.result(request_id, value), failure, headers)


BINDING = JsonRpcBinding()
