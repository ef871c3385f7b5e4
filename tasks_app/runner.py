"""Runs one unit of agent work: claim it, build the AgentContext, call the executor,
and turn whatever goes wrong into a failed task with a reason (never a stuck one)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import connections

from accounts import sealing
from accounts.storable import Refused

from . import dispatch, metrics, selectors, services
from .domain import RunInputs
from .errors import STORE_ERRORS, InvalidTransition, TaskClosed
from .executors import AgentContext, AgentFailure, Misconfigured, executor_for, executor_withdrawn
from .lifecycle import Failure, Role

log = logging.getLogger(__name__)


def run(*, task_id: Any, run_token: Any) -> str:
    """Returns what happened, for logs and tests: claimed elsewhere (or gone), done, failed,
    closed, run-again (the store failed under a rerunnable agent: a fresh run is queued), or
    store-unavailable: the store could not be reached to record the outcome (the sweeper sends
    an unclaimed run again, and settles a claimed one once the store is back)."""
    try:
        return _run(task_id=task_id, run_token=uuid.UUID(str(run_token)))  # Celery hands the token over as a string
    except STORE_ERRORS as exc:
        _discard_connections()
        log.warning("task %s: the task store is unavailable (%s)", task_id, str(exc).strip())
        return "store-unavailable"


def _run(*, task_id: Any, run_token: uuid.UUID) -> str:
    inputs = services.run_start(task_id=task_id, run_token=run_token)
    if inputs is None:
        metrics.RUNS.labels("not-claimed").inc()
        return "not-claimed"
    started = time.perf_counter()
    outcome = _executed(inputs, task_id=task_id, run_token=run_token)
    metrics.RUNS.labels(outcome).inc()
    metrics.RUN_SECONDS.labels(inputs.agent).observe(time.perf_counter() - started)
    return outcome


def _executed(inputs: RunInputs, *, task_id: Any, run_token: uuid.UUID) -> str:
    def fail(failure: str, reason: str, public: str = "") -> str:
        # The reason is the admin's; the client reads `public` (the failure's default unless given).
        services.run_fail(task_id=task_id, run_token=run_token, failure=failure, reason=reason, public=public)
        return "failed"

    executor = executor_for(inputs.executor)
    if executor is None:
        return fail(Failure.MISCONFIGURED, f"the agent is misconfigured: no executor named {inputs.executor!r}")
    withdrawn = executor_withdrawn(agent=inputs.agent, executor=inputs.executor)  # an installed one's grant
    if withdrawn:
        return fail(Failure.MISCONFIGURED, f"the agent is misconfigured: {withdrawn}")
    latest_user = next((m for m in reversed(inputs.history) if m.role == Role.USER), None)
    if latest_user is None:  # every task starts with a client's message; this one was not made by a client
        return fail(Failure.MISCONFIGURED, "the task has no message from the client to answer")
    ctx = AgentContext(
        task_id=inputs.task_id,
        context_id=inputs.context_id,
        message=latest_user,
        history=inputs.history,
        settings=inputs.agent_settings,
        accepted_output_modes=inputs.accepted_output_modes,
        run_token=inputs.run_token,
        agent_secret=inputs.agent_secret,
        state=dict(inputs.executor_state),
        declared_extensions=inputs.agent_extensions,
        activated_extensions=inputs.activated_extensions,
        dialect=inputs.dialect,
        task_state=inputs.state,
        limits=inputs.limits,
    )
    try:
        executor.execute(ctx)
    except TaskClosed:
        return "closed"
    except Misconfigured as exc:
        return fail(Failure.MISCONFIGURED, f"the agent is misconfigured: {exc}", exc.public)
    except AgentFailure as exc:
        return fail(exc.failure, str(exc), exc.public)
    except SoftTimeLimitExceeded:
        _discard_connections()
        limit = settings.AGENT_SOFT_TIME_LIMIT
        return fail(
            Failure.TIME_LIMIT,
            f"the agent exceeded its time limit of {limit} s",
            f"the agent did not finish within its time limit of {limit} s",
        )
    except (InvalidTransition, Refused) as exc:  # a part, an id or a name the store cannot hold
        return fail(Failure.INVALID_RESPONSE, f"the agent gave an invalid response: {exc}")
    except STORE_ERRORS as exc:  # raised by a ctx call: the store failed, not the agent
        _discard_connections()
        log.warning("task %s: the task store failed while the agent ran (%s)", task_id, str(exc).strip())
        if executor.rerunnable:  # as a lost run would: another try, once the store answers again
            fresh = services.run_again(task_id=task_id, run_token=run_token, retries=settings.AGENT_RUN_RETRIES)
            if fresh is not None:
                dispatch.enqueue_run(task_id=task_id, run_token=fresh)
                return "run-again"
        return fail(Failure.STORE_UNAVAILABLE, "the task store was unavailable while the agent ran")
    except Exception as exc:  # noqa: BLE001 - an agent's bug must never leave its task hanging
        log.exception("executor %s failed on task %s", executor.name, task_id)
        return fail(Failure.AGENT_ERROR, f"the agent raised {type(exc).__name__}")
    if not ctx.settled:
        if ctx.cancelled:  # the executor saw the cancellation and stopped, as it should
            return "closed"
        said = "the agent returned without completing the task or asking for input"
        return fail(Failure.INVALID_RESPONSE, said, said)
    return "done"


def forward_cancel(*, task_id: Any) -> str:
    """Tell a canceled task's executor, which was not running, of the cancel (the executor's
    `canceled_while_idle`). Safe twice: cancelling what is canceled already changes nothing."""
    found = selectors.canceled_task_inputs(task_id)
    if found is None:
        return "not canceled"
    name, agent_settings, sealed, state, context_id = found
    executor = executor_for(name)
    if executor is None or not state:
        return "nothing to do"
    try:
        outcome = executor.canceled_while_idle(
            task_id=str(task_id),
            context_id=context_id,
            settings=agent_settings or {},
            secret=sealing.unseal(sealed),
            state=state,
        )
    except Exception as exc:  # noqa: BLE001 - ours is canceled whatever happens elsewhere
        outcome = f"failed: {type(exc).__name__}: {exc}"
    log.info("task %s canceled while idle; its executor %s: %s", task_id, name, outcome)
    return outcome


def _discard_connections() -> None:
    """The soft time limit is raised by a signal, possibly in the middle of a query, which
    leaves that connection mid-command: every later query on it (this task's failure, the
    next tasks of this worker process) would fail. Give it up; the next query gets a fresh one."""
    for connection in connections.all(initialized_only=True):
        if connection.in_atomic_block:  # not ours to close (only a test runs us inside one)
            continue
        try:
            connection.close()
        except Exception:  # noqa: BLE001 - it is broken; all we want is to stop using it
            connection.connection = None
