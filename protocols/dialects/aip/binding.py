"""AIP's binding: JSON-RPC 2.0 over HTTP POST, one path per method below the agent's AIP base
(`/agents/<tenant>/<agent>/aip/rpc`, `…/aip/stream`, `…/aip/notification/set`, …, as the
seed names each method's URL), or any method at the base itself. Every answer, a refusal of
the caller included, is an AIP JSON-RPC response: the seed's code and message, what exactly
went wrong in `data.details`."""

from __future__ import annotations

from typing import Any

import orjson

from accounts import storable
from tasks_app.lifecycle import Dialect

from ... import jsonrpc
from ...bindings.base import AgentRequest, Fault, Incoming, Reply, json_body_refused
from ...bindings.jsonrpc import JsonRpcBinding
from . import codec

METHODS = frozenset(
    {"rpc", "stream", "notification/set", "notification/get", "notification/delete", "notification/start", "group"}
)
# A refusal of the caller, in AIP's own codes.
_BY_STATUS = {401: -32008, 403: -32009}


def _error(request_id: Any, code: int, details: str, reason: str = "") -> bytes:
    message = codec.STANDARD_MESSAGES.get(code, "Server error")
    error = codec.error_object(code, message, details, {"reason": reason} if reason else None)
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


class AipBinding(JsonRpcBinding):
    name = "AIP"

    def route(self, request: AgentRequest) -> Any:
        if request.http_method != "POST":
            reply = Reply(405, _error(None, jsonrpc.INVALID_REQUEST, "send AIP requests with POST"))
            reply.headers["Allow"] = "POST"
            return reply
        method = request.path.strip("/")
        if method and method not in METHODS:
            details = f"no AIP method at {storable.brief(method)}; the methods are {', '.join(sorted(METHODS))}"
            return Reply(404, _error(None, jsonrpc.METHOD_NOT_FOUND, details))
        return method  # "": the method is the body's

    def read(self, target: Any, request: AgentRequest) -> Incoming | Reply:
        body = request.body or b""
        refused = json_body_refused(request.headers)
        if refused is not None:
            return Reply(200, codec.encode_error(None, refused))
        try:
            call = jsonrpc.parse(body)
        except jsonrpc.EnvelopeError as exc:
            return Reply(200, _error(exc.request_id, exc.code, exc.message))
        if target and call.method != target:
            details = f"method {storable.brief(call.method)} was sent to the path of {target!r}"
            return Reply(200, _error(call.id, jsonrpc.INVALID_REQUEST, details))
        return Incoming(method=call.method, params=call.params, id=call.id, dialect=Dialect.AIP_1_0)

    def fault(self, request_id: Any, fault: Fault, request: AgentRequest) -> Reply:
        code = _BY_STATUS.get(fault.status, fault.code)
        return Reply(fault.status, _error(request_id, code, fault.message, fault.reason), dict(fault.headers))


BINDING = AipBinding()
