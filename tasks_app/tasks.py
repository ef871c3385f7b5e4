"""Celery tasks: thin, id-taking, safe to run twice."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from . import runner, services
from .executors import REGISTRY

log = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def run_agent(task_id: str, run_token: str) -> str:
    return runner.run(task_id=task_id, run_token=run_token)


def _publish_options() -> dict[str, Any]:
    """Celery publishes a run through the anonymous exchange straight to the queue's Redis
    list, which the workers pop; declaring the queue again on every publish (a copy and a
    bind of the Queue: a third of a publish's Python work) adds nothing there."""
    return {"declare": []} if settings.BROKER_IS_REDIS else {}


def enqueue_run(*, task_id: Any, run_token: Any) -> None:
    """Send one run to the workers. Called after commit; if the broker is down the work stays
    committed and unclaimed, and the sweeper sends it again."""
    args = (str(task_id), str(run_token))
    try:
        run_agent.apply_async(
            args,
            soft_time_limit=settings.AGENT_SOFT_TIME_LIMIT,
            time_limit=settings.AGENT_TIME_LIMIT,
            argsrepr=repr(args),  # Celery's own, through saferepr, costs more than the rest of the message
            kwargsrepr="{}",
            **_publish_options(),
        )
    except Exception as exc:  # noqa: BLE001 - kombu raises many kinds; the sweeper recovers all
        log.warning("could not enqueue task %s (%s); the sweeper will retry", task_id, exc)


@shared_task(ignore_result=True)
def sweep_stuck_work() -> dict[str, int]:
    unclaimed, failed = services.sweep_stuck_work(
        unclaimed_after=settings.SWEEP_UNCLAIMED_AFTER,
        lost_after=settings.AGENT_TIME_LIMIT + settings.SWEEP_LOST_GRACE,
        retries=settings.AGENT_RUN_RETRIES,
        rerunnable={name for name, executor in REGISTRY.items() if executor.rerunnable},
    )
    for task_id, token in unclaimed:
        enqueue_run(task_id=task_id, run_token=token)
    if unclaimed or failed:
        log.info("sweeper: re-enqueued %d, failed %d lost runs", len(unclaimed), failed)
    return {"requeued": len(unclaimed), "failed": failed}
