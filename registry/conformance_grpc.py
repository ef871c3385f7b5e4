"""The directory's conformance checks of an A2A 1.0 gRPC interface (registry.conformance runs
them): the same safe questions as over JSON-RPC and HTTP+JSON, put to `lf.a2a.v1.A2AService`.

The card names the interface as `host:port` (or a URL with the scheme grpc, grpcs, http or
https); the address guard checks it as it checks every outgoing request, and the channel goes to
the address it resolved to, with the card's host as the authority (and, over TLS, as the name
the certificate must bear): no proxy, no DNS of gRPC's own, no retry. Each call waits at most
the run's per-request timeout and reads at most MAX_BODY bytes of an answer.

A status is judged by its code (A2A 1.0 §5.4: TaskNotFound is NOT_FOUND, UnsupportedOperation
and PushNotificationNotSupported UNIMPLEMENTED, ExtendedAgentCardNotConfigured
FAILED_PRECONDITION, a request that is not the message INVALID_ARGUMENT) and, where the status
carries a google.rpc.ErrorInfo, by its reason (an agent not found is no task not found); UNAUTHENTICATED and
PERMISSION_DENIED want credentials the directory does not have: skipped, not failed."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import grpc
from a2a.types import a2a_pb2
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

from outbound import ssrf

from .models import Outcome

SERVICE = "/lf.a2a.v1.A2AService/"
TLS_SCHEMES = frozenset({"grpcs", "https"})
CREDENTIALS_WANTED = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})


def _target(url: str) -> tuple[str, int, bool] | str:
    """(host, port, tls) of the interface, or why it cannot be one."""
    text = url.strip()
    scheme = ""
    if "://" in text:
        scheme = text.split("://", 1)[0].lower()
        if scheme not in {"grpc", "grpcs", "http", "https"}:
            return f"not a gRPC address: the scheme {scheme!r}"
    try:
        parts = urlsplit(text if scheme else f"//{text}")
        port = parts.port
    except ValueError as exc:  # a bracket left open, a port not a number or out of range
        return f"not a gRPC address: {exc}"
    if not parts.hostname:
        return "not a gRPC address: no host"
    tls = scheme in TLS_SCHEMES or (not scheme and port == 443)
    if port is None:
        port = 443 if tls else 80
    return parts.hostname, port, tls


def _channel(url: str, *, max_body: int) -> tuple[grpc.Channel, str] | str:
    """A channel to the guarded address of the interface (and its address as shown), or why
    there is none: a sentence that starts with "not run" when this server may not go there."""
    target = _target(url)
    if isinstance(target, str):
        return target
    host, port, tls = target
    try:
        destination = ssrf.check(f"{'https' if tls else 'http'}://{host.encode('idna').decode()}:{port}/")
    except ssrf.Refused as exc:
        return f"not run: refused by the address guard: {exc}"
    except ssrf.Unresolved as exc:
        return f"no answer: {exc}"
    except (ValueError, UnicodeError) as exc:
        return f"not a gRPC address: {exc}"
    assert destination is not None
    address = destination.address
    where = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
    options = [
        ("grpc.enable_http_proxy", 0),
        ("grpc.enable_retries", 0),
        ("grpc.max_receive_message_length", max_body),
        ("grpc.default_authority", f"{host}:{port}"),
        ("grpc.primary_user_agent", "agentserver-registry (conformance check)"),
    ]
    if tls:
        options.append(("grpc.ssl_target_name_override", host))
        return grpc.secure_channel(where, grpc.ssl_channel_credentials(), options=options), where
    return grpc.insecure_channel(where, options=options), where


def _reasons(exc: grpc.RpcError) -> list[str]:
    """The ErrorInfo reasons of a status's details (grpc-status-details-bin), if it has any."""
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            try:
                status = status_pb2.Status.FromString(value)
            except DecodeError:
                return []
            reasons = []
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Is(info.DESCRIPTOR) and detail.Unpack(info):
                    reasons.append(info.reason)
            return reasons
    return []


