"""Request rate limits per caller, shared by every web process through Redis.

Each request counts against its caller's identity (`auth.Caller.identity`: an API key, a
bearer subject, or an anonymous client address) within the agent's tenant, before its body
is looked at. The limit is a number of requests per minute: the tenant's own
(`rate_limit_per_minute`, `anonymous_rate_limit_per_minute`) or the site's default; 0 means
unlimited.

The algorithm is GCRA (a token bucket kept as one timestamp per caller): a caller may spend a
minute's allowance at once and is then admitted at an even N/60 per second, so there is no
window edge at which a fresh window's whole allowance adds to the last one's. In Redis it is
one Lua script, one round trip, with Redis's clock so that processes agree on the time.

Redis is advisory here (protocols.advisory): when it cannot be reached the request is served
(fail open), with a warning now and then and no retry for a moment, so a Redis that hangs
costs at most one short timeout now and then, not one per request. Without Redis (the
embedded mode) an in-process limiter with the same semantics counts for the one process there
is.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings

from . import advisory

log = logging.getLogger(__name__)

PERIOD_US = 60_000_000  # the limits are per minute
KEY_PREFIX = "agentserver:rate:"

# GCRA. ARGV: the limit per minute. Stored per caller: the theoretical arrival time (TAT, in
# microseconds of Redis's clock) and the interval it was reckoned in, so that when a tenant's
# limit changes the requests already counted keep counting as requests, not as time. A
# request is admitted while TAT + interval - now <= one minute. Returns 0 when admitted,
# otherwise the microseconds to wait.
_GCRA = """
local interval = 60000000 / tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local stored = redis.call('HMGET', KEYS[1], 't', 'i')
local tat = now
if stored[1] and tonumber(stored[1]) > now then
    tat = now + (tonumber(stored[1]) - now) * interval / tonumber(stored[2])
end
local wait = tat + interval - 60000000 - now
if wait > 0 then return math.ceil(wait) end
redis.call('HSET', KEYS[1], 't', string.format('%.0f', tat + interval), 'i', string.format('%.3f', interval))
redis.call('PEXPIRE', KEYS[1], math.ceil((tat + interval - now) / 1000) + 1)
return 0
"""
_SCRIPT = advisory.Script(_GCRA)


@dataclass(frozen=True)
class Refused:
    limit: int  # requests per minute
    retry_after: int  # whole seconds, at least 1


def retry_after_seconds(wait_us: float) -> int:
    return max(1, math.ceil(wait_us / 1_000_000))


class Limiter(Protocol):
    async def hit(self, bucket: str, limit: int) -> Refused | None: ...


class LocalLimiter:
    """GCRA in this process's memory (the embedded mode has one process), in whole numbers: a
    bucket keeps its TAT times the limit it was reckoned at, in which unit a request's interval
    is exactly PERIOD_US. Floating-point sums had a full burst's last request land a rounding
    error over the line, refusing it (a limit-1 caller's first request, by the clock's reading)."""

    _PRUNE_AT = 10_000  # buckets; past this, the ones that are full again are dropped

    def __init__(self) -> None:
        self._tats: dict[str, tuple[int, int]] = {}  # bucket -> (TAT x its limit, that limit)
        self._lock = threading.Lock()  # the test client runs requests on several threads

    async def hit(self, bucket: str, limit: int) -> Refused | None:
        return self.hit_at(bucket, limit, time.monotonic_ns() // 1000)

    def hit_at(self, bucket: str, limit: int, now: int) -> Refused | None:
        """`now` in whole microseconds."""
        with self._lock:
            stored, reckoned = self._tats.get(bucket, (0, limit))
            # What is counted keeps counting as requests when the limit changes, as in Redis.
            ahead = stored - now * reckoned
            tat = now * limit + max(ahead, 0)
            wait = tat + PERIOD_US - PERIOD_US * limit - now * limit
            if wait > 0:
                return Refused(limit, retry_after_seconds(wait / limit))
            if len(self._tats) >= self._PRUNE_AT:
                self._tats = {k: v for k, v in self._tats.items() if v[0] > now * v[1]}
            self._tats[bucket] = (tat + PERIOD_US, limit)
        return None


class RedisLimiter:
    """GCRA in Redis: one EVALSHA per request. Use one per event loop (`limiter()`)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._redis = advisory.AdvisoryRedis(url, FAILING)

    async def hit(self, bucket: str, limit: int) -> Refused | None:
        wait = await self._redis.script(_SCRIPT, [KEY_PREFIX + bucket], [limit])
        return Refused(limit, retry_after_seconds(int(wait))) if wait is not None and int(wait) > 0 else None

    async def aclose(self) -> None:
        await self._redis.aclose()


FAILING = advisory.FailOpen(log, "rate limiter", "serving requests unthrottled")
_local = LocalLimiter()
_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RedisLimiter] = weakref.WeakKeyDictionary()


def limiter() -> Limiter:
    """This event loop's limiter: Redis's when the site has Redis, else this process's."""
    url = settings.RATE_LIMIT_REDIS_URL
    return advisory.per_loop(_by_loop, url, RedisLimiter) if url else _local


def limit_for(tenant: Any, identity: str) -> int:
    """Requests per minute allowed to `identity` on `tenant`'s agents (0: unlimited)."""
    if identity.startswith("addr:"):
        own, default = tenant.anonymous_rate_limit_per_minute, settings.ANONYMOUS_RATE_LIMIT_PER_MINUTE
    else:
        own, default = tenant.rate_limit_per_minute, settings.RATE_LIMIT_PER_MINUTE
    return default if own is None else own


async def check(*, tenant: Any, identity: str) -> Refused | None:
    """Count one request of `identity` on `tenant`; how it is refused, or None to serve it."""
    limit = limit_for(tenant, identity)
    if limit <= 0:
        return None
    # Per tenant: an address calling two tenants' public agents has a budget at each.
    return await limiter().hit(f"{tenant.pk}:{identity}", limit)


def describe(identity: str) -> str:
    """Who the limit was counted for, as a client would say it."""
    if identity.startswith("key:"):
        return "this API key"
    if identity.startswith("oidc:"):
        return "this bearer token's subject"
    return "anonymous callers from this address"
