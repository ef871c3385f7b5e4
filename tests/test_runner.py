"""Running an executor: whatever it does, its task ends settled, never stuck."""

import asyncio
import inspect
import signal
import threading
import time
import uuid

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from accounts.selectors import Principal
from tasks_app import runhost, runner, services, tasks
from tasks_app.domain import NewMessage
from tasks_app.executors import REGISTRY, Executor
from tasks_app.lifecycle import TaskState
from tasks_app.models import Task
from tests.conftest import backend_pid, end_sessions, make_agent

pytestmark = pytest.mark.usefixtures("store_path")


@pytest.fixture
def run_with(tenant, monkeypatch):
    """Register a throwaway executor, give it a task, run it once; return the task."""
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: go.enqueued.append(kw))
    registered = []

    def go(execute, text="hello", rerunnable=False, run=runner.run):
        name = f"test-{uuid.uuid4().hex[:8]}"
        if inspect.iscoroutinefunction(execute):

            async def executes(self, ctx):
                await execute(ctx)

        else:

            def executes(self, ctx):
                execute(ctx)

        REGISTRY[name] = type("E", (Executor,), {"name": name, "rerunnable": rerunnable, "execute": executes})
        registered.append(name)
        agent = make_agent(tenant, name, name)
        message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": text}])
        task, _ = services.message_receive(agent=agent, principal=Principal("alice", api_key_id=1), message=message)
        outcome = run(task_id=task.pk, run_token=str(task.run_token))
        task.refresh_from_db()
        return task, outcome

    go.enqueued = []
    yield go
    for name in registered:
        REGISTRY.pop(name, None)


def test_a_well_behaved_executor_completes_its_task(run_with):
    task, outcome = run_with(lambda ctx: ctx.complete(f"done with {ctx.text}"))
    assert outcome == "done" and task.state == TaskState.COMPLETED
    assert task.status_message.parts == [{"type": "text", "text": "done with hello"}]


def test_an_executor_that_fails_its_task_is_done_and_its_message_is_the_status(run_with):
    task, outcome = run_with(lambda ctx: ctx.fail("the topic is not one I write about"))
    assert outcome == "done" and task.state == TaskState.FAILED
    assert task.status_message.parts == [{"type": "text", "text": "the topic is not one I write about"}]
    assert task.failure == ""  # the agent's own verdict: not a failure the server caused


def test_an_executor_that_rejects_its_task_leaves_it_rejected(run_with):
    task, outcome = run_with(lambda ctx: ctx.reject("not for me"))
    assert outcome == "done" and task.state == TaskState.REJECTED


def test_an_executor_that_raises_fails_its_task_with_a_reason(run_with):
    def boom(ctx):
        raise KeyError("oops")

    task, outcome = run_with(boom)
    assert outcome == "failed" and task.state == TaskState.FAILED and task.failure == "agent-error"
    assert task.status_changes.last().reason == "the agent raised KeyError"


def test_an_executor_that_runs_out_of_time_fails_its_task(run_with):
    def slow(ctx):
        ctx.working()
        raise SoftTimeLimitExceeded()

    task, _ = run_with(slow)
    assert task.state == TaskState.FAILED and task.failure == "time-limit"
    assert "time limit" in task.status_changes.last().reason


@pytest.mark.django_db(transaction=True)
def test_a_time_limit_that_strikes_mid_query_leaves_the_worker_able_to_use_the_database(run_with):
    """Celery raises the soft time limit from a signal handler; landing inside a query, it
    leaves that connection mid-command. The failure must still be recorded, and the worker
    process's next task must not inherit the broken connection."""
    from django.db import connection

    def out_of_time(signum, frame):
        raise SoftTimeLimitExceeded()

    def stuck_in_a_query(ctx):
        signal.signal(signal.SIGALRM, out_of_time)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(5)")

    try:
        task, outcome = run_with(stuck_in_a_query)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert outcome == "failed" and task.state == TaskState.FAILED and task.failure == "time-limit"
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


@pytest.mark.django_db(transaction=True)
def test_a_store_that_goes_away_while_the_agent_runs_is_not_the_agents_fault(run_with):
    def writes_after_a_restart(ctx):
        ctx.working()
        end_sessions("pid = %s", backend_pid())  # as a Postgres restart would
        ctx.complete("never stored")

    task, outcome = run_with(writes_after_a_restart)
    assert outcome == "failed" and task.state == TaskState.FAILED and task.failure == "store-unavailable"
    assert task.status_changes.last().reason == "the task store was unavailable while the agent ran"


@pytest.mark.django_db(transaction=True)
def test_a_rerunnable_agent_the_store_went_away_under_runs_again(run_with):
    runs = []

    def writes_after_a_restart_once(ctx):
        runs.append(ctx.run_token)
        ctx.working()
        if len(runs) == 1:
            end_sessions("pid = %s", backend_pid())  # as a Postgres restart would
        ctx.complete("stored the second time")

    task, outcome = run_with(writes_after_a_restart_once, rerunnable=True)
    assert outcome == "run-again" and task.state == TaskState.WORKING and task.run_retries == 1
    again = {"task_id": task.pk, "run_token": task.run_token, "executor": task.agent.executor}
    assert run_with.enqueued[1:] == [again]  # after the first run's
    assert runner.run(task_id=task.pk, run_token=str(task.run_token)) == "done"
    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED and len(runs) == 2


