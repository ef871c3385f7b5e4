"""Following a task's event log live: what SSE streams read.

The log in Postgres is the truth; hints (see `hints`) only say "read again". Every web process
keeps one `Feed` per task it streams: one hint wakes every local stream of that task, and one
read of the log serves them all, so two hundred clients of one task cost one query per event,
not two hundred. A stream that hears nothing for a heartbeat interval reads anyway, so a lost
hint delays an event by at most one heartbeat and never loses it.

Nothing here holds a database connection between reads (each read is one `dbcalls.run`), and
leaving `follow()` unregisters the stream from its feed and the feed from the hint listener.

When the process shuts down (`close_all`), every stream ends at its next step with `Closing`:
its client resubscribes, with Last-Event-ID, to a process that stays.
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from . import dbcalls, hints, metrics, selectors
from .selectors import LoggedEvent

# The log suffix a feed keeps for its followers; a follower further behind reads for itself.
_CACHE_LIMIT = 1000
_READ_LIMIT = 500


class Feed:
    """One task's log as this process has read it: events with seq > `base`, contiguous."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.followers = 0
        self.base: int | None = None
        self.events: list[LoggedEvent] = []
        self._loop = asyncio.get_running_loop()
        self._pulse: asyncio.Future[None] = self._loop.create_future()
        self._dirty = True
        self._read_started = float("-inf")
        self._reading: asyncio.Future[None] | None = None
        # The feed's registration with the hint listener, held while it has followers.
        self._hints = hints.listener().watch(task_id, self)

    # -- the hint side: the listener calls `_wake` on the event loop ---------------------

    def _wake(self, state: str = "") -> None:
        self._dirty = True
        pulse, self._pulse = self._pulse, self._loop.create_future()
        pulse.set_result(None)

    @property
    def pulse(self) -> asyncio.Future[None]:
        """Resolves at the next hint. Take it *before* reading, so a hint during the read counts."""
        return self._pulse

    # -- the reading side ---------------------------------------------------------------

    @property
    def high(self) -> int | None:
        return None if self.base is None else self.base + len(self.events)

    async def after(self, seq: int, *, fresh_since: float | None = None) -> list[LoggedEvent]:
        """Events with seq > `seq` (at most one read's worth). Reads the log only if a hint
        came since the last read, if the cache does not reach back to `seq`, or if no read
        has started since `fresh_since` (a loop time); concurrent callers share one read."""
        while True:
            if self._reading is not None:
                await asyncio.shield(self._reading)
                continue
            stale = fresh_since is not None and self._read_started < fresh_since
            if self._dirty or stale or self.base is None or seq < self.base:
                self._reading = asyncio.ensure_future(self._read(seq))
                continue
            break
        start = seq - self.base
        return self.events[start : start + _READ_LIMIT]

    async def _read(self, seq: int) -> None:
        try:
            self._dirty = False
            self._read_started = self._loop.time()
            reread = self.base is None or seq < self.base
            after = seq if reread else self.high
            rows = await dbcalls.run(selectors.events_after, self.task_id, after, limit=_READ_LIMIT)
            if reread:
                self.base, self.events = after, rows
            else:
                self.events.extend(rows)
            if len(rows) == _READ_LIMIT:
                self._dirty = True  # more than one read's worth is waiting
            if len(self.events) > _CACHE_LIMIT and self.base is not None:  # (set just above)
                drop = len(self.events) - _CACHE_LIMIT // 2
                self.base += drop
                del self.events[:drop]
        finally:
            self._reading = None


class Closing(Exception):
    """This process is shutting down: the stream ends here, and its client resubscribes."""


_closing = False


def close_all() -> None:
    """End every stream of this process now and every one opened from now on (graceful
    shutdown). Runs on the event loop."""
    global _closing
    _closing = True
    for feeds in list(_feeds.values()):
        for feed in list(feeds.values()):
            feed._wake()


def closing() -> bool:
    return _closing


_feeds: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Feed]] = weakref.WeakKeyDictionary()


def open_feeds() -> dict[str, int]:
    """Followers per task this event loop streams (for tests)."""
    return {tid: f.followers for tid, f in _feeds.get(asyncio.get_running_loop(), {}).items()}


def open_stream_count() -> int:
    return sum(f.followers for feeds in list(_feeds.values()) for f in feeds.values())


@asynccontextmanager
async def follow(task_id: Any) -> AsyncIterator[Feed]:
    """Register as a follower of the task's feed (and the feed for its hints) for the block.
    Enter it before whatever you want to see could be written."""
    task_id = str(task_id)
    feeds = _feeds.setdefault(asyncio.get_running_loop(), {})
    feed = feeds.get(task_id)
    if feed is None:
        feed = feeds[task_id] = Feed(task_id)
        await feed._hints.__aenter__()
    feed.followers += 1
    metrics.OPEN_STREAMS.inc()
    try:
        yield feed
    finally:
        feed.followers -= 1
        metrics.OPEN_STREAMS.dec()
        if feed.followers == 0 and feeds.get(task_id) is feed:
            del feeds[task_id]
            await feed._hints.__aexit__(None, None, None)


async def tail(feed: Feed, *, after: int, heartbeat: float) -> AsyncGenerator[LoggedEvent | None, None]:
    """The task's events after `after`, as they are committed, without end; `None` marks a
    heartbeat interval without news (the caller sends a keep-alive), after which the log
    is read again whether or not a hint came. Raises `Closing` once the process shuts down."""
    loop = asyncio.get_running_loop()
    seq = after
    fresh_since: float | None = loop.time()
    while True:
        if _closing:
            raise Closing(
                "the server is shutting down; resubscribe to the task with the Last-Event-ID of the "
                "last event received to follow it on"
            )
        pulse = feed.pulse
        batch = await feed.after(seq, fresh_since=fresh_since)
        fresh_since = None
        if batch:
            for event in batch:
                yield event
            seq = batch[-1].seq
            continue
        waited_from = loop.time()
        try:
            # Jitter, so that streams opened together do not all read the log at one instant.
            await asyncio.wait_for(asyncio.shield(pulse), heartbeat * random.uniform(0.85, 1.0))
        except TimeoutError:
            yield None
            fresh_since = waited_from
