"""Runs one unit of agent work: claim it, build the AgentContext, call the executor,
and turn whatever goes wrong into a failed task with a reason (never a stuck one)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import connections

from accounts import sealing
from accounts.storable import Refused

from . import dbcalls, dispatch, hints, metrics, runhost, selectors, services
from .domain import RunInputs
from .errors import STORE_ERRORS, InvalidTransition, TaskClosed
from .executors import (
    AgentContext,
    AgentFailure,
    AsyncAgentContext,
    Executor,
    Misconfigured,
    executor_for,
    executor_withdrawn,
    is_async,
)
from .lifecycle import TERMINAL, Failure, Role

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
    executor, ctx, problem = _prepared(inputs)
    if executor is None or ctx is None:
        outcome = _fail(task_id, run_token, Failure.MISCONFIGURED, problem)
    elif is_async(executor):  # sent here, not to the run host: it waits in this process alone
        try:
            outcome = runhost.call(
                _executed_async, executor=executor, ctx=ctx, task_id=task_id, run_token=run_token, watch=False
            )
        except SoftTimeLimitExceeded:  # Celery's limit came first, to the waiting thread
            _discard_connections()
            outcome = _timed_out(task_id, run_token)
    else:
        outcome = _executed(executor, ctx, task_id=task_id, run_token=run_token)
    metrics.RUNS.labels(outcome).inc()
    metrics.RUN_SECONDS.labels(inputs.agent).observe(time.perf_counter() - started)
    return outcome


def _fail(task_id: Any, run_token: uuid.UUID, failure: str, reason: str, public: str = "") -> str:
    # The reason is the admin's; the client reads `public` (the failure's default unless given).
    services.run_fail(task_id=task_id, run_token=run_token, failure=failure, reason=reason, public=public)
    return "failed"


def _prepared(inputs: RunInputs) -> tuple[Executor | None, AgentContext | None, str]:
    """The run's executor and its context, or why the agent is misconfigured."""
    executor = executor_for(inputs.executor)
    if executor is None:
        return None, None, f"the agent is misconfigured: no executor named {inputs.executor!r}"
    withdrawn = executor_withdrawn(agent=inputs.agent, executor=inputs.executor)  # an installed one's grant
    if withdrawn:
        return None, None, f"the agent is misconfigured: {withdrawn}"
    latest_user = next((m for m in reversed(inputs.history) if m.role == Role.USER), None)
    if latest_user is None:  # every task starts with a client's message; this one was not made by a client
        return None, None, "the task has no message from the client to answer"
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
    return executor, ctx, ""


def _executed(executor: Executor, ctx: AgentContext, *, task_id: Any, run_token: uuid.UUID) -> str:
    try:
        executor.execute(ctx)
    except SoftTimeLimitExceeded:
        _discard_connections()
        return _timed_out(task_id, run_token)
    except Exception as exc:  # noqa: BLE001 - sorted out by _outcome; an agent's bug must never leave its task hanging
        return _outcome(executor, ctx, exc, task_id=task_id, run_token=run_token)
    return _outcome(executor, ctx, None, task_id=task_id, run_token=run_token)


def _timed_out(task_id: Any, run_token: uuid.UUID) -> str:
    limit = settings.AGENT_SOFT_TIME_LIMIT
    return _fail(
        task_id,
        run_token,
        Failure.TIME_LIMIT,
        f"the agent exceeded its time limit of {limit} s",
        f"the agent did not finish within its time limit of {limit} s",
    )


def _outcome(
    executor: Executor, ctx: AgentContext, error: Exception | None, *, task_id: Any, run_token: uuid.UUID
) -> str:
    """What the run came to once its executor returned (`error` None) or raised `error`,
    recorded: done, failed with a reason, closed, or run again."""
    if error is None:
        if not ctx.settled:
            if ctx.cancelled:  # the executor saw the cancellation and stopped, as it should
                return "closed"
            said = "the agent returned without completing the task or asking for input"
            return _fail(task_id, run_token, Failure.INVALID_RESPONSE, said, said)
        return "done"
    if isinstance(error, TaskClosed):
        return "closed"
    if isinstance(error, Misconfigured):
        return _fail(task_id, run_token, Failure.MISCONFIGURED, f"the agent is misconfigured: {error}", error.public)
    if isinstance(error, AgentFailure):
        return _fail(task_id, run_token, error.failure, str(error), error.public)
    if isinstance(error, InvalidTransition | Refused):  # a part, an id or a name the store cannot hold
        return _fail(task_id, run_token, Failure.INVALID_RESPONSE, f"the agent gave an invalid response: {error}")
    if isinstance(error, STORE_ERRORS):  # raised by a ctx call: the store failed, not the agent
        _discard_connections()
        log.warning("task %s: the task store failed while the agent ran (%s)", task_id, str(error).strip())
        if executor.rerunnable:  # as a lost run would: another try, once the store answers again
            fresh = services.run_again(task_id=task_id, run_token=run_token, retries=settings.AGENT_RUN_RETRIES)
            if fresh is not None:
                dispatch.enqueue_run(task_id=task_id, run_token=fresh, executor=executor.name)
                return "run-again"
        said = "the task store was unavailable while the agent ran"
        return _fail(task_id, run_token, Failure.STORE_UNAVAILABLE, said)
    log.error("executor %s failed on task %s", executor.name, task_id, exc_info=error)
    return _fail(task_id, run_token, Failure.AGENT_ERROR, f"the agent raised {type(error).__name__}")


