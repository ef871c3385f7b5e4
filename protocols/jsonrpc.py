"""JSON-RPC 2.0 envelopes: parse a request body, build results and errors.

Faults of the envelope get the standard codes (-32700 parse, -32600 invalid request,
-32601 unknown method, -32602 bad params, -32603 internal); domain errors carry their A2A
code and a google.rpc.ErrorInfo in `data`, as A2A 1.0 §9.5 asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from accounts import storable
from tasks_app.errors import DomainError

ERROR_DOMAIN = "a2a-protocol.org"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Implementation-defined server errors (-32000..-32099; A2A 1.0 takes -32001..-32009):
# too many requests (a rate limit, HTTP 429, or the tenant's cap on active tasks), and the
# tenant's storage quota used up. errors.TooManyActiveTasks and errors.StorageQuotaExceeded
# carry the same numbers.
RATE_LIMITED = -32029
QUOTA_EXCEEDED = -32030


class EnvelopeError(Exception):
    def __init__(self, code: int, message: str, request_id: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.request_id = code, message, request_id


@dataclass(frozen=True)
class Request:
    id: Any
    method: str
    params: dict[str, Any]


def parse(body: bytes) -> Request:
    """The request in `body`, or EnvelopeError. Everything in it, params included, has
    passed `storable.check` once: nothing deeper than the limit or that the store cannot
    hold goes further. The id is echoed in errors once it is known to be usable."""
    try:
        obj = storable.loads(body)
    except storable.Malformed as exc:
        raise EnvelopeError(PARSE_ERROR, f"request body is not valid JSON: {exc}") from None
    except storable.Refused as exc:
        raise EnvelopeError(INVALID_REQUEST, str(exc)) from None
    if isinstance(obj, list):
        raise EnvelopeError(INVALID_REQUEST, "batch requests are not supported; send one request per call")
    if not isinstance(obj, dict):
        raise EnvelopeError(INVALID_REQUEST, "a JSON-RPC request must be a JSON object")
    request_id = obj.get("id")
    if request_id is not None and (isinstance(request_id, bool) or not isinstance(request_id, (str, int, float))):
        raise EnvelopeError(INVALID_REQUEST, "id must be a string, a number or null")
    try:  # the id first: an error about the params echoes it, so it must be writable
        storable.check({"id": request_id})
    except storable.Refused as exc:
        raise EnvelopeError(INVALID_REQUEST, str(exc)) from None
    try:
        storable.check(obj, strings=storable.escapes_unstorable(body))
    except storable.Refused as exc:
        where = exc.path[0] if exc.path else None
        raise EnvelopeError(
            INVALID_PARAMS if where == "params" else INVALID_REQUEST, str(exc), None if where == "id" else request_id
        ) from None
    if obj.get("jsonrpc") != "2.0":
        raise EnvelopeError(INVALID_REQUEST, 'jsonrpc must be exactly "2.0"', request_id)
    method = obj.get("method")
    if not isinstance(method, str) or not method:
        raise EnvelopeError(INVALID_REQUEST, "method must be a non-empty string", request_id)
    params = obj.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise EnvelopeError(INVALID_PARAMS, "params must be an object", request_id)
    return Request(id=request_id, method=method, params=params)


def result(request_id: Any, value: Any) -> bytes:
    return storable.dumps({"jsonrpc": "2.0", "id": request_id, "result": value})


def error(request_id: Any, code: int, message: str, reason: str | None = None, domain: str = ERROR_DOMAIN) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message}
    if reason:
        err["data"] = [{"@type": ERROR_INFO_TYPE, "reason": reason, "domain": domain}]
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": err})


def domain_error(request_id: Any, exc: DomainError) -> bytes:
    return error(request_id, exc.code, exc.message, exc.reason, exc.domain or ERROR_DOMAIN)
