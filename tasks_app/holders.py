"""The process that holds runs, and its heartbeat.

Each process that claims runs (a Celery worker's prefork child; the embedded mode's web
process) has an id of its own, made after the fork, which every claim writes into the task
(`Task.run_holder`). A thread of the process, and only of it, writes `RunHolder.beat_at` every
RUN_HEARTBEAT_EVERY seconds with Postgres's clock, so that the hosts' clocks never matter.
A process killed (SIGKILL, OOM) or stopped (SIGSTOP, a hung host) stops beating; one that is
only busy does not, since the beat is on its own thread: a long run, a slow agent or a GC pause
of a few seconds leaves it beating. `tasks_app.liveness` takes the runs of a holder that fell
behind.

Beats are one or two statements each on the thread's own connection, which it keeps; a failed one is logged now and
then and tried again at the next beat (a Postgres that is away stops every holder's beats
alike, which `liveness` reads as no loss at all).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models.functions import Now

from .models import RunHolder

log = logging.getLogger(__name__)

_lock = threading.Lock()
_holder: tuple[int, uuid.UUID] | None = None  # (pid, id): a forked child makes its own
_heart: tuple[int, threading.Thread] | None = None


def holder_id() -> uuid.UUID:
    """This process's id as a holder of runs (a new one in each forked process)."""
    global _holder
    pid = os.getpid()
    held = _holder
    if held is None or held[0] != pid:
        with _lock:
            if _holder is None or _holder[0] != pid:
                _holder = (pid, uuid.uuid4())
            held = _holder
    return held[1]


def beat() -> None:
    """Say that this process is alive now (Postgres's now)."""
    holder = holder_id()
    if not RunHolder.objects.filter(pk=holder).update(beat_at=Now()):
        RunHolder.objects.create(
            id=holder, host=socket.gethostname()[:255], pid=os.getpid(), started_at=Now(), beat_at=Now()
        )


def claiming() -> uuid.UUID:
    """This process's id, for a claim: the process beats from now on, whatever runs it (a
    prefork child starts at its fork; a solo or threads pool, a test, at its first claim)."""
    heart = _heart
    if heart is None or heart[0] != os.getpid():
        start_heartbeat()
    return holder_id()


def start_heartbeat() -> bool:
    """Beat now and then every RUN_HEARTBEAT_EVERY seconds, on a daemon thread of this process;
    False if it already beats, or liveness is off (RUN_LIVENESS_TIMEOUT = 0)."""
    global _heart
    if not settings.RUN_LIVENESS_TIMEOUT:
        return False
    pid = os.getpid()
    with _lock:
        if _heart is not None and _heart[0] == pid and _heart[1].is_alive():
            return False
        thread = threading.Thread(target=_beating, args=(settings.RUN_HEARTBEAT_EVERY,), daemon=True)
        thread.name = "agentserver-heartbeat"
        _heart = (pid, thread)
    thread.start()
    return True


def _beating(every: float) -> None:
    warned = 0.0
    while True:
        started = time.monotonic()
        try:
            beat()
        except DatabaseError as exc:
            if started - warned > 60:
                log.warning("the run holder's heartbeat failed (%s); trying again", str(exc).strip())
                warned = started
            connection.close()  # a broken session is given up; the next beat opens another
        except Exception:  # noqa: BLE001 - the heartbeat must outlive any one failure
            log.exception("the run holder's heartbeat failed")
        time.sleep(max(0.0, every - (time.monotonic() - started)))
