"""The run host: one asyncio loop per process on which async executors' runs wait.

A run of an async executor (`async def execute(ctx)`) is a coroutine on this loop. Its
Celery task (tasks.run_agent_async, on ASYNC_RUNS_QUEUE, in a worker with the threads pool)
hands the run over and waits for its outcome, so Celery acknowledges the message only once the
outcome is durable, as with a prefork run. The context's verbs are service calls on the bounded
DB threads (tasks_app.dbcalls): a waiting run holds neither a connection nor a DB thread, only
its coroutine and the pool thread that waits for it.

Every run registers here while it executes (`hosted`), so that a warm shutdown can give the
runs in flight `SHUTDOWN_GRACE` seconds and then cut the rest (`drain`): each is cancelled and
hands its task back (tasks_app.runner).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connections

log = logging.getLogger(__name__)

T = TypeVar("T")

CLOSED = "closed"  # the task was closed (canceled) behind the run's back
SHUTDOWN = "shutdown"  # the process is stopping and the run's grace is over


@dataclass
class Stop:
    """Why a run's coroutine was cancelled from outside it ("" while nobody did)."""

    why: str = ""


_lock = threading.Lock()
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop): a forked child makes its own
_runs: dict[asyncio.Task, Stop] = {}
_cut = False  # the shutdown's grace is over: runs still starting hand back at once
_sync_threads: tuple[int, ThreadPoolExecutor] | None = None


def loop() -> asyncio.AbstractEventLoop:
    """This process's run loop, on a daemon thread of its own (started on first use)."""
    global _loop
    pid = os.getpid()
    current = _loop
    if current is None or current[0] != pid:
        with _lock:
            if _loop is None or _loop[0] != pid:
                made = asyncio.new_event_loop()
                threading.Thread(target=made.run_forever, name="run-host", daemon=True).start()
                _loop = (pid, made)
            current = _loop
    return current[1]


def call(fn: Callable[..., Coroutine[Any, Any, T]], /, **kwargs: Any) -> T:
    """Run the coroutine `fn(**kwargs)` on this process's run loop and wait for its result.
    With DB_THREADS=0 (the in-process tests) the ORM calls must come back to the caller's
    thread, which holds the test's transaction: the coroutine runs on a loop of its own there."""
    if settings.DB_THREADS <= 0:
        return async_to_sync(fn)(**kwargs)
    future = asyncio.run_coroutine_threadsafe(fn(**kwargs), loop())
    try:
        return future.result()
    except BaseException:
        # The waiting thread was interrupted (a prefork child's soft time limit, a shutdown):
        # the run stops too, rather than go on with nobody waiting for it.
        future.cancel()
        raise


@contextmanager
def hosted() -> Iterator[Stop]:
    """Register the current run (its asyncio task) for the shutdown to find; its `Stop`."""
    task = asyncio.current_task()
    assert task is not None
    stop = Stop(SHUTDOWN if _cut else "")
    with _lock:
        _runs[task] = stop
    try:
        yield stop
    finally:
        with _lock:
            _runs.pop(task, None)


def stop_run(task: asyncio.Task, stop: Stop, why: str) -> None:
    """Cancel a run's coroutine, saying why (on the run's own loop)."""
    if not stop.why and not task.done():
        stop.why = why
        task.cancel()


def in_flight() -> int:
    with _lock:
        return len(_runs)


def drain(grace: float) -> threading.Timer:
    """Start the shutdown: after `grace` seconds, cut every run still in flight (each hands its
    task back) and any that starts later. Celery's warm shutdown then waits for the pool
    threads, which return once their runs' outcomes are recorded."""
    if in_flight():
        log.info("run host: %d runs in flight; those not done in %g s will be handed back", in_flight(), grace)
    timer = threading.Timer(grace, cut)
    timer.daemon = True
    timer.start()
    return timer


def cut() -> None:
    global _cut
    with _lock:
        _cut = True
        runs = list(_runs.items())
    if runs:
        log.warning("run host: handing back %d runs still in flight", len(runs))
    for task, stop in runs:
        try:
            task.get_loop().call_soon_threadsafe(stop_run, task, stop, SHUTDOWN)
        except RuntimeError:  # its loop closed: the run is over
            pass


def reset() -> None:
    """Forget a finished shutdown (tests)."""
    global _cut
    _cut = False


async def in_thread(fn: Callable[..., T], /, *args: Any) -> T:
    """Run a sync executor's run that came to the run host (a run sent before its agent's
    executor changed) on a few threads of its own, each giving its connection back after."""
    global _sync_threads
    pid = os.getpid()
    with _lock:
        if _sync_threads is None or _sync_threads[0] != pid:
            _sync_threads = (pid, ThreadPoolExecutor(max_workers=2, thread_name_prefix="run-host-sync"))
        threads = _sync_threads[1]

    def run() -> T:
        try:
            return fn(*args)
        finally:
            connections.close_all()

    return await asyncio.get_running_loop().run_in_executor(threads, run)
