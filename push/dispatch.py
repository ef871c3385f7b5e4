"""Sending delivery jobs to the Celery workers, by the job's name: the Celery module
(`tasks.py`) runs the delivery loop, which imports the services that send jobs, so they must
not import it. A job is only a doorbell: what is owed is in the configs' cursors, and the
sweeper rings again for any config that stalls."""

from __future__ import annotations

import logging

from celery import current_app

from tasks_app.hooks import TaskChanged

from . import selectors

log = logging.getLogger(__name__)

DELIVER = "push.tasks.deliver"


def enqueue_delivery(*, config_pk: int, countdown: float | None = None) -> None:
    """Send a delivery job for one config. If the broker is down the events stay owed and the
    sweeper sends the job again."""
    try:
        current_app.tasks[DELIVER].apply_async((config_pk,), countdown=countdown)
    except Exception as exc:  # noqa: BLE001 - kombu raises many kinds; the sweeper recovers all
        log.warning("could not enqueue push delivery for config %s (%s); the sweeper will retry", config_pk, exc)


def on_task_changed(change: TaskChanged) -> None:
    """A change of the task committed (subscribed in `PushConfig.ready`): one job per live
    config, for tasks that have any."""
    if change.has_push_configs:
        for config_pk in selectors.live_config_pks(change.task_id):
            enqueue_delivery(config_pk=config_pk)
