"""The gRPC binding of A2A 1.0 (§10): `lf.a2a.v1.A2AService`, each RPC one method of the dialect.

A request arrives as the serialized protobuf (`protocols.grpc_server` hands the bytes over
unparsed, so that the shared pipeline authenticates the caller and checks the size before any
of it is read). `read` parses it and turns it into ProtoJSON, the very params a JSON-RPC request
would carry, so all three bindings run the same method on the same values; a result is turned
back into the RPC's response message. Errors are a google.rpc.Status with the status code of the
specification's table (§5.4, the one HTTP+JSON's `status` column writes) and a
google.rpc.ErrorInfo, which the server sends as the RPC's status and `grpc-status-details-bin`.

The `tenant` field of a request chooses the agent (`protocols.grpc_server`, before the caller is
known, as HTTP's path does) and is not among the method's params.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from a2a.types import a2a_pb2
from google.protobuf import empty_pb2, json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, error_details_pb2, status_pb2

from accounts import storable
from tasks_app.errors import AGENTSERVER_ERROR_DOMAIN, DomainError

from ..exchange import EventStream
from . import http_json
from .base import INTERNAL, AgentRequest, ErrorWriter, Fault, Incoming, Reply, Streamed

SERVICE = "lf.a2a.v1.A2AService"
GRPC_OK = 200  # a Reply's status for a result; anything else carries a google.rpc.Status


@dataclass(frozen=True)
class Rpc:
    name: str  # the RPC, which is the dialect's method of the same name
    request: type[Message]
    response: type[Message]
    streaming: bool = False


RPCS: dict[str, Rpc] = {
    rpc.name: rpc
    for rpc in [
        Rpc("SendMessage", a2a_pb2.SendMessageRequest, a2a_pb2.SendMessageResponse),
        Rpc("SendStreamingMessage", a2a_pb2.SendMessageRequest, a2a_pb2.StreamResponse, streaming=True),
        Rpc("GetTask", a2a_pb2.GetTaskRequest, a2a_pb2.Task),
        Rpc("ListTasks", a2a_pb2.ListTasksRequest, a2a_pb2.ListTasksResponse),
        Rpc("CancelTask", a2a_pb2.CancelTaskRequest, a2a_pb2.Task),
        Rpc("SubscribeToTask", a2a_pb2.SubscribeToTaskRequest, a2a_pb2.StreamResponse, streaming=True),
        Rpc("CreateTaskPushNotificationConfig", a2a_pb2.TaskPushNotificationConfig, a2a_pb2.TaskPushNotificationConfig),
        Rpc(
            "GetTaskPushNotificationConfig",
            a2a_pb2.GetTaskPushNotificationConfigRequest,
            a2a_pb2.TaskPushNotificationConfig,
        ),
        Rpc(
            "ListTaskPushNotificationConfigs",
            a2a_pb2.ListTaskPushNotificationConfigsRequest,
            a2a_pb2.ListTaskPushNotificationConfigsResponse,
        ),
        Rpc("DeleteTaskPushNotificationConfig", a2a_pb2.DeleteTaskPushNotificationConfigRequest, empty_pb2.Empty),
        Rpc("GetExtendedAgentCard", a2a_pb2.GetExtendedAgentCardRequest, a2a_pb2.AgentCard),
    ]
}

# google/rpc/code.proto's numbers, by the names the HTTP+JSON tables use.
CODES: dict[str, int] = {name: number for name, number in code_pb2.Code.items()}


def status_bytes(code: str, message: str, reason: str, domain: str) -> bytes:
    """A serialized google.rpc.Status with its one ErrorInfo."""
    status = status_pb2.Status(code=CODES.get(code, code_pb2.UNKNOWN), message=message)
    status.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain))
    return status.SerializeToString()


def domain_status(exc: DomainError) -> tuple[int, bytes]:
    """(the HTTP status HTTP+JSON would answer, the google.rpc.Status) of a dialect's error."""
    http, code = http_json.DOMAIN_STATUS.get(exc.code, (500, "INTERNAL"))
    reason = exc.reason or http_json.CODE_REASONS.get(exc.code, "INTERNAL_ERROR")
    message = exc.message.removeprefix("params.")
    return http, status_bytes(code, message, reason, exc.domain or http_json.A2A_DOMAIN)


def invalid(message: str, reason: str = "INVALID_PARAMS") -> Reply:
    return Reply(400, status_bytes("INVALID_ARGUMENT", message, reason, http_json.A2A_DOMAIN))


def _params(message: Message) -> dict[str, Any]:
    """A request message as ProtoJSON: camelCase names, enums by name, bytes in base64, only the
    fields that were set (proto3 cannot tell an empty string from none: both are absent)."""
    params = json_format.MessageToDict(message, preserving_proto_field_name=False)
    params.pop("tenant", None)
    return params


def encode(value: Any, response: type[Message]) -> bytes:
    """A method's ProtoJSON result as the RPC's response message. Members the proto lacks (none
    today; a future card field) are left out rather than failing a good answer."""
    return json_format.ParseDict(value, response(), ignore_unknown_fields=True).SerializeToString()


class GrpcBinding:
    name = "GRPC"

    def route(self, request: AgentRequest) -> Any:
        # The server registers only the service's own RPCs: gRPC answers UNIMPLEMENTED to any other.
        return RPCS[request.path]

    def read(self, target: Any, request: AgentRequest) -> Incoming | Reply:
        rpc: Rpc = target
        message = rpc.request()
        try:
            message.ParseFromString(request.body or b"")
        except DecodeError as exc:
            return invalid(f"the request is not a valid {rpc.request.DESCRIPTOR.name}: {exc}", "INVALID_REQUEST")
        try:
            params = _params(message)
        except (ValueError, TypeError) as exc:  # e.g. a Struct holding a NaN, a string not UTF-8
            return invalid(f"the request cannot be read: {storable.brief(str(exc))}")
        try:
            # The same check as a JSON body's values: the same values pass or fail in every binding.
            storable.check({"params": params})
        except storable.Refused as exc:
            return invalid(str(exc).removeprefix("params."))
        return Incoming(method=rpc.name, params=params)

    def result(self, incoming: Incoming, value: Any, headers: dict[str, str], request: AgentRequest) -> Reply:
        return Reply(GRPC_OK, encode(value, RPCS[incoming.method].response), dict(headers))

    def fault(self, request_id: Any, fault: Fault, request: AgentRequest) -> Reply:
        http = fault.status if fault.status != 200 else http_json.DOMAIN_STATUS[fault.code][0]
        code = http_json.HTTP_STATUS.get(http, "UNKNOWN")
        reasons = http_json.CODE_REASONS.values()
        domain = http_json.A2A_DOMAIN if fault.reason in reasons else AGENTSERVER_ERROR_DOMAIN
        return Reply(http, status_bytes(code, fault.message, fault.reason, domain), dict(fault.headers))

    def error(
        self,
        incoming: Incoming | None,
        exc: DomainError,
        dialect_error: ErrorWriter,
        request: AgentRequest,
        headers: dict[str, str],
    ) -> Reply:
        http, body = domain_status(exc)
        return Reply(http, body, dict(headers))

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
                return status_bytes("INTERNAL", INTERNAL, "INTERNAL_ERROR", http_json.A2A_DOMAIN)
            return domain_status(exc)[1]

        event: Callable[[Any], bytes] = lambda value: encode(value, a2a_pb2.StreamResponse)  # noqa: E731
        return Streamed(stream, event, failure, dict(headers))


BINDING = GrpcBinding()
