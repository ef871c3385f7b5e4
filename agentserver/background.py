"""Background work on threads of this process: the embedded mode's worker and beat.

With `BACKGROUND_WORK=threads` (the embedded mode's default) there is no broker and no worker
process. Every Celery job the server would publish (an agent's run, a push delivery, an AIP
timeout, a registry check) is handed to a bounded pool of threads here instead, after its
countdown, and beat's schedule runs on a timer thread of the web process. The jobs are the
same Celery tasks, run through `Task.apply`, so their signals fire as in a worker; each
announces what it committed through the in-process wake-ups (tasks_app.hints), which reach the
streams and blocking requests of this process at once.

What the workers guarantee holds here too, because it comes from the store and not from
Celery: a run is claimed once, by compare-and-set; a run that was committed but never started
(the process stopped first) is sent again by the sweeper when the server is back; a soft time
limit stops a runaway agent (here by raising `SoftTimeLimitExceeded` in its thread, which
the runner turns into a failed task). There is no hard limit: a thread cannot be killed, so an
agent stuck in C code or a blocking call without a timeout holds its thread until it returns.
"""

from __future__ import annotations

import ctypes
import functools
import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from celery.result import AsyncResult
from celery.schedules import schedule as interval_schedule
from django.conf import settings
from django.db import close_old_connections

log = logging.getLogger(__name__)


class ThreadTask(Task):
    """A Celery task whose publish hands it to this process's threads (`submit`)."""

    def apply_async(  # type: ignore[override]
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        *_: Any,
        countdown: float | None = None,
        eta: Any = None,
        soft_time_limit: float | None = None,
        **options: Any,
    ) -> AsyncResult:
        delay = countdown or 0.0
        if eta is not None:
            delay = max(0.0, eta.timestamp() - time.time())
        job_id = task_id or f"thread-{next(_ids)}"
        jobs().submit(
            lambda: self.apply(args, kwargs, task_id=job_id),
            delay=delay,
            soft_time_limit=soft_time_limit,
            name=self.name,
        )
        return AsyncResult(job_id, app=self.app)


_ids = itertools.count(1)


class Jobs:
    """A pool of threads for jobs, and one timer thread for those due later and for beat."""

    def __init__(self, *, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="background")
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._stopped = False
        self._running: dict[int, str] = {}  # thread ident -> the job's name
        self._running_lock = threading.Lock()
        self._timer = threading.Thread(target=self._tick, name="background-timer", daemon=True)
        self._timer.start()

    # --- handing work out ---------------------------------------------------------------

    def submit(
        self, job: Callable[[], Any], *, delay: float = 0.0, soft_time_limit: float | None = None, name: str = ""
    ) -> None:
        """Run `job` on a pool thread, after `delay` seconds. Dropped once stopping: what it
        would have done is committed work the sweepers find again."""
        if delay > 0:
            self._at(time.monotonic() + delay, lambda: self.submit(job, soft_time_limit=soft_time_limit, name=name))
            return
        if self._stopped:
            log.info("not starting %s: the process is stopping (the sweeper will send it again)", name)
            return
        try:
            self._pool.submit(self._run, job, soft_time_limit, name)
        except RuntimeError:  # the pool shut down between the check and the submit
            log.info("not starting %s: the process is stopping", name)

    def every(self, seconds: float, job: Callable[[], Any], *, name: str) -> None:
        """Submit `job` every `seconds`, the first time `seconds` from now (as beat does)."""

        def again() -> None:
            self.submit(job, name=name)
            self._at(time.monotonic() + seconds, again)

        self._at(time.monotonic() + seconds, again)

    def stop(self) -> None:
        """Start no more jobs; those running finish (the interpreter waits for them at exit)."""
        with self._wake:
            self._stopped = True
            self._due.clear()
            self._wake.notify()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def running(self) -> list[str]:
        with self._running_lock:
            return list(self._running.values())

    # --- the threads ----------------------------------------------------------------------

    def _at(self, when: float, call: Callable[[], None]) -> None:
        with self._wake:
            if self._stopped:
                return
            heapq.heappush(self._due, (when, next(self._order), call))
            self._wake.notify()

    def _tick(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and (not self._due or self._due[0][0] > time.monotonic()):
                    self._wake.wait(self._due[0][0] - time.monotonic() if self._due else None)
                if self._stopped:
                    return
                _, _, call = heapq.heappop(self._due)
            try:
                call()
            except Exception:  # noqa: BLE001 - the timer thread must outlive any one job
                log.exception("background timer: a scheduled call failed")

    def _run(self, job: Callable[[], Any], soft_time_limit: float | None, name: str) -> None:
        ident = threading.get_ident()
        limit = None
        try:
            with self._running_lock:
                self._running[ident] = name
            if soft_time_limit:
                limit = threading.Timer(soft_time_limit, self._interrupt, (ident, name))
                limit.daemon = True
                limit.start()
            close_old_connections()
            job()
        except SoftTimeLimitExceeded:  # raised after the job had finished its own handling
            log.warning("%s: the time limit came as the job ended", name)
        except Exception:  # noqa: BLE001 - Task.apply keeps a task's own exception; this is ours
            log.exception("background job %s failed", name)
        finally:
            try:
                with self._running_lock:
                    self._running.pop(ident, None)
                if limit is not None:
                    limit.cancel()
            except SoftTimeLimitExceeded:  # delivered in the instant between the end and the pop
                with self._running_lock:
                    self._running.pop(ident, None)
            # A job's connections are its thread's; the next job on this thread opens its own.
            close_old_connections()

    def _interrupt(self, ident: int, name: str) -> None:
        """The soft time limit: raise SoftTimeLimitExceeded in the job's thread (at its next
        Python instruction), as Celery's SIGUSR1 would in a worker child."""
        with self._running_lock:
            if self._running.get(ident) != name:
                return
            done = ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(ident), ctypes.py_object(SoftTimeLimitExceeded)
            )
        if done != 1:
            log.warning("%s: could not interrupt its thread at the time limit", name)


_jobs: Jobs | None = None
_jobs_pid = 0
_jobs_lock = threading.Lock()


def jobs() -> Jobs:
    """This process's pool, made on first use (in any process: a management command's jobs
    run too, and the interpreter waits for them before it exits)."""
    global _jobs, _jobs_pid
    with _jobs_lock:
        if _jobs is None or _jobs_pid != os.getpid():
            _jobs, _jobs_pid = Jobs(threads=settings.BACKGROUND_THREADS), os.getpid()
        return _jobs


def start_beat(app: Any) -> int:
    """Run beat's schedule (CELERY_BEAT_SCHEDULE) on this process's threads; the number of
    entries scheduled. Called by the web process of the embedded mode, once."""
    scheduled = 0
    for name, entry in app.conf.beat_schedule.items():
        seconds = _interval(entry["schedule"])
        if seconds is None:
            log.warning("beat entry %s: only intervals run in-process, not %r", name, entry["schedule"])
            continue
        jobs().every(seconds, functools.partial(_beat, app, entry), name=name)
        scheduled += 1
    return scheduled


def _beat(app: Any, entry: dict[str, Any]) -> None:
    app.tasks[entry["task"]].apply(tuple(entry.get("args", ())), dict(entry.get("kwargs", {})))


def _interval(value: Any) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if type(value) is interval_schedule:  # crontab and solar subclass it with other meanings
        return value.run_every.total_seconds()
    return None


def stop() -> None:
    """Start no more background work (a graceful stop): called on SIGTERM."""
    if _jobs is not None and _jobs_pid == os.getpid():
        _jobs.stop()