def _verdict(
    call: Callable[[], Any], *, expected: tuple[grpc.StatusCode, ...], reasons: tuple[str, ...], what: str
) -> tuple[str, str]:
    """Passed on an expected code whose ErrorInfo, if it has one, gives an expected reason (a
    NOT_FOUND for the agent is not one for the task)."""
    want = " or ".join(code.name for code in expected)
    try:
        call()
    except (ValueError, TypeError) as exc:  # what the card gave cannot be sent (gRPC refused it)
        return Outcome.FAILED, f"could not be asked: {exc}"
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        details = (exc.details() if hasattr(exc, "details") else "") or ""
        if code in CREDENTIALS_WANTED:
            return (
                Outcome.SKIPPED,
                f"answered {code.name}: the interface wants credentials, which the directory does not send, "
                "so the answer says nothing of the check",
            )
        if code in expected:
            given = _reasons(exc)
            if reasons and given and not set(given) & set(reasons):
                return (
                    Outcome.FAILED,
                    f"answered {code.name} for another reason ({', '.join(given)}: {details[:200]}) "
                    f"where {' or '.join(reasons)} ({what}) was due",
                )
            return Outcome.PASSED, f"answered {code.name} ({what})"
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return Outcome.FAILED, f"no answer: {code.name} ({details[:200]})"
        return Outcome.FAILED, f"answered {code.name} ({details[:200]}) where {want} ({what}) was due"
    return Outcome.FAILED, f"answered OK where {want} ({what}) was due"


def grpc_checks(
    *, url: str, tenant: str, capabilities: set[str], timeout: Callable[[], float | None], max_body: int
) -> list[tuple[str, str, str]]:
    """(check, outcome, detail) of each question to the interface at `url`. Never raises for
    anything the agent does."""
    opened = _channel(url, max_body=max_body)
    if isinstance(opened, str):
        outcome = Outcome.SKIPPED if opened.startswith("not run") else Outcome.FAILED
        return [("interface", outcome, opened)]
    channel, _ = opened
    # `tenant` as A2A 1.0 puts it in each request; this server's own gRPC reads it from metadata.
    named = tenant and tenant.isascii() and tenant.isprintable()  # metadata is printable ASCII
    metadata = [("a2a-version", "1.0"), *([("agentserver-agent", tenant)] if named else [])]
    task_id = str(uuid.uuid4())
    found: list[tuple[str, str, str]] = []

    def ask(
        check: str,
        method: str,
        request: bytes,
        expected: tuple[grpc.StatusCode, ...],
        what: str,
        *,
        reasons: tuple[str, ...] = (),
        stream: bool = False,
    ) -> None:
        seconds = timeout()
        if seconds is None:
            found.append((check, Outcome.SKIPPED, "not run: the run's time budget was spent"))
            return
        identity = lambda raw: raw  # noqa: E731 - the requests are bytes, the answers left unread
        if stream:
            rpc = channel.unary_stream(SERVICE + method, request_serializer=identity, response_deserializer=identity)

            def call() -> Any:
                for _ in rpc(request, metadata=metadata, timeout=seconds):
                    break  # an event where an error was due: judged as OK

        else:
            unary = channel.unary_unary(SERVICE + method, request_serializer=identity, response_deserializer=identity)

            def call() -> Any:
                return unary(request, metadata=metadata, timeout=seconds)

        found.append((check, *_verdict(call, expected=expected, reasons=reasons, what=what)))

    try:
        get = a2a_pb2.GetTaskRequest(tenant=tenant, id=task_id).SerializeToString()
        ask("unknown_task", "GetTask", get, (grpc.StatusCode.NOT_FOUND,), "task not found", reasons=("TASK_NOT_FOUND",))
        # Not a GetTaskRequest at all: a field of the wrong wire type.
        ask("malformed", "GetTask", b"\x0a\xff\xff\xff\xff\x0f", (grpc.StatusCode.INVALID_ARGUMENT,), "invalid request")
        if "streaming" not in capabilities:
            subscribe = a2a_pb2.SubscribeToTaskRequest(tenant=tenant, id=task_id).SerializeToString()
            ask(
                "denied_streaming",
                "SubscribeToTask",
                subscribe,
                (grpc.StatusCode.UNIMPLEMENTED,),
                "unsupported operation",
                reasons=("UNSUPPORTED_OPERATION",),
                stream=True,
            )
        if "push_notifications" not in capabilities:
            push = a2a_pb2.GetTaskPushNotificationConfigRequest(tenant=tenant, task_id=task_id, id="x")
            ask(
                "denied_push",
                "GetTaskPushNotificationConfig",
                push.SerializeToString(),
                (grpc.StatusCode.UNIMPLEMENTED,),
                "push notifications not supported",
                reasons=("PUSH_NOTIFICATION_NOT_SUPPORTED", "UNSUPPORTED_OPERATION"),
            )
        if "extended_card" not in capabilities:
            extended = a2a_pb2.GetExtendedAgentCardRequest(tenant=tenant).SerializeToString()
            ask(
                "denied_extended_card",
                "GetExtendedAgentCard",
                extended,
                (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED),
                "extended card not configured, or unsupported",
                reasons=("EXTENDED_AGENT_CARD_NOT_CONFIGURED", "UNSUPPORTED_OPERATION"),
            )
    finally:
        channel.close()
    return found