# --- async executors: a run is a coroutine on the run host (tasks_app/runhost.py) ----------


async def run_async(*, task_id: Any, run_token: Any) -> str:
    """`run` for the run host: the same outcomes, every store call on the DB threads."""
    token = uuid.UUID(str(run_token))
    try:
        inputs = await dbcalls.run(services.run_start, task_id=task_id, run_token=token)
        if inputs is None:
            metrics.RUNS.labels("not-claimed").inc()
            return "not-claimed"
        started = time.perf_counter()
        executor, ctx, problem = await dbcalls.run(_prepared, inputs)
        if executor is None or ctx is None:
            outcome = await dbcalls.run(_fail, task_id, token, Failure.MISCONFIGURED, problem)
        elif is_async(executor):
            outcome = await _executed_async(executor=executor, ctx=ctx, task_id=task_id, run_token=token)
        else:  # sent here before its agent's executor changed: it runs on a thread, as it would have
            outcome = await runhost.in_thread(_executed_sync, executor, ctx, task_id, token)
        metrics.RUNS.labels(outcome).inc()
        metrics.RUN_SECONDS.labels(inputs.agent).observe(time.perf_counter() - started)
        return outcome
    except STORE_ERRORS as exc:
        log.warning("task %s: the task store is unavailable (%s)", task_id, str(exc).strip())
        return "store-unavailable"


def _executed_sync(executor: Executor, ctx: AgentContext, task_id: Any, run_token: uuid.UUID) -> str:
    return _executed(executor, ctx, task_id=task_id, run_token=run_token)


async def _executed_async(
    *, executor: Executor, ctx: AgentContext, task_id: Any, run_token: uuid.UUID, watch: bool = True
) -> str:
    """Await the executor within its time limit, cancelled within a second of its task's
    cancel (a watcher woken by the task's hints) or at the end of a shutdown's grace. Without
    `watch` (a prefork child, one run at a time) it finds a cancel as a sync one does, at its
    next verb: no child subscribes to every task's hints for the sake of one run."""
    actx = AsyncAgentContext(ctx)
    me = asyncio.current_task()
    assert me is not None
    error: Exception | None = None
    timed_out = False
    with runhost.hosted() as stop:
        watcher = asyncio.ensure_future(_cancel_watch(actx, me, stop)) if watch else None
        limit = asyncio.timeout(settings.AGENT_SOFT_TIME_LIMIT)
        try:
            if not stop.why:  # a run starting after the shutdown's grace hands back at once
                async with limit:
                    await executor.execute(actx)
        except asyncio.CancelledError:
            if not stop.why:  # not ours (the loop is going away): let it end the run
                raise
            me.uncancel()
        except TimeoutError as exc:
            if limit.expired():
                timed_out = True
            else:  # the agent's own
                error = exc
        except Exception as exc:  # noqa: BLE001 - sorted out by _outcome
            error = exc
        finally:
            if watcher is not None:
                watcher.cancel()
    if timed_out:
        return await dbcalls.run(_timed_out, task_id, run_token)
    if stop.why and not ctx.settled and error is None:
        if stop.why == runhost.CLOSED:
            return "closed"
        return await dbcalls.run(_handed_back, executor, task_id, run_token)
    return await dbcalls.run(_outcome, executor, ctx, error, task_id=task_id, run_token=run_token)


async def _cancel_watch(ctx: AsyncAgentContext, run: asyncio.Task, stop: runhost.Stop) -> None:
    """Cancel the run once its task is closed behind its back (a client's or an operator's
    cancel): woken by the task's hints, and every HINT_FALLBACK_POLL seconds in case one was lost.
    A verb under way finds the close itself (TaskClosed), and the run's own settling is no cancel."""
    async with hints.watch(ctx.task_id) as seen:
        while True:
            woke = await seen.wait(settings.HINT_FALLBACK_POLL)
            if woke and all(state and state not in TERMINAL for state in seen.states):
                continue  # its own progress, or another open state: nothing closed it
            if ctx.busy or ctx.settled:
                continue
            state = await dbcalls.run(selectors.task_state, ctx.task_id)
            if (state is None or state in TERMINAL) and not ctx.busy and not ctx.settled:
                runhost.stop_run(run, stop, runhost.CLOSED)
                return


def _handed_back(executor: Executor, task_id: Any, run_token: uuid.UUID) -> str:
    """A run the shutdown cut: run again elsewhere if its executor may, as a lost run would;
    failed as lost otherwise (it may have acted already)."""
    if executor.rerunnable:
        fresh = services.run_again(task_id=task_id, run_token=run_token, retries=settings.AGENT_RUN_RETRIES)
        if fresh is not None:
            dispatch.enqueue_run(task_id=task_id, run_token=fresh, executor=executor.name)
            return "run-again"
    grace = settings.SHUTDOWN_GRACE
    reason = f"the worker running this task stopped before the agent finished (its grace of {grace:g} s)"
    return _fail(task_id, run_token, Failure.WORKER_LOST, reason)


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
