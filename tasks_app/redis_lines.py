"""One bare Redis connection per thread and URL, for the few commands on the hot path.

A command through `redis.Redis` (pool checkout, retry wrapper, health checks) cost ~115 us of
CPU where the bare connection costs ~35 us. The hint's PUBLISH and the run's LPUSH are sent
here: each thread sends on a connection of its own (a new one after a fork: never share a
socket), and a connection that went stale (Redis restarted, an idle timeout) is dropped and
the command sent once more on a fresh one, as the client's own retry would.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis

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
