"""Redis as an advisory store for the edge's limits (the rate limit, the stream slots).

Both are protection, not accounting: when Redis cannot be reached the request goes on (fail
open), a warning is logged at most every `WARN_EVERY` seconds, and for `BACKOFF` seconds after
a failure Redis is not even tried, so a Redis that hangs costs one short timeout now and then,
not one per request. An asyncio Redis client belongs to the loop it first connected on: each
event loop has its own (`per_loop`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

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


class AdvisoryRedis:
    """A Redis client whose calls answer None instead of failing (see the module)."""

    def __init__(self, url: str, failing: FailOpen) -> None:
        self.url = url
        self.client = aioredis.Redis.from_url(
            url,
            socket_timeout=TIMEOUT,
            socket_connect_timeout=TIMEOUT,
            retry=Retry(NoBackoff(), 0),  # a retry would double the wait; the next request tries again
            health_check_interval=30,
        )
        self._failing = failing
        self._down_until = 0.0

    async def run(self, call: Callable[[], Awaitable[Any]]) -> Any | None:
        """`call`'s answer, or None when Redis is away (or was, moments ago)."""
        if time.monotonic() < self._down_until:
            return None
        try:
            return await asyncio.wait_for(call(), TIMEOUT * 2)
        except (RedisError, OSError, TimeoutError) as exc:
            self._down_until = time.monotonic() + BACKOFF
            self._failing.warn(exc)
            return None

    async def aclose(self) -> None:
        await self.client.aclose()


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
