"""The cap on open SSE streams per caller (STREAM_MAX_PER_CALLER, a tenant's
`max_streams_per_caller`), shared by every web process through Redis.

A stream holds a slot for as long as it is open: a member of a sorted set per caller and
tenant, scored with the moment it expires. The stream renews it as it goes (at least once a
heartbeat interval: an idle stream yields a keep-alive that often), and gives it back when it
ends. A process killed with streams open cannot give theirs back: they expire `ttl()` seconds
after their last renewal, so a crash costs its callers their slots for under a minute.

The caller is the rate limit's (`auth.Caller.identity`): an API key, a bearer subject, or an
anonymous client address, so that one anonymous client cannot take every anonymous client's
streams.

Like the rate limit, Redis is advisory (protocols.advisory): when it cannot be reached a
stream is opened without a slot (fail open, a warning now and then, no retry for a moment). Without Redis (the
embedded mode) the slots are counted in this process.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any, TypeVar

from django.conf import settings

from tasks_app.errors import TooManyStreams

from . import advisory

log = logging.getLogger(__name__)

KEY_PREFIX = "agentserver:streams:"

# KEYS[1]: the caller's set. ARGV: the cap, the slot, its lifetime (ms). Drops expired slots,
# then takes one if there is room: 1, or 0 when the caller is at its cap.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""
# KEYS[1]: the caller's set. ARGV: the slot, its lifetime (ms). Every renewal scores its slot
# now + lifetime, the latest of the set, so the set's own expiry follows it.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""
_TAKE_SCRIPT, _RENEW_SCRIPT = advisory.Script(_TAKE), advisory.Script(_RENEW)


def ttl() -> float:
    """Seconds a slot lives without renewal: three heartbeats and a margin (a stream renews
    at most two heartbeat intervals apart)."""
    return 3 * settings.SSE_HEARTBEAT + 5


def cap_for(tenant: Any) -> int:
    own = getattr(tenant, "max_streams_per_caller", None)
    return settings.STREAM_MAX_PER_CALLER if own is None else own


class _Local:
    """Slots in this process's memory (the embedded mode has one process)."""

    def __init__(self) -> None:
        self._slots: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    async def take(self, key: str, cap: int, slot: str) -> bool:
        now = time.monotonic()
        with self._lock:
            held = {s: until for s, until in self._slots.get(key, {}).items() if until > now}
            if len(held) >= cap:
                self._slots[key] = held
                return False
            held[slot] = now + ttl()
            self._slots[key] = held
        return True

    async def renew(self, key: str, slot: str) -> None:
        with self._lock:
            self._slots.setdefault(key, {})[slot] = time.monotonic() + ttl()

    async def give_back(self, key: str, slot: str) -> None:
        with self._lock:
            held = self._slots.get(key, {})
            held.pop(slot, None)
            if not held:
                self._slots.pop(key, None)


class _Redis:
    """Slots in Redis: one round trip to take, renew or give back. One per event loop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._redis = advisory.AdvisoryRedis(url, FAILING)

    async def take(self, key: str, cap: int, slot: str) -> bool:
        taken = await self._redis.script(_TAKE_SCRIPT, [KEY_PREFIX + key], [cap, slot, int(ttl() * 1000)])
        return taken is None or int(taken) == 1

    async def renew(self, key: str, slot: str) -> None:
        await self._redis.script(_RENEW_SCRIPT, [KEY_PREFIX + key], [slot, int(ttl() * 1000)])

    async def give_back(self, key: str, slot: str) -> None:
        await self._redis.call("ZREM", KEY_PREFIX + key, slot)

    async def aclose(self) -> None:
        await self._redis.aclose()


FAILING = advisory.FailOpen(log, "stream cap", "streams open without a slot")
_local = _Local()
_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Redis] = weakref.WeakKeyDictionary()


def _store() -> _Local | _Redis:
    url = settings.RATE_LIMIT_REDIS_URL
    return advisory.per_loop(_by_loop, url, _Redis) if url else _local


class Slot:
    """A stream's hold on one of its caller's slots; `renewed` keeps it alive."""

    def __init__(self, store: _Local | _Redis | None, key: str, slot: str) -> None:
        self._store, self._key, self._slot = store, key, slot
        self._renewed = time.monotonic()

    async def renew_if_due(self) -> None:
        if self._store is None:
            return
        now = time.monotonic()
        if now - self._renewed >= settings.SSE_HEARTBEAT:
            self._renewed = now
            await self._store.renew(self._key, self._slot)

    async def give_back(self) -> None:
        if self._store is not None:
            await self._store.give_back(self._key, self._slot)


@asynccontextmanager
async def hold(*, tenant: Any, caller: str) -> AsyncIterator[Slot]:
    """A slot for a new stream of `caller` at `tenant` for the block, or TooManyStreams."""
    cap = cap_for(tenant)
    if cap <= 0 or not caller:
        yield Slot(None, "", "")
        return
    store, key, slot = _store(), f"{tenant.pk}:{caller}", uuid.uuid4().hex
    if not await store.take(key, cap, slot):
        wait = settings.STREAM_RETRY_AFTER
        raise TooManyStreams(
            f"{_who(caller)} already {cap} streams open at this tenant, the most a caller may have; "
            f"close one first (retry in {wait} s)",
            retry_after=wait,
        )
    held = Slot(store, key, slot)
    try:
        yield held
    finally:
        # A client that leaves cancels its stream: the slot goes back all the same.
        await asyncio.shield(held.give_back())


def _who(caller: str) -> str:
    if caller.startswith("key:"):
        return "this API key has"
    if caller.startswith("oidc:"):
        return "this bearer token's subject has"
    return "callers without a key from this address have"


T = TypeVar("T")


async def renewing(items: AsyncGenerator[T, None], slot: Slot) -> AsyncGenerator[T, None]:
    """The stream's items, renewing its slot as they pass (a quiet stream yields a keep-alive
    every heartbeat interval, so an open stream renews at least that often)."""
    async with aclosing(items) as source:
        async for item in source:
            await slot.renew_if_due()
            yield item