@pytest.mark.django_db(transaction=True)
def test_a_run_that_cannot_reach_the_store_stays_unclaimed_for_the_sweeper_to_send_again(tenant, monkeypatch):
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    agent = make_agent(tenant, "echo", "echo")
    message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "hi"}])
    task, _ = services.message_receive(agent=agent, principal=Principal("alice", api_key_id=1), message=message)
    end_sessions("pid = %s", backend_pid())

    assert runner.run(task_id=task.pk, run_token=str(task.run_token)) == "store-unavailable"
    task.refresh_from_db()  # on a fresh connection: the runner gave the dead one up
    assert task.run_claimed_at is None and task.state == TaskState.SUBMITTED
    assert runner.run(task_id=task.pk, run_token=str(task.run_token)) == "done"


def test_an_executor_that_returns_without_settling_breaks_the_contract(run_with):
    task, _ = run_with(lambda ctx: ctx.working("thinking"))
    assert task.state == TaskState.FAILED and task.failure == "invalid-response"


def test_invalid_parts_from_an_executor_are_an_invalid_response(run_with):
    task, _ = run_with(lambda ctx: ctx.complete([{"type": "hologram"}]))
    assert task.state == TaskState.FAILED and task.failure == "invalid-response"
    assert "hologram" in task.status_changes.last().reason


def deep(levels: int):
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    "execute, reason",
    [
        (lambda ctx: ctx.complete("a\x00b"), "parts[0].text contains U+0000"),
        (lambda ctx: ctx.complete([{"type": "data", "data": deep(65)}]), "nests deeper than 64 levels"),
        (
            lambda ctx: ctx.complete([{"type": "data", "data": {"n": 2**70}}]),
            "parts[0].data.n is an integer out of range",
        ),
        (lambda ctx: ctx.complete([{"type": "data", "data": {1: "x"}}]), "member name that is not a string"),
        (lambda ctx: ctx.artifact("x", artifact_id="a" * 201), "artifact_id is longer than 200 characters"),
        (lambda ctx: ctx.complete(artifact="x", name="n" * 301), "name is longer than 300 characters"),
        (lambda ctx: ctx.artifact("x", metadata={"when": object()}), "metadata.when is a object"),
        (lambda ctx: ctx.reply("hi", metadata={"a": float("nan")}), "metadata.a is a number out of range"),
    ],
)
def test_what_an_executor_reports_that_the_store_cannot_hold_is_an_invalid_response(run_with, execute, reason):
    task, _ = run_with(execute)
    assert task.state == TaskState.FAILED and task.failure == "invalid-response"
    assert reason in task.status_changes.last().reason


def test_cancellation_reaches_a_running_executor(run_with):
    seen = {}

    def cancel_midway(ctx):
        ctx.working()
        Task.objects.filter(pk=ctx.task_id).update(state=TaskState.CANCELED)  # the client cancels meanwhile
        seen["cancelled"] = ctx.cancelled
        ctx.artifact("too late")  # refused: the executor is stopped here

    task, outcome = run_with(cancel_midway)
    assert seen["cancelled"] is True
    assert outcome == "closed" and task.state == TaskState.CANCELED
    assert not task.artifacts.exists()


def test_a_run_delivered_twice_executes_once(run_with):
    calls = []

    def count(ctx):
        calls.append(1)
        ctx.complete()

    task, _ = run_with(count)
    assert runner.run(task_id=task.pk, run_token=str(task.run_token)) == "not-claimed"
    assert calls == [1]


def test_an_agent_with_an_unknown_executor_fails_clearly(tenant, monkeypatch):
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    agent = make_agent(tenant, "ghost", "no-such-executor")
    message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "x"}])
    task, _ = services.message_receive(agent=agent, principal=Principal("alice", api_key_id=1), message=message)
    assert runner.run(task_id=task.pk, run_token=task.run_token) == "failed"
    task.refresh_from_db()
    assert task.failure == "misconfigured" and "no-such-executor" in task.status_changes.last().reason


# --- async executors: coroutines on the run host ------------------------------------------


def on_the_run_host(*, task_id, run_token):
    """A run as the run host's Celery job takes it (tasks.run_agent_async)."""
    return tasks.run_agent_async.run(str(task_id), str(run_token))


@pytest.fixture(params=["prefork", "run host"])
def run_async_with(request, run_with):
    """An async executor's run, sent to a prefork worker (which waits for it alone) or to the run host."""
    via = runner.run if request.param == "prefork" else on_the_run_host
    return lambda execute, **kw: run_with(execute, run=via, **kw)


