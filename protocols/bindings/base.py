"""What a protocol binding declares, and the values the shared pipeline (`protocols.endpoint`)
hands it. A binding is how requests and answers travel over HTTP (JSON-RPC envelopes to the
agent's path, or HTTP+JSON routes below it); a dialect (`protocols.dialects`) is what they say.
The pipeline does everything the bindings share, in one order; a binding only reads its own
requests and writes its own answers."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl

from accounts import storable
from tasks_app import streams
from tasks_app.errors import ContentTypeNotSupported, DomainError

from ..exchange import EventStream

log = logging.getLogger(__name__)

JSON = "application/json"
JSON_CONTENT_TYPES = frozenset({"application/json", "application/a2a+json"})

# Agent endpoints run without the site middleware: these are what it would have added.
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx and friends: pass each event on at once
    "Content-Encoding": "identity",  # never gzip: a compressing proxy would hold events back
    "X-Content-Type-Options": "nosniff",
}
KEEP_ALIVE = b": keep-alive\n\n"
# A heartbeat once an event has gone out: a comment line and no blank line. The SSE parser of
# a2a-sdk 0.3's clients (httpx-sse 0.4) keeps the last event id and dispatches an event with
# empty data at any blank line once an id was seen, which those clients fail to read as JSON;
# a lone comment line dispatches nothing in any parser.
HEARTBEAT = b": keep-alive\n"
INTERNAL = "internal error; it has been logged"  # what a bug tells the caller

ErrorWriter = Callable[[Any, DomainError], bytes]  # (request id, error) -> a JSON-RPC error response


@dataclass(frozen=True)
class AgentRequest:
    """An HTTP request to one hosted agent, as any server hands it over."""

    tenant: str
    agent: str
    http_method: str
    headers: Mapping[str, str]  # lower-case names
    query: Mapping[str, str]
    body: bytes | None  # None: larger than DATA_UPLOAD_MAX_MEMORY_SIZE
    base_url: str
    # Whether base_url is one the server knows as its own (protocols.hosts.base_url_of): only
    # then does its card key sign a card naming it.
    vouched: bool = False
    # The agent's URL when the request came by a bound host name's root ("https://name/");
    # "" for the path-based one (base_url and the agent's path).
    agent_url: str = ""
    client: str = ""  # the client's address, as the server saw it
    path: str = ""  # below the agent's path: "" for the path itself, "tasks/…" for an HTTP+JSON route


def media_type(headers: Mapping[str, str]) -> str:
    """The media type a request's Content-Type names, without its parameters."""
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def json_body_refused(headers: Mapping[str, str]) -> ContentTypeNotSupported | None:
    """Why a request body of this Content-Type is not read, if it is not JSON."""
    sent = media_type(headers)
    if sent in JSON_CONTENT_TYPES:
        return None
    return ContentTypeNotSupported(f"Content-Type {storable.brief(sent or '(none)')} is not supported; use {JSON}")


def query_of(raw: str) -> dict[str, str]:
    """A query string's parameters (the last of a name given twice), read the same way under
    daphne and under Django: blank values kept, so `?historyLength=` is refused alike."""
    return dict(parse_qsl(raw, keep_blank_values=True))


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
    """An open event stream, each event framed by its binding."""

    stream: EventStream
    event: Callable[[Any], bytes]  # the `data` of one event's frame
    failure: Callable[[DomainError | None], bytes]  # a last frame for a failure mid-stream (None: a bug)
    headers: dict[str, str] = field(default_factory=dict)

    def all_headers(self) -> dict[str, str]:
        return {**SSE_HEADERS, **self.headers}

    async def frames(self) -> AsyncGenerator[bytes, None]:
        """The SSE frames: `id: <seq>` and the event, comments as heartbeats. A failure
        mid-stream becomes a last event in the binding's error form."""
        yield KEEP_ALIVE  # the headers go out now, not with the agent's first event
        try:
            async for item in self.stream.items:
                if item is None:
                    yield HEARTBEAT
                    continue
                seq, value = item
                yield b"id: %d\ndata: %s\n\n" % (seq, self.event(value))
        except DomainError as exc:
            yield self.failure(exc)
        except streams.Closing as exc:  # a comment: the stream ends, and no event is invented
            yield b": %s\n\n" % str(exc).encode()
        except Exception:  # noqa: BLE001 - e.g. the database went away mid-stream
            log.exception("a stream failed")
            yield self.failure(None)

    async def aclose(self) -> None:
        await self.stream.aclose()


@dataclass(frozen=True)
class Incoming:
    """A request its binding has read: the method of the dialect it calls, with its params."""

    method: str
    params: dict[str, Any]
    id: Any = None  # JSON-RPC's request id, echoed in every answer; None for HTTP+JSON
    dialect: str | None = None  # the dialect, when the binding alone speaks it (AIP's paths)


@dataclass(frozen=True)
class Fault:
    """A refusal that is no dialect's error: the caller (401, 403, 404 for no agent), a limit
    (413, 429), the server (503 while the store is away or the process stops, 500 for a bug),
    or the binding's own reading of a request. `status` is the HTTP status JSON-RPC answers
    with (200 for an error inside a well-formed exchange), `code` its JSON-RPC code; `reason`
    names it for bindings that carry a google.rpc.ErrorInfo (in the agentserver domain)."""

    status: int
    code: int
    message: str
    reason: str
    headers: dict[str, str] = field(default_factory=dict)


class Binding(Protocol):
    name: str  # the card's protocolBinding

    def route(self, request: AgentRequest) -> Any:
        """What the request asks, from its HTTP method and path alone (nothing is looked up and
        the body is not read: this runs before the caller is known), for `read`; or a Reply
        when there is nothing to ask (no such route, another HTTP method)."""
        ...

    def read(self, target: Any, request: AgentRequest) -> Incoming | Reply:
        """The request's method and params (from its Content-Type, body, path and query) once
        the caller is admitted, or the answer to a request that cannot be read."""
        ...

    def result(self, incoming: Incoming, value: Any, headers: dict[str, str], request: AgentRequest) -> Reply: ...

    def fault(self, request_id: Any, fault: Fault, request: AgentRequest) -> Reply: ...

    def error(
        self,
        incoming: Incoming | None,
        exc: DomainError,
        dialect_error: ErrorWriter,
        request: AgentRequest,
        headers: dict[str, str],
    ) -> Reply:
        """A dialect's error (`dialect_error` is how the dialect writes it in JSON-RPC)."""
        ...

    def streamed(
        self,
        incoming: Incoming,
        stream: EventStream,
        dialect_error: ErrorWriter,
        request: AgentRequest,
        headers: dict[str, str],
    ) -> Streamed: ...
