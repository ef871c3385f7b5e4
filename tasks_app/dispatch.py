"""Sending a run to the Celery workers.

By the job's name: the Celery module (`tasks.py`) imports the services that send runs, so
they must not import it. The broker is a doorbell: a run is committed before it is sent, and
the sweeper sends again whatever no worker claimed.
"""

from __future__ import annotations

import base64
import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from celery import current_app, signals
from celery.utils.nodenames import anon_nodename
from django.conf import settings

from . import redis_lines

log = logging.getLogger(__name__)

RUN_AGENT = "tasks_app.tasks.run_agent"
RUN_AGENT_ASYNC = "tasks_app.tasks.run_agent_async"
FORWARD_CANCEL = "tasks_app.tasks.forward_cancel"
EXPIRE_AWAITING = "tasks_app.tasks.expire_awaiting"


def _publish_options() -> dict[str, Any]:
    """Celery publishes a run through the anonymous exchange straight to the queue's Redis
    list, which the workers pop; declaring the queue again on every publish (a copy and a
    bind of the Queue: a third of a publish's Python work) adds nothing there."""
    return {"declare": []} if settings.BROKER_IS_REDIS else {}


# The message of a run as Celery (task message protocol 2) and kombu's Redis transport write it,
# apart from what differs from run to run: the ids, the arguments and their repr.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def _never(name: str) -> bool:
    return False


# Whether an executor (by name) is async: set by tasks_app.executors, which imports this module.
executor_is_async: Callable[[str], bool] = _never


def _route(task_id: Any, executor: str | None) -> tuple[str, str]:
    """The job and the queue of a run: an async executor's goes to the run host's queue (when
    there is one), any other to the prefork workers'. A sender that does not know the executor
    (a sweep's resend) costs one query to find it."""
    queue = settings.ASYNC_RUNS_QUEUE
    if queue:
        if executor is None:
            from .selectors import task_executor

            executor = task_executor(task_id) or ""
        if executor_is_async(executor):
            return RUN_AGENT_ASYNC, queue
    return RUN_AGENT, current_app.conf.task_default_queue


@functools.cache
def _run_envelope(task: str = RUN_AGENT, queue: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    # The run host's pool (threads) has no time limits: its runs keep their own (runner.run_async).
    limits = [settings.AGENT_TIME_LIMIT, settings.AGENT_SOFT_TIME_LIMIT] if task == RUN_AGENT else [None, None]
    headers = {
        "lang": "py",
        "task": task,
        "id": None,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": limits,
        "root_id": None,
        "parent_id": None,
        "argsrepr": None,
        "kwargsrepr": "{}",
        "origin": anon_nodename(),
        "ignore_result": bool(current_app.conf.task_ignore_result),
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    properties = {
        "correlation_id": None,
        "reply_to": str(current_app.thread_oid),
        "argsrepr": None,
        "kwargsrepr": "{}",
        "delivery_mode": 2,
        "delivery_info": {"exchange": "", "routing_key": queue or current_app.conf.task_default_queue},
        "priority": 0,
        "body_encoding": "base64",
        "delivery_tag": None,
    }
    return headers, properties


def run_message(task_id: str, run_token: str, *, task: str = RUN_AGENT, queue: str = "") -> bytes:
    """What `apply_async` of run_agent (or `task`, to `queue`) would LPUSH, built without it:
    Celery's publish (the task message, kombu's producer, its channel, the serializer) cost
    ~0.25 ms of a web process's CPU per send, this ~25 us. tests/test_dispatch.py holds it equal
    to Celery's own."""
    headers, properties = _run_envelope(task, queue)
    job = str(uuid.uuid4())
    args = [task_id, run_token]
    argsrepr = repr(tuple(args))
    body = base64.b64encode(orjson.dumps([args, {}, _EMBED])).decode()
    return orjson.dumps(
        {
            "body": body,
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {**headers, "id": job, "root_id": job, "argsrepr": argsrepr},
            "properties": {
                **properties,
                "correlation_id": job,
                "argsrepr": argsrepr,
                "delivery_tag": str(uuid.uuid4()),
            },
        }
    )


def _direct() -> bool:
    """Whether a run may go straight to the queue's Redis list: the broker is Redis, Celery
    would publish (not run it in place), and nothing listens to its publish signals (tracing's
    Celery instrumentation does: it adds its context to the message)."""
    return (
        settings.BROKER_IS_REDIS
        and settings.BACKGROUND_WORK != "threads"
        and not current_app.conf.task_always_eager
        and not signals.before_task_publish.receivers
        and not signals.after_task_publish.receivers
    )


def enqueue_run(*, task_id: Any, run_token: Any, executor: str | None = None) -> None:
    """Send one run to the workers (`executor`, the agent's, says which: found if not given).
    Called after commit; if the broker is down the work stays committed and unclaimed, and the
    sweeper sends it again."""
    args = (str(task_id), str(run_token))
    try:
        job, queue = _route(task_id, executor)
        if _direct():
            line = redis_lines.connection(settings.CELERY_BROKER_URL)
            assert line is not None
            redis_lines.command(line, "LPUSH", queue, run_message(*args, task=job, queue=queue))
            return
        limited = job == RUN_AGENT  # the run host keeps its runs' limits itself (runner.run_async)
        current_app.tasks[job].apply_async(
            args,
            soft_time_limit=settings.AGENT_SOFT_TIME_LIMIT if limited else None,
            time_limit=settings.AGENT_TIME_LIMIT if limited else None,
            argsrepr=repr(args),  # Celery's own, through saferepr, costs more than the rest of the message
            kwargsrepr="{}",
            **({} if limited else {"queue": queue}),
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
