"""Bare Redis connections for the few commands on the hot path.

Threads (`connection`, `command`): one connection per thread and URL. A command through
`redis.Redis` (pool checkout, retry wrapper, health checks) cost ~115 us of CPU where the bare
connection costs ~35 us. The hint's PUBLISH and the run's LPUSH are sent here: each thread
sends on a connection of its own (a new one after a fork: never share a socket), and a
connection that went stale (Redis restarted, an idle timeout) is dropped and the command sent
once more on a fresh one, as the client's own retry would.

Event loops (`open_line`): an asyncio connection whose commands are pipelined, packed and
parsed by hiredis: Redis answers in the order it was asked, so each reply goes to the oldest
waiting call; or, given `on_push`, a subscriber's connection that hands each message to it.
redis-py's asyncio client spent ~0.12 ms of CPU per command or message here (a connection
checked out of a pool under a lock, the retry wrapper, a task per `wait_for`); this, a few
microseconds.
"""

from __future__ import annotations

import asyncio
import collections
import os
import ssl
import threading
from collections.abc import Callable, Sequence
from typing import Any

import hiredis
import redis
from redis.connection import SSLConnection, UnixDomainSocketConnection, parse_url

_local = threading.local()


def connection(url: str) -> Any:
    """This thread's connection to `url` (a redis-py connection; None when there is no URL:
    no Redis)."""
    if not url:
        return None
    pid = os.getpid()
    owned: dict[str, Any] | None = getattr(_local, "owned", None)
    if owned is None or owned["pid"] != pid:
        owned = _local.owned = {"pid": pid}
    found = owned.get(url)
    if found is None:
        # A pool only to turn the URL into the right kind of connection; it is not kept.
        factory = redis.ConnectionPool.from_url(
            url, socket_timeout=2, socket_connect_timeout=2, health_check_interval=30
        )
        found = owned[url] = factory.make_connection()
    return found


def command(line: Any, *args: Any) -> Any:
    """Send one command on `line` and read its answer, retrying once on a fresh connection."""
    for attempt in (1, 2):
        try:
            line.send_command(*args)
            return line.read_response()
        except (redis.ConnectionError, redis.TimeoutError):
            line.disconnect()
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class RedisFailed(Exception):
    """Redis answered with an error, or the connection went away under a call."""


class AsyncLine(asyncio.Protocol):
    """One asyncio connection (see the module). Calls wait in `waiting` in the order their
    commands were written; with `on_push`, every reply after the greeting goes to it."""

    def __init__(self, on_push: Callable[[Any], None] | None = None) -> None:
        self.reader = hiredis.Reader()
        self.waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.on_push = on_push
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            if self.waiting:
                future = self.waiting.popleft()
                if not future.done():
                    future.set_result(reply)
            elif self.on_push is not None:
                self.on_push(reply)
            else:  # a reply nobody asked for: the stream is out of step
                self.fail(RedisFailed("an unexpected reply"))
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._fail_waiting(RedisFailed(f"connection lost ({exc or 'closed by Redis'})"))
        if not self.lost.done():
            self.lost.set_result(None)

    @property
    def open(self) -> bool:
        return self.transport is not None

    def send(self, args: Sequence[Any]) -> asyncio.Future[Any]:
        """The future of the reply to one command (its error reply is a `hiredis.ReplyError`)."""
        if self.transport is None:
            raise RedisFailed("connection closed")
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        self.transport.write(hiredis.pack_command(tuple(args)))
        return future

    def write(self, *args: Any) -> None:
        """Send one command whose reply is not waited for (a subscriber's: it comes as a push)."""
        if self.transport is None:
            raise RedisFailed("connection closed")
        self.transport.write(hiredis.pack_command(args))

    async def call(self, *args: Any) -> Any:
        """The reply to one command; RedisFailed on an error reply."""
        reply = await self.send(args)
        if isinstance(reply, hiredis.ReplyError):
            raise RedisFailed(str(reply))
        return reply

    def fail(self, exc: Exception) -> None:
        """Close the connection and fail every call waiting on it."""
        if self.transport is not None:
            self.transport.abort()
            self.transport = None
        self._fail_waiting(exc)

    def _fail_waiting(self, exc: Exception) -> None:
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(exc)


async def open_line(url: str, *, on_push: Callable[[Any], None] | None = None, name: str = "") -> AsyncLine:
    """A connected, authenticated AsyncLine to `url`'s database (redis://, rediss://, unix://),
    named `name` in Redis's CLIENT LIST when given."""
    loop, params = asyncio.get_running_loop(), parse_url(url)
    kind = params.get("connection_class")
    if kind is UnixDomainSocketConnection:
        _, line = await loop.create_unix_connection(lambda: AsyncLine(on_push), params["path"])
    else:
        tls = ssl.create_default_context() if kind is SSLConnection else None
        host, port = params.get("host", "localhost"), params.get("port", 6379)
        _, line = await loop.create_connection(lambda: AsyncLine(on_push), host, port, ssl=tls)
    try:
        if params.get("password") is not None:
            user = params.get("username")
            await line.call(*(("AUTH", user, params["password"]) if user else ("AUTH", params["password"])))
        if params.get("db"):
            await line.call("SELECT", params["db"])
        if name:
            await line.call("CLIENT", "SETNAME", name)
    except BaseException:
        line.fail(RedisFailed("greeting failed"))
        raise
    return line
