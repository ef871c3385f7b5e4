"""Celery tasks: thin, id-taking, safe to run twice. Runs are sent by `dispatch`. The periodic
ones (beat) run one at a time across processes (`leases`)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from . import dispatch, liveness, metrics, runhost, runner, services
from .executors import REGISTRY
from .leases import one_at_a_time

log = logging.getLogger(__name__)


@shared_task(name=dispatch.RUN_AGENT, acks_late=True, ignore_result=True)
def run_agent(task_id: str, run_token: str) -> str:
    return runner.run(task_id=task_id, run_token=run_token)


@shared_task(name=dispatch.RUN_AGENT_ASYNC, acks_late=True, ignore_result=True)
def run_agent_async(task_id: str, run_token: str) -> str:
    """An async executor's run, on the run host: this pool thread waits while the run's
    coroutine waits on the process's loop (tasks_app/runhost.py)."""
    return runhost.call(runner.run_async, task_id=task_id, run_token=run_token)


@shared_task(name=dispatch.FORWARD_CANCEL, acks_late=True, ignore_result=True)
def forward_cancel(task_id: str) -> str:
    return runner.forward_cancel(task_id=task_id)


@shared_task(name=dispatch.EXPIRE_AWAITING, acks_late=True, ignore_result=True)
def expire_awaiting(task_id: str) -> str:
    return services.task_expire_awaiting(task_id=task_id)


@shared_task(ignore_result=True)
@one_at_a_time("sweep-awaiting")
def sweep_awaiting() -> int:
    """Close the tasks that waited on their clients longer than they allowed."""
    closed = services.awaiting_expire_due()
    metrics.SWEEPS.labels("timed-out").inc(closed)
    return closed


@shared_task(ignore_result=True)
@one_at_a_time("sweep-stuck-work")
def sweep_stuck_work() -> dict[str, int]:
    unclaimed, failed = services.sweep_stuck_work(
        unclaimed_after=settings.SWEEP_UNCLAIMED_AFTER,
        lost_after=settings.AGENT_TIME_LIMIT + settings.SWEEP_LOST_GRACE,
        retries=settings.AGENT_RUN_RETRIES,
        rerunnable={name for name, executor in REGISTRY.items() if executor.rerunnable},
    )
    for task_id, token in unclaimed:
        dispatch.enqueue_run(task_id=task_id, run_token=token)
    metrics.SWEEPS.labels("run-sent-again").inc(len(unclaimed))
    metrics.SWEEPS.labels("lost-run-failed").inc(failed)
    if unclaimed or failed:
        log.info("sweeper: re-enqueued %d, failed %d lost runs", len(unclaimed), failed)
    return {"requeued": len(unclaimed), "failed": failed}


@shared_task(ignore_result=True)
@one_at_a_time("sweep-lost-runs")
def sweep_lost_runs() -> dict[str, int]:
    """Take the runs of worker processes that stopped beating (tasks_app.liveness)."""
    again, failed = liveness.lost_holders_runs_retake(
        timeout=settings.RUN_LIVENESS_TIMEOUT,
        retries=settings.AGENT_RUN_RETRIES,
        rerunnable={name for name, executor in REGISTRY.items() if executor.rerunnable},
    )
    for task_id, token in again:
        dispatch.enqueue_run(task_id=task_id, run_token=token)
    metrics.SWEEPS.labels("lost-holder-run-sent-again").inc(len(again))
    metrics.SWEEPS.labels("lost-holder-run-failed").inc(failed)
    if again or failed:
        log.warning("liveness: %d runs of lost workers sent again, %d failed", len(again), failed)
    return {"requeued": len(again), "failed": failed}


@shared_task(ignore_result=True)
@one_at_a_time("count-stored-bytes")
def count_stored_bytes() -> dict[str, int]:
    """The tenants' stored-bytes counters, which their storage quotas are checked against."""
    return services.stored_bytes_count(
        settle=settings.STORAGE_COUNT_SETTLE, recount_every=settings.STORAGE_RECOUNT_EVERY
    )