def test_an_async_executor_awaits_its_verbs_and_completes_its_task(run_async_with):
    async def answers(ctx):
        await ctx.working("thinking")
        assert await ctx.cancelled is False
        ctx.state["seen"] = ctx.text
        await ctx.save_state()
        await ctx.artifact("part one", artifact_id="a", name="answer")
        await ctx.complete(f"done with {ctx.text}", artifact=" and two", artifact_id="a", append=True)

    task, outcome = run_async_with(answers)
    assert outcome == "done" and task.state == TaskState.COMPLETED
    assert task.status_message.parts == [{"type": "text", "text": "done with hello"}]
    assert [p["text"] for p in task.artifacts.get().parts] == ["part one", " and two"]
    assert task.executor_state == {"seen": "hello"}


def test_an_async_executor_that_raises_fails_its_task_with_a_reason(run_async_with):
    async def boom(ctx):
        await ctx.working()
        raise KeyError("oops")

    task, outcome = run_async_with(boom)
    assert outcome == "failed" and task.state == TaskState.FAILED and task.failure == "agent-error"
    assert task.status_changes.last().reason == "the agent raised KeyError"


def test_an_async_executor_that_returns_without_settling_breaks_the_contract(run_async_with):
    async def idle(ctx):
        await ctx.working()

    task, outcome = run_async_with(idle)
    assert outcome == "failed" and task.failure == "invalid-response"


def test_an_async_executor_past_its_time_limit_is_stopped_and_its_task_fails(run_async_with, settings):
    settings.AGENT_SOFT_TIME_LIMIT = 1

    async def waits_too_long(ctx):
        await ctx.working()
        await asyncio.sleep(30)

    started = time.monotonic()
    task, outcome = run_async_with(waits_too_long)
    assert time.monotonic() - started < 5  # stopped at its limit, not after its wait
    assert outcome == "failed" and task.state == TaskState.FAILED and task.failure == "time-limit"
    assert task.status_changes.last().reason == "the agent exceeded its time limit of 1 s"


def test_an_async_executors_own_timeout_is_its_own_error_not_the_time_limit(run_async_with):
    async def gives_up(ctx):
        async with asyncio.timeout(0.01):
            await asyncio.sleep(1)

    task, outcome = run_async_with(gives_up)
    assert task.failure == "agent-error" and task.status_changes.last().reason == "the agent raised TimeoutError"


def cancel_soon(task_holder: dict, after: float) -> threading.Thread:
    """Cancel the task (as an operator would) from another thread, `after` seconds from now."""
    from django.db import connection

    def cancel():
        time.sleep(after)
        while "id" not in task_holder:
            time.sleep(0.01)
        services.task_cancel_as_operator(task_id=task_holder["id"])
        task_holder["canceled_at"] = time.monotonic()
        connection.close()

    thread = threading.Thread(target=cancel, daemon=True)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_cancel_reaches_a_waiting_async_run_on_the_run_host_within_a_second(run_with):
    holder: dict = {}

    async def waits(ctx):
        holder["id"] = ctx.task_id
        await ctx.working()
        await asyncio.sleep(30)
        await ctx.complete("never")

    canceller = cancel_soon(holder, 0.3)
    task, outcome = run_with(waits, run=on_the_run_host)
    canceller.join(5)
    assert time.monotonic() - holder["canceled_at"] < 1
    assert outcome == "closed" and task.state == TaskState.CANCELED
    assert task.status_changes.last().state == TaskState.CANCELED


@pytest.mark.parametrize("rerunnable", [True, False], ids=["rerunnable", "not rerunnable"])
def test_a_shutdown_hands_back_the_async_runs_still_waiting_after_its_grace(run_with, settings, rerunnable):
    settings.SHUTDOWN_GRACE = 0.2

    async def waits(ctx):
        await ctx.working()
        await asyncio.sleep(30)

    timer = runhost.drain(settings.SHUTDOWN_GRACE)
    try:
        started = time.monotonic()
        task, outcome = run_with(waits, rerunnable=rerunnable, run=on_the_run_host)
    finally:
        timer.cancel()
        runhost.reset()
    assert time.monotonic() - started < 5
    if rerunnable:  # as a lost run: run again with a fresh token
        assert outcome == "run-again" and task.state == TaskState.WORKING and task.run_retries == 1
        assert run_with.enqueued[-1]["run_token"] == task.run_token and task.run_claimed_at is None
    else:  # it may have acted already: failed as lost, saying why
        assert outcome == "failed" and task.failure == "worker-lost"
        assert "stopped before the agent finished" in task.status_changes.last().reason


def test_a_run_that_starts_after_the_shutdowns_grace_hands_back_without_running(run_with):
    ran = []

    async def records(ctx):
        ran.append(1)
        await ctx.complete()

    runhost.cut()
    try:
        task, outcome = run_with(records, rerunnable=True, run=on_the_run_host)
    finally:
        runhost.reset()
    assert ran == [] and outcome == "run-again" and task.run_retries == 1


@pytest.mark.django_db(transaction=True)  # it runs on a thread of the run host's, outside the test's transaction
def test_the_run_hosts_job_runs_a_sync_executor_sent_to_it(run_with):
    # e.g. a run queued before its agent's executor changed: it still runs.
    task, outcome = run_with(lambda ctx: ctx.complete("sync"), run=on_the_run_host)
    assert outcome == "done" and task.state == TaskState.COMPLETED
