"""Worker liveness across the real thing: daphne, a Celery worker's prefork children that beat,
and beat's lost-runs sweep. A run whose worker process is SIGKILLed, or SIGSTOPped, runs again
on another child within seconds of the fault, whatever the run's time limit; the stopped process's
writes after it is woken are refused; the task completes once, its event log whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, _free_port, _live_env, make_agent, serving, stop, user_message

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

# The liveness timeout of this stack: shorter than production's 10 s so that the tests take
# seconds, not tens of them; a run must be claimed again within it, a check interval and a
# heartbeat of the fault (with production's figures, 10 + 2 + 2 < 15 s: docs/faults.md).
TIMEOUT, EVERY = 5, 1
WITHIN = TIMEOUT + EVERY + EVERY + 1.0


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker):
    """A daphne, a worker of two children and beat, with production's time limits (a run may
    take two minutes: only liveness can take it back in seconds) and their own queue."""
    port = _free_port()
    logs = Path(tempfile.mkdtemp(prefix="agentserver-liveness-"))
    env = {
        **_live_env(),
        "CELERY_QUEUE": f"agentserver-liveness-{os.getpid()}",
        "AGENT_SOFT_TIME_LIMIT": "120",
        "AGENT_TIME_LIMIT": "135",
        "SWEEP_UNCLAIMED_AFTER": "30",
        "RUN_LIVENESS_TIMEOUT": str(TIMEOUT),
        "RUN_HEARTBEAT_EVERY": str(EVERY),
        "RUN_LIVENESS_CHECK_EVERY": str(EVERY),
    }
    beat = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentserver", "beat", "-l", "info", "-s", str(logs / "schedule")],
        cwd=ROOT,
        env=env,
        stdout=open(logs / "beat.log", "wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        with serving(env, [port], logs) as procs:
            yield f"http://127.0.0.1:{port}", procs[-1].pid, logs
    finally:
        stop([beat])


def _call(url, path, method, params, key):
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"A2A-Version": "1.0", "X-API-Key": key}
    return httpx.post(f"{url}{path}", json=body, headers=headers, timeout=30).json()


def _until(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {timeout} s")


def _started_slow_run(url, tenant, key):
    """A writer's run, long enough to be caught mid-way (several seconds between its chunks),
    and the pid of the worker child that holds it."""
    from tasks_app.models import RunHolder, Task

    make_agent(tenant, "slow-writer", "writer", settings={"delay": 1.5, "paragraphs": 3})
    params = {"message": user_message("a poem about rivers"), "configuration": {"returnImmediately": True}}
    task_id = _call(url, "/agents/acme/slow-writer/", "SendMessage", params, key)["result"]["task"]["id"]
    task = _until("the run's claim", lambda: Task.objects.filter(pk=task_id, run_claimed_at__isnull=False).first(), 20)
    holder = _until("the holder's beat", lambda: RunHolder.objects.filter(pk=task.run_holder).first(), 10)
    return task, holder.pid


def _claimed_again(task):
    from tasks_app.models import Task

    return Task.objects.filter(pk=task.pk, run_retries=1, run_claimed_at__isnull=False).first()


def _completed(task):
    from tasks_app.models import Task

    return Task.objects.filter(pk=task.pk, state="completed").first()


def _assert_completed_once(task):
    done = _until("the task's completion", lambda: _completed(task), 60)
    events = list(done.events.order_by("seq").values_list("seq", "kind", "payload"))
    assert [seq for seq, _, _ in events] == list(range(1, done.last_seq + 1))  # no gap, no duplicate
    assert [kind for _, kind, _ in events].count("status") >= 2
    [artifact] = done.artifacts.all()
    assert artifact.complete
    return done, artifact


def test_a_run_whose_worker_child_is_killed_runs_again_on_another_within_seconds(stack, tenant, alice_key):
    url, worker_pid, _ = stack
    task, pid = _started_slow_run(url, tenant, alice_key)
    assert pid != worker_pid  # a prefork child, not the worker's main process
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    again = _until("the run claimed again", lambda: _claimed_again(task), WITHIN + 5)
    assert time.monotonic() - killed <= WITHIN
    assert again.run_holder != task.run_holder and again.run_token != task.run_token
    done, _ = _assert_completed_once(task)
    assert done.run_retries == 1


def test_a_stopped_worker_child_loses_its_run_and_its_writes_after_it_wakes_are_refused(stack, tenant, alice_key):
    from tasks_app.models import Task, TaskEvent

    url, _, logs = stack
    task, pid = _started_slow_run(url, tenant, alice_key)
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        again = _until("the run claimed again", lambda: _claimed_again(task), WITHIN + 5)
        assert time.monotonic() - stopped <= WITHIN
        taken_at = Task.objects.get(pk=task.pk).run_claimed_at
        time.sleep(2)  # the new run writes while the old one is still stopped
    finally:
        os.kill(pid, signal.SIGCONT)
    done, artifact = _assert_completed_once(task)
    assert done.run_token == again.run_token and done.run_retries == 1
    # The woken child went on with its agent; the store refused what it wrote (its token is
    # not the task's), so after the take-over the log holds one run's events, and the artifact
    # one run's chunks.
    after = TaskEvent.objects.filter(task_id=task.pk, created_at__gte=taken_at, kind="artifact").count()
    assert after == 3 == len(artifact.parts)
    _until("the woken run's end", lambda: "'closed'" in (logs / "worker.log").read_text(errors="replace"), 20)
