"""The gRPC server (grpc.aio): A2A 1.0's `lf.a2a.v1.A2AService` and the standard health service,
served by `python manage.py serve_grpc` as its own process, beside daphne.

Each RPC is registered with no deserializer: its handler receives the request's bytes and hands
them to the pipeline every binding shares (`protocols.endpoint`) with the gRPC binding
(`bindings.grpc_binding`), so the agent, the caller, the rate limit and the size are checked
before the message is parsed, exactly as for JSON-RPC and HTTP+JSON. gRPC itself refuses a
message past the site's size (DATA_UPLOAD_MAX_MEMORY_SIZE) with RESOURCE_EXHAUSTED before any
handler runs.

The agent: the metadata `agentserver-agent: <tenant>/<agent>`, else the request's own `tenant`
field (what the card's gRPC interface says in its `tenant`, and what the official SDKs send, as
§10 says a client does), else the agent bound to the address the listener serves (a loopback or
other IP address bound with `bind_host`, as `make run` binds the conformance agent to
127.0.0.2). gRPC's Python server does not show a request's `:authority`, so a bound name is known
by its address, and the card of an agent names the one or the other (`protocols.cards`). The
`tenant` field is read alone, as a path segment would be (`_tenant_of`): the rest of the message
is parsed only after the caller is authenticated.

The version: only A2A 1.0 defines `lf.a2a.v1.A2AService` (0.3's service was `a2a.v1`), so a call
without `a2a-version` metadata is a 1.0 call; a version named is checked as on every binding.

GRPC_SERVER_SETUP names (as a dotted path, like ASGI_APPLICATION) what the project runs in this
process before the servers start, and the interceptors it returns wrap every call: the project
package's traces, which this layer cannot import.

SIGTERM: the health service says NOT_SERVING, open streams end (UNAVAILABLE, saying to
subscribe again), new calls are refused, and the calls in flight get SHUTDOWN_GRACE seconds.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from django.conf import settings
from django.utils.module_loading import import_string
from google.protobuf import descriptor_pb2, message_factory
from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from accounts.hosts import agent_at, agent_at_cached, host_name
from tasks_app import dbcalls, streams
from tasks_app.errors import AGENTSERVER_ERROR_DOMAIN, DomainError

from . import endpoint
from .bindings import AgentRequest, Reply, Streamed
from .bindings.grpc_binding import BINDING, GRPC_OK, RPCS, SERVICE, Rpc, status_bytes

log = logging.getLogger(__name__)

AGENT_KEY = "agentserver-agent"  # the metadata that names the agent: "<tenant>/<agent>"
VERSION_KEY = "a2a-version"
SERVICE_VERSION = "1.0"  # the one version whose service this is
DETAILS_KEY = "grpc-status-details-bin"  # where gRPC carries the google.rpc.Status
_CODES = {code.value[0]: code for code in grpc.StatusCode}
# Response headers the pipeline sets for HTTP that mean nothing in gRPC metadata.
_HTTP_ONLY = frozenset({"connection", "content-type", "content-length", "www-authenticate"})


@dataclass(frozen=True)
class Listener:
    address: str  # host:port as grpc takes it
    host: str  # the IP it listens on, normalised (accounts.hosts.host_name), for bound agents


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    """The request's metadata as lower-case headers; repeated keys joined by commas, as HTTP
    joins repeated headers (A2A-Extensions, §10.2). Binary (-bin) values are not headers."""
    headers: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if key.endswith("-bin") or not isinstance(value, str):
            continue
        key = key.lower()
        headers[key] = f"{headers[key]},{value}" if key in headers else value
    return headers


def _peer_address(peer: str) -> str:
    """`ipv4:127.0.0.1:5432` or `ipv6:[::1]:5432` -> the address alone."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rpartition("]")[0].lstrip("[")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return ""


def _not_found(message: str) -> Reply:
    return Reply(404, status_bytes("NOT_FOUND", message, "AGENT_NOT_FOUND", AGENTSERVER_ERROR_DOMAIN))


def _tenant_readers() -> dict[str, type[Any]]:
    """Per RPC, a message type that has only its request's `tenant` field (its number differs:
    ListTaskPushNotificationConfigsRequest has it at 4): parsing with it reads that one string
    and skips every other field unread."""
    numbers = {rpc.request.DESCRIPTOR.fields_by_name["tenant"].number for rpc in RPCS.values()}
    file = descriptor_pb2.FileDescriptorProto(
        name="agentserver_grpc_tenant.proto", package="agentserver", syntax="proto3"
    )
    for number in numbers:
        file.message_type.add(name=f"TenantAt{number}").field.add(
            name="tenant",
            number=number,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
    classes = message_factory.GetMessages([file])
    return {
        name: classes[f"agentserver.TenantAt{rpc.request.DESCRIPTOR.fields_by_name['tenant'].number}"]
        for name, rpc in RPCS.items()
    }


_TENANT_READERS = _tenant_readers()


def _tenant_of(rpc: Rpc, body: bytes) -> str:
    """The request's `tenant` field, or "" when it has none or the bytes are no message (the
    binding then says what is wrong with them, once the caller is known)."""
    reader = _TENANT_READERS[rpc.name]()
    try:
        reader.ParseFromString(body)
    except DecodeError:
        return ""
    return str(reader.tenant).strip()


def _named(value: str, where: str) -> tuple[str, str] | Reply:
    tenant, slash, agent = value.strip("/").partition("/")
    if not (slash and tenant and agent) or "/" in agent:
        return _not_found(f"{where} must be <tenant>/<agent>, e.g. acme/echo")
    return tenant, agent


async def _agent_of(rpc: Rpc, body: bytes, headers: dict[str, str], listener: Listener) -> tuple[str, str] | Reply:
    named = headers.get(AGENT_KEY, "").strip()
    if named:
        return _named(named, f"metadata {AGENT_KEY}")
    if tenant := _tenant_of(rpc, body):
        return _named(tenant, "the request's tenant")
    known, bound = agent_at_cached(listener.host)
    if not known:
        bound = await dbcalls.run(agent_at, listener.host)
    if bound is None:
        return _not_found(
            "no agent named: set the request's tenant to the card's (<tenant>/<agent>), "
            f"or send the metadata {AGENT_KEY}"
        )
    return bound.tenant, bound.agent


async def answer_call(rpc: Rpc, body: bytes, context: grpc.aio.ServicerContext, listener: Listener) -> Reply | Streamed:
    """A call's answer from the shared pipeline: a Reply (a result, or a google.rpc.Status) or a stream."""
    headers = _metadata(context)
    if not headers.get(VERSION_KEY, "").strip():
        headers[VERSION_KEY] = SERVICE_VERSION
    chosen = await _agent_of(rpc, body, headers, listener)
    if isinstance(chosen, Reply):
        return chosen
    tenant, agent = chosen
    request = AgentRequest(
        tenant=tenant,
        agent=agent,
        http_method="POST",
        headers=headers,
        query={},
        body=body,
        base_url=settings.PUBLIC_BASE_URL or settings.REGISTRY_HOSTED_BASE_URL,
        vouched=True,  # both are settings: the operator's own address
        client=_peer_address(context.peer()),
        path=rpc.name,
    )
    return await endpoint.handle(BINDING, request)


def _outgoing(headers: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((k.lower(), v) for k, v in headers.items() if k.lower() not in _HTTP_ONLY)


async def _abort(context: grpc.aio.ServicerContext, status: bytes, headers: dict[str, str]) -> None:
    """End the call with the google.rpc.Status `status` (raises, as context.abort does)."""
    parsed = status_pb2.Status.FromString(status)
    code = _CODES.get(parsed.code, grpc.StatusCode.UNKNOWN)
    await context.abort(code, parsed.message, trailing_metadata=((DETAILS_KEY, status), *_outgoing(headers)))


def _unary(rpc: Rpc, listener: Listener) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]:
    async def handle(body: bytes, context: grpc.aio.ServicerContext) -> bytes:
        answer = await answer_call(rpc, body, context, listener)
        assert isinstance(answer, Reply)  # only the streaming RPCs' methods return streams
        if answer.status != GRPC_OK:
            await _abort(context, answer.body, answer.headers)
        if outgoing := _outgoing(answer.headers):
            await context.send_initial_metadata(outgoing)
        return answer.body

    return handle


def _streaming(rpc: Rpc, listener: Listener) -> Callable[[bytes, grpc.aio.ServicerContext], AsyncIterator[bytes]]:
    async def handle(body: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        answer = await answer_call(rpc, body, context, listener)
        if isinstance(answer, Reply):
            await _abort(context, answer.body, answer.headers)
            return
        failure: bytes | None = None
        try:
            if outgoing := _outgoing(answer.headers):
                await context.send_initial_metadata(outgoing)
            async for item in answer.stream.items:
                if item is not None:  # a heartbeat: HTTP/2 keeps the connection alive itself
                    yield answer.event(item[1])
        except DomainError as exc:
            failure = answer.failure(exc)
        except streams.Closing as exc:
            failure = status_bytes("UNAVAILABLE", str(exc), "SHUTTING_DOWN", AGENTSERVER_ERROR_DOMAIN)
        except Exception:  # noqa: BLE001 - e.g. the database went away mid-stream
            log.exception("a gRPC stream failed")
            failure = answer.failure(None)
        finally:
            await answer.aclose()
        if failure is not None:
            await _abort(context, failure, {})

    return handle


def service_handler(listener: Listener) -> grpc.GenericRpcHandler:
    """A2AService, its requests and responses left as bytes (the binding reads and writes them)."""
    handlers = {
        name: (
            grpc.unary_stream_rpc_method_handler(_streaming(rpc, listener))
            if rpc.streaming
            else grpc.unary_unary_rpc_method_handler(_unary(rpc, listener))
        )
        for name, rpc in RPCS.items()
    }
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def listener(host: str, port: int) -> Listener:
    shown = f"[{host}]" if ":" in host else host
    try:
        normal = str(ipaddress.ip_address(host))
    except ValueError:
        normal = host_name(host) or host
    return Listener(address=f"{shown}:{port}", host=normal)


@dataclass
class Running:
    servers: list[grpc.aio.Server]
    health: health.aio.HealthServicer
    ports: list[int]

    async def stop(self, grace: float | None) -> None:
        await self.health.enter_graceful_shutdown()
        streams.close_all()
        await asyncio.gather(*(server.stop(grace) for server in self.servers))


async def start(hosts: list[str], port: int) -> Running:
    """A server per address (each knows which address a call came to), all on `port`."""
    checker = health.aio.HealthServicer()
    interceptors = import_string(settings.GRPC_SERVER_SETUP)() if settings.GRPC_SERVER_SETUP else []
    options = [
        ("grpc.max_receive_message_length", settings.DATA_UPLOAD_MAX_MEMORY_SIZE),
        ("grpc.so_reuseport", 0),
    ]
    servers, ports = [], []
    for host in hosts:
        where = listener(host, port)
        server = grpc.aio.server(options=options, interceptors=interceptors or None)
        server.add_generic_rpc_handlers((service_handler(where),))
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
        bound = server.add_insecure_port(where.address)
        if not bound:
            raise OSError(f"could not listen on {where.address}")
        port = port or bound  # the first listener's ephemeral port is everyone's
        await server.start()
        servers.append(server)
        ports.append(bound)
    for service in ("", SERVICE):
        await checker.set(service, health_pb2.HealthCheckResponse.SERVING)
    return Running(servers, checker, ports)


async def serve(hosts: list[str], port: int, *, ready: Callable[[Running], Any] = lambda running: None) -> None:
    """Serve until SIGTERM or SIGINT; a second one stops at once."""
    running = await start(hosts, port)
    stopping = asyncio.Event()
    stops = 0

    def on_signal() -> None:
        nonlocal stops
        stops += 1
        stopping.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    ready(running)  # only now: a supervisor that signals as soon as it reads "serving" is heard
    await stopping.wait()
    log.info("gRPC: stopping; calls in flight get up to %s s", settings.SHUTDOWN_GRACE)
    stop = asyncio.ensure_future(running.stop(settings.SHUTDOWN_GRACE))
    # A second signal may have come with the first (a supervisor that sends two): look before waiting.
    while not stop.done() and stops < 2:
        stopping.clear()
        waiter = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({stop, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
    if not stop.done():
        log.warning("second signal: stopping the gRPC server now")
        await asyncio.gather(*(server.stop(0) for server in running.servers))
    await stop  # the graceful stop ends at once after stop(0); its failure is not swallowed
    log.info("gRPC: stopped")
