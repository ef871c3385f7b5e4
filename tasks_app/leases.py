"""Leases: a periodic job runs in one process at a time, across every worker.

Beat sends each sweep on its schedule. Two beats (a rolling deploy, a scaled beat), or a sweep
that outlasts its interval, would have two workers sweep at once: each would send the same
unclaimed run again. So each sweep first takes a lease named after its beat entry: a Redis key
set only while absent and with an expiry (SET NX PX, through redis-py's `Lock`), deleted only
by the token that set it (its compare-and-delete script), so a holder whose lease ran out
cannot end the next holder's. A holder that dies without releasing blocks the job until the
expiry, SWEEP_LEASE_SECONDS. Without Redis (the embedded mode: one process) a
`threading.Lock` per name does the same within the process.

Sweepers live in tasks_app, push and registry; this module sits in tasks_app, the lowest of
them, so each may import it (tests/test_imports.py).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.exceptions import LockNotOwnedError
from redis.lock import Lock
from redis.retry import Retry

from . import metrics

log = logging.getLogger(__name__)

KEY_PREFIX = "agentserver:lease:"
# What a periodic job returns when another process holds its lease.
SKIPPED = "skipped"

_guard = threading.Lock()
_clients: dict[str, redis.Redis] = {}
_in_process: dict[str, threading.Lock] = {}

P = ParamSpec("P")
R = TypeVar("R")


def _client(url: str) -> redis.Redis:
    with _guard:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = redis.Redis.from_url(
                url,
                socket_timeout=2,
                socket_connect_timeout=2,
                # One retry for a pooled connection that went stale (Redis restarted); more, with
                # backoff, would only hold the sweep back while Redis is down.
                retry=Retry(NoBackoff(), 1),
                health_check_interval=30,
            )
        return client


@contextmanager
def lease(name: str, *, seconds: float) -> Iterator[bool]:
    """Hold the lease `name` while the block runs, for `seconds` at most; yields whether this
    caller holds it. Held elsewhere: False at once, without waiting."""
    if seconds <= 0:
        raise ValueError("a lease needs a positive timeout, or a dead holder would keep it for good")
    if not settings.REDIS_URL:
        with _in_process_lock(name) as held:
            yield held
        return
    lock = _client(settings.REDIS_URL).lock(KEY_PREFIX + name, timeout=seconds, blocking=False, thread_local=False)
    try:
        held = owned = lock.acquire()
    except redis.RedisError as exc:
        # Run anyway. Every step of a sweep is a compare-and-set on the store, so two at once
        # cost duplicate messages at worst; skipping every sweep while Redis is down would
        # leave unclaimed runs and stalled deliveries where they are until it is back.
        log.warning("lease %s not taken, Redis did not answer (%s): running without it", name, exc)
        held, owned = True, False
    try:
        yield held
    finally:
        if owned:
            _release(lock, name)


@contextmanager
def _in_process_lock(name: str) -> Iterator[bool]:
    with _guard:
        lock = _in_process.setdefault(name, threading.Lock())
    held = lock.acquire(blocking=False)
    try:
        yield held
    finally:
        if held:
            lock.release()


def _release(lock: Lock, name: str) -> None:
    try:
        lock.release()
    except LockNotOwnedError:
        log.warning(
            "lease %s ran out before its holder finished (raise SWEEP_LEASE_SECONDS): another process may have "
            "run the same job meanwhile",
            name,
        )
    except redis.RedisError as exc:
        log.warning("lease %s not released (%s): it runs out by itself", name, exc)


def one_at_a_time(name: str) -> Callable[[Callable[P, R]], Callable[P, R | str]]:
    """A periodic job that runs under the lease `name` (its beat entry's name), held for at most
    SWEEP_LEASE_SECONDS. A call that finds the lease held elsewhere does nothing, returns
    SKIPPED and is counted in agentserver_sweeps_skipped_total{sweep=name}."""

    def decorate(job: Callable[P, R]) -> Callable[P, R | str]:
        @functools.wraps(job)
        def run(*args: P.args, **kwargs: P.kwargs) -> R | str:
            with lease(name, seconds=settings.SWEEP_LEASE_SECONDS) as held:
                if not held:
                    metrics.SWEEPS_SKIPPED.labels(name).inc()
                    log.info("%s skipped: another process holds its lease", name)
                    return SKIPPED
                return job(*args, **kwargs)

        return run

    return decorate
