"""Celery tasks of push: thin, id-taking, safe to run twice (the config lease decides who sends)."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from . import delivery, selectors

log = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def deliver(config_pk: int) -> str:
    return delivery.run(config_pk=int(config_pk))


def enqueue_delivery(*, config_pk: int, countdown: float | None = None) -> None:
    """Send a delivery job to the workers. If the broker is down the events stay owed and
    the sweeper sends the job again."""
    try:
        deliver.apply_async((config_pk,), countdown=countdown)
    except Exception as exc:  # noqa: BLE001 - kombu raises many kinds; the sweeper recovers all
        log.warning("could not enqueue push delivery for config %s (%s); the sweeper will retry", config_pk, exc)


def enqueue_for_task(*, task_id: Any) -> None:
    """A new event of the task committed: one job per live config. Called after commit by
    tasks_app.services, for tasks that have push configs only."""
    for config_pk in selectors.live_config_pks(task_id):
        enqueue_delivery(config_pk=config_pk)


@shared_task(ignore_result=True)
def sweep_deliveries() -> int:
    stalled = selectors.configs_stalled()
    for config_pk in stalled:
        enqueue_delivery(config_pk=config_pk)
    if stalled:
        log.info("push sweeper: re-enqueued %d configs", len(stalled))
    return len(stalled)
