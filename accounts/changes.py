"""Cached authentication data is dropped everywhere as soon as what it was read from changes.

Web processes cache agents, keys and issuers for a few seconds (`selectors`). A change to any
of them (a save, a delete, a revocation) is announced after it commits: this process's caches
are cleared at once and a PUBLISH on Redis tells every other process, whose subscriber thread
clears theirs. A process trusts its caches only while that subscription is live, so a lost
connection costs lookups, never a revoked key that keeps working.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import Model
from django.db.models.signals import m2m_changed, post_delete, post_save

log = logging.getLogger(__name__)


def channel() -> str:
    """Where changes are announced, in this deployment's namespace (settings.REDIS_CHANNEL_PREFIX)."""
    return f"{settings.REDIS_CHANNEL_PREFIX}accounts:changed"


_clearers: list[Callable[[], None]] = []
_lock = threading.Lock()
_subscriber: tuple[int, threading.Thread] | None = None  # (pid, thread): a forked child starts its own
_live = threading.Event()


def on_change(clear: Callable[[], None]) -> None:
    """Register a cache's `clear`, called on every announced change."""
    _clearers.append(clear)


def _clear_local() -> None:
    for clear in _clearers:
        clear()


def announce() -> None:
    """Drop cached authentication data here and, through Redis, in every other process."""
    _clear_local()
    if not settings.REDIS_URL:
        return
    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.publish(channel(), b"1")
        finally:
            client.close()
    except redis.RedisError as exc:
        # Other processes stop trusting their caches when they lose Redis; if they did not,
        # their entries still expire within AUTH_CACHE_SECONDS.
        log.warning("accounts change not announced on Redis: %s", exc)


def announce_on_commit() -> None:
    # Cleared now too: a request that reads before the commit may cache the old row, and the
    # announcement after the commit clears it again.
    _clear_local()
    transaction.on_commit(announce, robust=True)


def caches_usable() -> bool:
    """Whether cached authentication data may be served: only while this process hears of
    every change, and with AUTH_CACHE_SECONDS set."""
    return settings.AUTH_CACHE_SECONDS > 0 and hears_every_change()


def hears_every_change() -> bool:
    """Whether this process hears of every change announced anywhere (its subscription is
    live): only then may it keep what an announced change makes stale. Without Redis (the
    embedded mode) it never does: another process (a management command) could not tell it."""
    if not settings.REDIS_URL:
        return False
    _ensure_subscribed()
    return _live.is_set()


def _ensure_subscribed() -> None:
    global _subscriber
    current = _subscriber
    if current is not None and current[0] == os.getpid():
        return
    with _lock:
        if _subscriber is not None and _subscriber[0] == os.getpid():
            return
        _live.clear()
        thread = threading.Thread(target=_listen, name="accounts-changes", daemon=True)
        _subscriber = (os.getpid(), thread)
        thread.start()


def _listen() -> None:
    backoff = 0.2
    while True:
        try:
            client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, health_check_interval=15)
            pubsub = client.pubsub()
            pubsub.subscribe(channel())
            while True:
                message = pubsub.get_message(timeout=5)
                if message is None:
                    pubsub.ping()  # a dead connection shows itself here, within seconds
                    continue
                if message["type"] == "subscribe":
                    _clear_local()  # whatever was cached before may have missed a change
                    _live.set()
                    backoff = 0.2
                elif message["type"] == "message":
                    _clear_local()
        except Exception as exc:  # noqa: BLE001 - keep listening whatever went wrong
            _live.clear()
            _clear_local()
            log.warning("accounts change listener lost Redis (%s); retrying in %.1fs", exc, backoff)
            time.sleep(backoff)
            backoff = min(backoff * 2, 5.0)


def _changed(sender, **kwargs) -> None:
    announce_on_commit()


def connect_signals(*models: type[Model]) -> None:
    """Announce every save and delete of these models (and changes to their many-to-many sets)."""
    for model in models:
        post_save.connect(_changed, sender=model, dispatch_uid=f"accounts-changed-save-{model.__name__}")
        post_delete.connect(_changed, sender=model, dispatch_uid=f"accounts-changed-delete-{model.__name__}")
        for field in model._meta.many_to_many:
            m2m_changed.connect(
                _changed, sender=field.remote_field.through, dispatch_uid=f"accounts-changed-m2m-{model.__name__}"
            )
