"""Runs whose holder is gone, taken back within seconds.

A run's holder (tasks_app.holders) beats every RUN_HEARTBEAT_EVERY seconds. A holder is lost
when its last beat is RUN_LIVENESS_TIMEOUT behind both Postgres's now and the freshest beat of
any holder: when Postgres itself was away, or every holder was stopped at once, no holder is
behind another and none is robbed; the one that stays silent once the others beat again is.
A claimed run whose holder never beat counts from its claim.

A lost holder's runs are handled as the sweeper handles a run lost past its hard time limit
(services.sweep_stuck_work): an executor that may run again gets a fresh token, which fences
the old holder (a write it makes later, after a SIGCONT say, names the old token and is
refused), up to AGENT_RUN_RETRIES times per run; any other is failed `worker-lost`, since the
agent may have acted already. Every step is a compare-and-set on the run's token, so a run that
finished meanwhile keeps its outcome, and taking a run twice (two sweeps at once) changes
nothing the second time.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import timedelta
from typing import Any

from django.db.models import Max
from django.db.models.functions import Now

from . import services
from .lifecycle import Failure
from .models import ACTIVE_STATES, RunHolder, Task

# Holders silent this long are forgotten (no run can still name one: it was taken long before).
FORGET_AFTER = timedelta(days=1)


def lost_holders_runs_retake(
    *, timeout: float, retries: int, rerunnable: Collection[str]
) -> tuple[list[tuple[Any, uuid.UUID]], int]:
    """Take the runs of lost holders: the (task id, fresh token) pairs to enqueue, and how many
    tasks were failed `worker-lost`. Nothing while liveness is off (timeout 0)."""
    if not timeout:
        return [], 0
    beats = RunHolder.objects.aggregate(freshest=Max("beat_at"), now=Max(Now()))
    if beats["freshest"] is None:  # no process beats here (liveness is off, or nothing ran yet)
        return [], 0
    horizon = min(beats["now"], beats["freshest"]) - timedelta(seconds=timeout)
    # The claimed runs are few (at most the workers' concurrency), found through tasks_task_runs.
    claimed = list(
        Task.objects.filter(
            state__in=ACTIVE_STATES, run_token__isnull=False, run_claimed_at__isnull=False, run_holder__isnull=False
        ).values_list("id", "run_token", "run_retries", "agent__executor", "run_holder", "run_claimed_at")[:500]
    )
    if not claimed:
        RunHolder.objects.filter(beat_at__lt=beats["now"] - FORGET_AFTER).delete()
        return [], 0
    last_beat = dict(RunHolder.objects.filter(pk__in={c[4] for c in claimed}).values_list("id", "beat_at"))
    again: list[tuple[Any, uuid.UUID]] = []
    failed = 0
    for task_id, token, tried, executor, holder, claimed_at in claimed:
        # The filter above leaves neither None; a holder that never beat counts from the claim.
        if last_beat.get(holder, claimed_at) >= horizon:  # type: ignore[arg-type]
            continue
        if executor in rerunnable and tried < retries:
            fresh = services.run_again(task_id=task_id, run_token=token, retries=retries)
            if fresh is not None:
                again.append((task_id, fresh))
            continue
        reason = "the worker running this task stopped answering" + (f" ({tried + 1} runs)" if tried else "")
        failed += services.run_fail(task_id=task_id, run_token=token, failure=Failure.WORKER_LOST, reason=reason)
    return again, failed
