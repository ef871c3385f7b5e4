"""Celery tasks of push: thin, id-taking, safe to run twice (the config lease decides who
sends). Jobs are sent by `dispatch`."""

from __future__ import annotations

import logging

from celery import shared_task

from tasks_app.leases import one_at_a_time
from tasks_app.metrics import SWEEPS

from . import delivery, dispatch, selectors, services

log = logging.getLogger(__name__)


@shared_task(name=dispatch.DELIVER, acks_late=True, ignore_result=True)
def deliver(config_pk: int) -> str:
    return delivery.run(config_pk=int(config_pk))


@shared_task(ignore_result=True)
@one_at_a_time("sweep-push-deliveries")
def sweep_deliveries() -> int:
    stalled = selectors.configs_stalled()
    for config_pk in stalled:
        dispatch.enqueue_delivery(config_pk=config_pk)
    SWEEPS.labels("push-config-resumed").inc(len(stalled))
    if stalled:
        log.info("push sweeper: re-enqueued %d configs", len(stalled))
    expired = services.pending_configs_sweep()
    if expired:
        log.info("push sweeper: deleted %d expired configs set ahead of their tasks", expired)
    return len(stalled)
