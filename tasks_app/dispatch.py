"""Sending a run to the Celery workers.

By the job's name: the Celery module (`tasks.py`) imports the services that send runs, so
they must not import it. The broker is a doorbell: a run is committed before it is sent, and
the sweeper sends again whatever no worker claimed.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from django.conf import settings

log = logging.getLogger(__name__)

RUN_AGENT = "tasks_app.tasks.run_agent"
FORWARD_CANCEL = "tasks_app.tasks.forward_cancel"
EXPIRE_AWAITING = "tasks_app.tasks.expire_awaiting"


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
        current_app.tasks[RUN_AGENT].apply_async(
            args,
            soft_time_limit=settings.AGENT_SOFT_TIME_LIMIT,
            time_limit=settings.AGENT_TIME_LIMIT,
            argsrepr=repr(args),  # Celery's own, through saferepr, costs more than the rest of the message
            kwargsrepr="{}",
            **_publish_options(),
        )
    except Exception as exc:  # noqa: BLE001 - kombu raises many kinds; the sweeper recovers all
        log.warning("could not enqueue task %s (%s); the sweeper will retry", task_id, exc)


def enqueue_forward_cancel(*, task_id: Any) -> None:
    """Tell the task's executor, in a worker, that the task was canceled while none of its runs
    was active (it waited for input): a fronted agent cancels its upstream task then. Called
    after commit; best effort, as a run's own cancel is (a lost one is logged)."""
    try:
        current_app.tasks[FORWARD_CANCEL].apply_async((str(task_id),), **_publish_options())
    except Exception as exc:  # noqa: BLE001 - kombu raises many kinds
        log.warning("could not tell task %s's executor of its cancel (%s)", task_id, exc)


def enqueue_expiry(*, task_id: Any, countdown: float) -> None:
    """Close the task after `countdown` seconds if it still waits on its client then
    (services.task_expire_awaiting). Best effort: the sweeper closes what a lost job did not."""
    try:
        current_app.tasks[EXPIRE_AWAITING].apply_async((str(task_id),), countdown=countdown, **_publish_options())
    except Exception as exc:  # noqa: BLE001 - kombu raises many kinds
        log.warning("could not schedule the timeout of task %s (%s); the sweeper will close it", task_id, exc)
