"""Redis as an advisory store for the edge's limits (the rate limit, the stream slots).

Both are protection, not accounting: when Redis cannot be reached the request goes on (fail
open), a warning is logged at most every `WARN_EVERY` seconds, and for `BACKOFF` seconds after
a failure Redis is not even tried, so a Redis that hangs costs one short timeout now and then,
not one per request.

The client is one pipelined connection per event loop (`per_loop`, `redis_lines.AsyncLine`):
redis-py's asyncio client spent ~0.12 ms of the web process's CPU on each rate-limit check,
11 % of daphne's samples under SendMessage load (py-spy, bench/README.md). A call that times
out or fails drops the connection (a late reply could no longer be matched to its call),
fails every call waiting on it, and the next call after the back-off connects anew. A loop
that ends (asyncio.run, as asgiref runs each request of Django's test client) closes its
connection as it shuts down: `_closed_with_the_loop`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol, TypeVar

from tasks_app import redis_lines

TIMEOUT = 0.25  # seconds: an advisory answer slower than this is not worth waiting for
BACKOFF = 2.0  # seconds without trying Redis after it failed
WARN_EVERY = 10.0


class FailOpen:
    """What a user of Redis says while it is away: one warning at most every WARN_EVERY s."""

    def __init__(self, logger: logging.Logger, what: str, meanwhile: str) -> None:
        self._logger, self._what, self._meanwhile = logger, what, meanwhile
        self.last_warning = 0.0

    def warn(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self.last_warning >= WARN_EVERY:
            self.last_warning = now
            self._logger.warning(
                "%s: Redis unreachable (%s: %s); %s", self._what, type(exc).__name__, exc, self._meanwhile
            )


class Script:
    """A Lua script, run by its SHA1 (EVALSHA) and loaded by EVAL when Redis does not know it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()


class AdvisoryRedis:
    """A Redis client whose calls answer None instead of failing (see the module)."""

    def __init__(self, url: str, failing: FailOpen) -> None:
        self.url = url
        self._failing = failing
        self._down_until = 0.0
        self._line: redis_lines.AsyncLine | None = None
        self._connecting: asyncio.Future[redis_lines.AsyncLine] | None = None
        self._keeper: Any = None

    async def call(self, *args: Any) -> Any | None:
        """The reply to one command, or None when Redis is away (or was, moments ago)."""
        if time.monotonic() < self._down_until:
            return None
        try:
            async with asyncio.timeout(TIMEOUT):
                return await self._call(args)
        except (redis_lines.RedisFailed, OSError, TimeoutError) as exc:
            self._down(exc)
            return None

    async def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any | None:
        """`script`'s reply, or None when Redis is away (or was, moments ago)."""
        if time.monotonic() < self._down_until:
            return None
        try:
            async with asyncio.timeout(TIMEOUT):
                tail = (len(keys), *keys, *args)
                try:
                    return await self._call(("EVALSHA", script.sha, *tail))
                except redis_lines.RedisFailed as exc:
                    if not str(exc).startswith("NOSCRIPT"):
                        raise
                    return await self._call(("EVAL", script.text, *tail))
        except (redis_lines.RedisFailed, OSError, TimeoutError) as exc:
            self._down(exc)
            return None

    async def _call(self, args: Sequence[Any]) -> Any:
        line = self._line if self._line is not None and self._line.open else await self._connect()
        return await line.call(*args)

    async def _connect(self) -> redis_lines.AsyncLine:
        # Calls that find no connection wait for the same attempt rather than each making one.
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(redis_lines.open_line(self.url))
            self._connecting.add_done_callback(self._connected)
        return await asyncio.shield(self._connecting)

    def _connected(self, attempt: asyncio.Future[redis_lines.AsyncLine]) -> None:
        self._connecting = None
        if not attempt.cancelled() and attempt.exception() is None:
            self._line = attempt.result()
            if self._keeper is None:
                self._keeper = self._closed_with_the_loop()
                asyncio.ensure_future(self._keeper.__anext__())  # to its yield: the loop now tracks it

    async def _closed_with_the_loop(self) -> AsyncIterator[None]:
        # An async generator the loop knows of: asyncio.run's shutdown_asyncgens() closes it,
        # and this closes the connection, which would otherwise outlive its loop (a socket per
        # request under Django's test client, until Redis refused new clients).
        try:
            yield
        finally:
            await self.aclose()

    def _down(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + BACKOFF
        if self._line is not None:
            self._line.fail(redis_lines.RedisFailed("dropped after a failed call"))
            self._line = None
        self._failing.warn(exc)

    async def aclose(self) -> None:
        if self._line is not None:
            self._line.fail(redis_lines.RedisFailed("closed"))
            self._line = None


class _OnUrl(Protocol):
    url: str


T = TypeVar("T", bound=_OnUrl)


def per_loop(cache: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T], url: str, make: Callable[[str], T]) -> T:
    """This event loop's client of `url`, made once (again when the setting changed)."""
    loop = asyncio.get_running_loop()
    current = cache.get(loop)
    if current is None or current.url != url:
        current = cache[loop] = make(url)
    return current
