"""An agent's endpoint under daphne, for one binding, as a Channels consumer that can stream.

`AsyncHttpConsumer` stops as soon as `handle()` returns, and while `handle()` runs its
dispatch loop cannot hear the client leave. So the response runs as a task of its own, and
the dispatch loop stays free: an `http.disconnect` (the client left, or daphne finished the
response) cancels that task at once, which closes the stream and releases its feed and hint
registration; nothing outlives the connection.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer
from django.conf import settings

from . import endpoint, hosts, jsonrpc
from .bindings import AgentRequest, Binding, Fault, Reply, base

log = logging.getLogger(__name__)


class AgentConsumer(AsyncHttpConsumer):
    """`AgentConsumer.as_asgi(binding=...)`: the endpoint of one binding."""

    def __init__(self, *args, binding: Binding, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.binding = binding
        self._size = 0
        self._too_big = False
        self._responder: asyncio.Task | None = None

    async def dispatch(self, message) -> None:
        # Channels closes old ORM connections around every message; our database calls
        # (tasks_app.dbcalls) hand theirs back themselves, so skip that thread hop.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    async def http_request(self, message) -> None:
        chunk = message.get("body", b"")
        self._size += len(chunk)
        if self._size > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            self._too_big, self.body = True, []  # keep draining, stop keeping
        elif chunk:
            self.body.append(chunk)
        if not message.get("more_body") and self._responder is None:
            self._responder = asyncio.ensure_future(self._respond(None if self._too_big else b"".join(self.body)))

    async def http_disconnect(self, message) -> None:
        if self._responder is not None and not self._responder.done():
            self._responder.cancel()
            try:
                await self._responder
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - it is going away either way
                pass
        raise StopConsumer()

    def _request(self, body: bytes | None) -> AgentRequest:
        scope = self.scope
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        kwargs = scope["url_route"]["kwargs"]
        base_url, vouched = hosts.base_url_of(
            scope, scheme=scope.get("scheme", "http"), host=headers.get("host", "localhost")
        )
        return AgentRequest(
            tenant=kwargs["tenant"],
            agent=kwargs["agent"],
            http_method=scope["method"],
            headers=headers,
            query=base.query_of(scope.get("query_string", b"").decode("latin-1")),
            body=body,
            base_url=base_url,
            vouched=vouched,
            agent_url=hosts.agent_url_of(scope),
            client=(scope.get("client") or ("",))[0] or "",
            path=kwargs.get("path", ""),
        )

    async def _respond(self, body: bytes | None) -> None:
        started = False
        request = self._request(body)
        try:
            outcome = await endpoint.handle(self.binding, request)
            if isinstance(outcome, Reply):
                await self.send_response(outcome.status, outcome.body, headers=_encoded(outcome.all_headers()))
                return
            try:
                await self.send_headers(status=200, headers=_encoded(outcome.all_headers()))
                started = True
                async with aclosing(outcome.frames()) as frames:
                    async for frame in frames:
                        await self.send_body(frame, more_body=True)
                await self.send_body(b"")
            finally:
                await outcome.aclose()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - answer something rather than leave the client hanging
            log.exception("agent endpoint %s failed", self.scope.get("path"))
            if not started:
                fault = Fault(500, jsonrpc.INTERNAL_ERROR, base.INTERNAL, "INTERNAL_ERROR")
                reply = self.binding.fault(None, fault, request)
                await self.send_response(reply.status, reply.body, headers=_encoded(reply.all_headers()))
            else:
                await self.send_body(b"")


def _encoded(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
