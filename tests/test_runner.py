"""Running an executor: whatever it does, its task ends settled, never stuck."""

import signal
import uuid

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from accounts.selectors import Principal
from tasks_app import runner, services
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

    def go(execute, text="hello", rerunnable=False):
        name = f"test-{uuid.uuid4().hex[:8]}"
        REGISTRY[name] = type(
            "E", (Executor,), {"name": name, "rerunnable": rerunnable, "execute": lambda self, ctx: execute(ctx)}
        )
        registered.append(name)
        agent = make_agent(tenant, name, name)
        message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": text}])
        task, _ = services.message_receive(agent=agent, principal=Principal("alice", api_key_id=1), message=message)
        outcome = runner.run(task_id=task.pk, run_token=str(task.run_token))
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
    assert run_with.enqueued[1:] == [{"task_id": task.pk, "run_token": task.run_token}]  # after the first run's
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
