"""Wake-up hints: "task X changed, read it again".

The database is the truth; a hint only shortens a wait. Writers publish after commit (Redis
PUBLISH, and an in-process fan-out so the same process wakes at once, also when there is no
Redis); each web process keeps one Redis pattern subscription and wakes its local waiters.
A waiter always re-reads the database and also re-reads every `HINT_FALLBACK_POLL` seconds,
so a lost hint costs at most that long, never an update.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis
from django.conf import settings

from . import redis_lines

log = logging.getLogger(__name__)


def channel(task_id: str) -> str:
    """The task's hint channel, in this deployment's namespace (settings.REDIS_CHANNEL_PREFIX)."""
    return f"{settings.REDIS_CHANNEL_PREFIX}task:{task_id}"


# Hints published here were already handed to this process's listeners in-process; the
# listener drops their Redis echo, which would cost every local stream one more read.
_ORIGIN = uuid.uuid4().hex[:12]
LISTENER_NAME = f"agentserver-hints-{_ORIGIN}"  # the listener's connection in Redis's CLIENT LIST


def publish(task_id: str, state: str = "", *, local_only: bool = False) -> None:
    """Tell every process that `task_id` changed (and, as a hint, to which state).
    Call only after the change committed. `local_only` is for a task just created: no other
    process can know its id yet, let alone watch it, so the PUBLISH would only cost every
    listener a message to drop."""
    task_id = str(task_id)
    for listener in list(_listeners):
        listener.wake_threadsafe(task_id, state)
    line = None if local_only else redis_lines.connection(settings.REDIS_URL)
    if line is not None:
        try:
            redis_lines.command(line, "PUBLISH", channel(task_id), f"{state}|{_ORIGIN}".encode())
        except redis.RedisError as exc:  # a lost hint costs one poll interval, nothing more
            log.warning("hint for task %s not published: %s", task_id, exc)


class Watch:
    """One waiter's view of one task: `wait()` returns when a hint came or the timeout passed.

    After each `wait()`, `states` holds the states announced by the hints that arrived since
    the previous `wait()` returned, including those that came while the waiter was busy
    elsewhere ("" when a hint said none): a waiter may use them to skip a read that could not
    change its mind, never to decide without reading.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._pending: list[str] = []
        self.states: list[str] = []

    def _wake(self, state: str) -> None:
        self._pending.append(state)
        self._event.set()

    async def wait(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout):  # no task of its own, as wait_for makes
                await self._event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._event.clear()
            self.states, self._pending = self._pending, []


class Listener:
    """The per-event-loop subscriber: one Redis connection for all waiters of a process."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.watches: dict[str, set[Any]] = {}
        self._started = False
        self._ready = asyncio.Event()
        self._runner: asyncio.Task | None = None

    def wake_threadsafe(self, task_id: str, state: str = "") -> None:
        if task_id in self.watches and not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self._wake, task_id, state)
            except RuntimeError:  # loop closed between the check and the call
                pass

    def _wake(self, task_id: str, state: str = "") -> None:
        for watch in self.watches.get(task_id, ()):
            watch._wake(state)

    async def start(self) -> None:
        if not self._started:
            self._started = True
            if settings.REDIS_URL:
                self._runner = asyncio.ensure_future(self._run())
            else:
                self._ready.set()
        if not self._ready.is_set():
            # Waiting for the subscription makes "subscribe, then read the database" hold;
            # if Redis is slow or down, polling covers the gap.
            try:
                await asyncio.wait_for(self._ready.wait(), 1.0)
            except TimeoutError:
                pass

    async def _run(self) -> None:
        backoff = 0.2
        while True:
            line = None
            try:
                line = await redis_lines.open_line(settings.REDIS_URL, on_push=self._pushed, name=LISTENER_NAME)
                # The confirmation comes as a push too: `_pushed` sets `_ready` on it.
                line.write("PSUBSCRIBE", channel("*"))
                backoff = 0.2
                await line.lost
                raise redis_lines.RedisFailed("connection lost")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep listening whatever went wrong
                log.warning("hint listener lost Redis (%s); retrying in %.1fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                if line is not None:
                    line.fail(redis_lines.RedisFailed("listener stopped"))

    def _pushed(self, message: Any) -> None:
        # [b"pmessage", pattern, channel, data] for a hint; [b"psubscribe", pattern, n] once.
        if not isinstance(message, list) or not message:
            return
        if message[0] == b"pmessage" and len(message) == 4:
            state, _, origin = message[3].decode(errors="replace").partition("|")
            if origin != _ORIGIN:
                self._wake(message[2].decode(errors="replace")[len(channel("")) :], state)
        elif message[0] == b"psubscribe":
            self._ready.set()

    @asynccontextmanager
    async def watch(self, task_id: str, watch: Any = None) -> AsyncIterator[Any]:
        """Register `watch` (a `Watch` unless given: anything with `_wake(state)`) for the
        task's hints until the block ends."""
        watch = Watch() if watch is None else watch
        self.watches.setdefault(task_id, set()).add(watch)
        try:
            await self.start()
            yield watch
        finally:
            waiting = self.watches.get(task_id)
            if waiting is not None:
                waiting.discard(watch)
                if not waiting:
                    del self.watches[task_id]


_listeners: weakref.WeakSet[Listener] = weakref.WeakSet()
_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Listener] = weakref.WeakKeyDictionary()


def listener() -> Listener:
    loop = asyncio.get_running_loop()
    current = _by_loop.get(loop)
    if current is None:
        current = Listener(loop)
        _by_loop[loop] = current
        _listeners.add(current)
    return current


def watch(task_id: str):
    """`async with hints.watch(task_id) as w: ... await w.wait(timeout)`."""
    return listener().watch(str(task_id))
