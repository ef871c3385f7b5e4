"""Readiness: can this process do its work now? Each dependency is asked once, with a short
timeout, on a connection of its own (a probe must not wait behind the requests it judges, nor
take their pooled connections): Postgres (SELECT 1; in the embedded mode SQLite, named so),
Redis (PING), and the worker queue (the broker answers, and the oldest run no worker has taken
is younger than READY_MAX_QUEUE_AGE)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
import redis
from django.conf import settings
from django.db import connections
from django.utils import timezone

from tasks_app import selectors


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float


def _timed(name: str, probe: Callable[[], str]) -> Check:
    started = time.perf_counter()
    try:
        detail, ok = probe(), True
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the probe reports it
        detail, ok = f"{type(exc).__name__}: {str(exc).strip()[:300]}", False
    return Check(name, ok, detail, round(time.perf_counter() - started, 4))


def _postgres() -> str:
    if connections["default"].vendor != "postgresql":
        connections["default"].ensure_connection()  # the embedded mode's SQLite
        return "sqlite"
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    timeout = settings.READY_TIMEOUT
    params["connect_timeout"] = max(1, round(timeout))
    params["options"] = f"-c statement_timeout={int(timeout * 1000)}"
    with psycopg.connect(**params) as conn:
        conn.execute("SELECT 1")
    return "answered"


def _redis() -> str:
    if not settings.REDIS_URL:
        return "not used (the embedded mode)"
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=settings.READY_TIMEOUT, socket_connect_timeout=settings.READY_TIMEOUT
    )
    try:
        client.ping()
    finally:
        client.close()
    return "answered"


def _queue() -> str:
    if settings.BROKER_IS_REDIS and settings.CELERY_BROKER_URL != settings.REDIS_URL:
        client = redis.Redis.from_url(
            settings.CELERY_BROKER_URL,
            socket_timeout=settings.READY_TIMEOUT,
            socket_connect_timeout=settings.READY_TIMEOUT,
        )
        try:
            client.ping()
        finally:
            client.close()
    queue = selectors.run_queue()
    age = (timezone.now() - queue.oldest_requested_at).total_seconds() if queue.oldest_requested_at else 0.0
    limit = settings.READY_MAX_QUEUE_AGE
    if limit and age > limit:
        raise RuntimeError(
            f"the oldest of {queue.depth} queued runs has waited {age:.0f} s for a worker "
            f"(READY_MAX_QUEUE_AGE {limit:g} s)"
        )
    return f"{queue.depth} queued, the oldest {age:.1f} s"


CHECKS: dict[str, Callable[[], str]] = {"postgres": _postgres, "redis": _redis, "queue": _queue}


def database_name() -> str:
    """The store's check is named by what the store is: "postgres", or "sqlite" in the
    embedded mode."""
    vendor = connections["default"].vendor
    return "postgres" if vendor == "postgresql" else vendor


def readiness() -> list[Check]:
    """Every check, in order; the queue's only once the store answered (it reads the store)."""
    found: list[Check] = []
    for name, probe in CHECKS.items():
        if name == "postgres":
            name = database_name()
        if name == "queue" and found and not found[0].ok:
            found.append(Check(name, False, f"not checked: {found[0].name} did not answer", 0.0))
            continue
        found.append(_timed(name, probe))
    return found
