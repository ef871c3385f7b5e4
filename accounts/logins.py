"""Password sign-ins' failures, counted where every web process sees them (Django's cache:
Redis, settings.CACHES), with a lockout per username and per client address.

Both places that take a password use it: the registry's token endpoint
(registry.api.views.TokenView) and the admin's login form (agentserver.admin_login). Before
checking a password they ask `locked`; a wrong password is `failed`, a right one `succeeded`.
After LOGIN_FAILURES_PER_USERNAME failures for one username (LOGIN_FAILURES_PER_ADDRESS from
one address) within LOGIN_FAILURE_WINDOW seconds, that username (address) is refused for
LOGIN_LOCKOUT_SECONDS, even with the right password: a guesser learns nothing from its next
tries. A username is counted whether or not such a user exists, so a lockout tells nothing
about who has an account.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from django.core.cache import cache

PREFIX = "logins"


@dataclass(frozen=True)
class Locked:
    retry_after: int  # seconds until the lockout ends
    of: Literal["username", "address"]

    @property
    def message(self) -> str:
        minutes = max(1, math.ceil(self.retry_after / 60))
        who = "this username" if self.of == "username" else "your address"
        return (
            f"Too many failed sign-ins for {who}: sign-in is refused for {minutes} more "
            f"minute{'s' if minutes != 1 else ''}."
        )


def client_address(request: Any) -> str:
    """The client's address of a Django request (forwarded_client's rule)."""
    meta = getattr(request, "META", request)
    return forwarded_client(str(meta.get("REMOTE_ADDR") or ""), meta.get("HTTP_X_FORWARDED_FOR"))


def forwarded_client(remote: str, forwarded: str | None) -> str:
    """The client's address: the connection's, or with NUM_PROXIES proxies in front, the one the
    nearest of them saw (X-Forwarded-For's NUM_PROXIES-th value from the right): what a client
    writes in the header itself is never taken (the same rule as DRF's throttles). The agent
    endpoints' anonymous rate limit and stream slots count by it too."""
    proxies = settings.NUM_PROXIES
    if proxies > 0 and forwarded:
        hops = [hop.strip() for hop in str(forwarded).split(",")]
        return hops[-min(proxies, len(hops))] or remote
    return remote


def _digest(value: str) -> str:
    # Keys hold no username or address as typed: any length, any character is one short key.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _keys(kind: str, value: str) -> tuple[str, str]:
    digest = _digest(value)
    return f"{PREFIX}:failures:{kind}:{digest}", f"{PREFIX}:locked:{kind}:{digest}"


def _username(username: str) -> str:
    return username.strip().casefold()


def _subjects(username: str, address: str) -> list[tuple[Literal["username", "address"], str, int]]:
    found: list[tuple[Literal["username", "address"], str, int]] = []
    if settings.LOGIN_FAILURES_PER_USERNAME > 0:
        found.append(("username", _username(username), settings.LOGIN_FAILURES_PER_USERNAME))
    if settings.LOGIN_FAILURES_PER_ADDRESS > 0 and address:
        found.append(("address", address, settings.LOGIN_FAILURES_PER_ADDRESS))
    return found


def locked(*, username: str, address: str) -> Locked | None:
    """The lockout that refuses this sign-in now, if any (one cache round trip)."""
    subjects = _subjects(username, address)
    if not subjects:
        return None
    lock_keys = {_keys(kind, value)[1]: kind for kind, value, _limit in subjects}
    found = cache.get_many(list(lock_keys))
    now = time.time()
    worst: Locked | None = None
    for key, until in found.items():
        remaining = math.ceil(float(until) - now)
        if remaining > 0 and (worst is None or remaining > worst.retry_after):
            worst = Locked(retry_after=remaining, of=lock_keys[key])  # type: ignore[arg-type]
    return worst


def failed(*, username: str, address: str) -> Locked | None:
    """Count a wrong password; the lockout it starts, if it reached a limit."""
    window, lockout = settings.LOGIN_FAILURE_WINDOW, settings.LOGIN_LOCKOUT_SECONDS
    started: Locked | None = None
    for kind, value, limit in _subjects(username, address):
        count_key, lock_key = _keys(kind, value)
        cache.add(count_key, 0, timeout=window)
        try:
            count = cache.incr(count_key)
        except ValueError:  # expired between the two calls: this failure starts a new window
            cache.set(count_key, 1, timeout=window)
            count = 1
        if count >= limit:
            cache.set(lock_key, time.time() + lockout, timeout=lockout)
            cache.delete(count_key)
            started = Locked(retry_after=lockout, of=kind)
    return started


def succeeded(*, username: str) -> None:
    """A right password (while not locked out): the username's failures are forgotten. The
    address's are not: one good account must not reset a guesser's count over others."""
    if settings.LOGIN_FAILURES_PER_USERNAME > 0:
        cache.delete(_keys("username", _username(username))[0])
