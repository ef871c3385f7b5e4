"""The run host for real: daphne and a worker of the threads pool on ASYNC_RUNS_QUEUE, serving
an installed async executor that waits. Many waiting runs cost one process and take about
one wait; a cancel reaches a waiting run within a second; the time limit still holds."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.conftest import (
    ROOT,
    RUN_HOST_COMMAND,
    _free_port,
    _live_env,
    make_agent,
    serving,
    user_message,
    worker_ready,
)
from tests.test_executor_plugins import distribution

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

SLEEPY = """
import asyncio

from tasks_app.executors import AsyncAgentContext, Executor


class Sleeper(Executor):
    name = "sleeper"
    description = "Waits as many seconds as it is sent, then answers."

    async def execute(self, ctx: AsyncAgentContext) -> None:
        await ctx.working()
        await asyncio.sleep(float(ctx.text))
        await ctx.complete(artifact=f"slept {ctx.text} s", name="sleep")
"""


class RunHostStack:
    def __init__(self, url: str, logs: Path, host_pid: int) -> None:
        self.url, self.logs, self.host_pid = url, logs, host_pid

    def log(self) -> str:
        return (self.logs / "runhost.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The `sleeper` executor, installed on a path of its own, and loaded in this process."""
    import importlib

    from tasks_app.executors import REGISTRY, plugins

    site = tmp_path_factory.mktemp("site")
    distribution(site, "sleepy-agents", "sleepy_agents", SLEEPY, {"sleeper": "sleepy_agents:Sleeper"})
    registry = dict(REGISTRY)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        plugins.load_all()
        yield site
    REGISTRY.clear()
    REGISTRY.update(registry)
    plugins.load_all()


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, site):
    """One daphne and one run host, with the `sleeper` executor installed in both, on queues
    of their own (no other worker of the session takes their runs)."""
    queue = f"agentserver-test-{uuid.uuid4().hex[:8]}"
    env = {
        **_live_env(),
        "PYTHONPATH": f"{site}:{ROOT}",
        "CELERY_QUEUE": queue,
        "ASYNC_RUNS_QUEUE": f"{queue}-runs",
        "DB_POOL_MAX": "12",
        "SHUTDOWN_GRACE": "2",
    }
    logs = Path(tempfile.mkdtemp(prefix="agentserver-runhost-"))
    port = _free_port()
    with serving(env, [port], logs, worker=False):
        host = subprocess.Popen(
            [sys.executable, "-m", *RUN_HOST_COMMAND, "-Q", env["ASYNC_RUNS_QUEUE"]],
            cwd=ROOT,
            env=env,
            stdout=open(logs / "runhost.log", "wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while not worker_ready(logs / "runhost.log"):
                assert time.monotonic() < deadline, (logs / "runhost.log").read_text()[-3000:]
                time.sleep(0.1)
            yield RunHostStack(f"http://127.0.0.1:{port}", logs, host.pid)
        finally:
            if host.poll() is None:
                host.terminate()
                host.wait(15)


@pytest.fixture
def sleeper(tenant):
    tenant.allowed_executors = ["sleeper"]
    tenant.save(update_fields=["allowed_executors"])
    return make_agent(tenant, "sleeper", "sleeper")


def send(stack, key, text, *, immediately=True, timeout=30):
    params = {"message": user_message(text), "configuration": {"returnImmediately": immediately}}
    body = {"jsonrpc": "2.0", "id": "1", "method": "SendMessage", "params": params}
    headers = {"A2A-Version": "1.0", "X-API-Key": key}
    response = httpx.post(f"{stack.url}/agents/acme/sleeper/", json=body, headers=headers, timeout=timeout)
    assert response.status_code == 200, response.text
    return response.json()["result"]["task"]


def test_many_waiting_runs_take_about_one_wait_on_one_run_host(stack, sleeper, alice_key):
    from tasks_app.models import RunHolder, Task

    runs, wait = 60, 2.0
    started = time.monotonic()
    with httpx.Client() as client:
        body = {"jsonrpc": "2.0", "id": "1", "method": "SendMessage"}
        headers = {"A2A-Version": "1.0", "X-API-Key": alice_key}
        for _ in range(runs):
            params = {"message": user_message(str(wait)), "configuration": {"returnImmediately": True}}
            sent = client.post(f"{stack.url}/agents/acme/sleeper/", json={**body, "params": params}, headers=headers)
            assert sent.status_code == 200, sent.text
    sending = time.monotonic() - started
    done = Task.objects.none()
    while time.monotonic() - started < sending + 4 * wait:
        done = Task.objects.filter(agent=sleeper, state="completed")
        if done.count() == runs:
            break
        time.sleep(0.2)
    makespan = time.monotonic() - started
    # One at a time (a prefork child each) would take runs x wait; all at once, one wait after the last send.
    assert done.count() == runs, (makespan, Task.objects.filter(agent=sleeper).values_list("state", flat=True))
    assert makespan < sending + 3 * wait, (sending, makespan)
    # Claimed by the run host's one process, which beats.
    holders = set(Task.objects.filter(agent=sleeper).values_list("run_holder", flat=True))
    assert len(holders) == 1 and RunHolder.objects.get(pk=holders.pop()).pid == stack.host_pid


def test_a_cancel_reaches_a_waiting_run_within_a_second(stack, sleeper, alice_key):
    from tasks_app.models import Task

    task = send(stack, alice_key, "30")
    deadline = time.monotonic() + 10
    while Task.objects.get(pk=task["id"]).state != "working":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    body = {"jsonrpc": "2.0", "id": "1", "method": "CancelTask", "params": {"id": task["id"]}}
    headers = {"A2A-Version": "1.0", "X-API-Key": alice_key}
    canceled = httpx.post(f"{stack.url}/agents/acme/sleeper/", json=body, headers=headers, timeout=10)
    assert canceled.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    asked = time.monotonic()
    # The run's job ends "closed" (its coroutine cancelled), 28 s before its wait would have.
    ended = re.compile(r"run_agent_async\[[^\]]+\] succeeded in [0-9.]+s: 'closed'")
    while not ended.search(stack.log()):
        assert time.monotonic() - asked < 1.0, stack.log()[-2000:]
        time.sleep(0.02)
    assert Task.objects.get(pk=task["id"]).state == "canceled"


def test_a_waiting_run_past_its_time_limit_fails_with_the_time_limit(stack, sleeper, alice_key):
    from tasks_app.models import Task

    started = time.monotonic()
    task = send(stack, alice_key, "20", immediately=False)  # the live stack's limit is 3 s
    assert task["status"]["state"] == "TASK_STATE_FAILED" and time.monotonic() - started < 10
    stored = Task.objects.get(pk=task["id"])
    assert stored.failure == "time-limit"
    assert stored.status_changes.last().reason == "the agent exceeded its time limit of 3 s"


def test_a_warm_shutdown_finishes_the_runs_within_its_grace_and_hands_back_the_rest(stack, sleeper, alice_key):
    # Last: it stops the module's run host.
    import os
    import signal

    from tasks_app.models import Task

    short, long = send(stack, alice_key, "1"), send(stack, alice_key, "30")
    deadline = time.monotonic() + 10
    while Task.objects.filter(pk__in=[short["id"], long["id"]], state="working").count() < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(stack.host_pid, signal.SIGTERM)
    stopping = time.monotonic()
    while os.waitpid(stack.host_pid, os.WNOHANG) == (0, 0):
        assert time.monotonic() - stopping < 8, stack.log()[-2000:]  # the grace is 2 s
        time.sleep(0.1)
    assert Task.objects.get(pk=short["id"]).state == "completed"  # finished within the grace
    cut = Task.objects.get(pk=long["id"])  # not rerunnable: failed as lost, saying why
    assert cut.state == "failed" and cut.failure == "worker-lost"
    assert "stopped before the agent finished (its grace of 2 s)" in cut.status_changes.last().reason


def test_the_embedded_modes_threads_run_async_executors(django_db_setup, site, sleeper, alice_key):
    # No broker and no worker: the web process runs its jobs on threads (BACKGROUND_WORK=threads).
    env = {**_live_env(), "PYTHONPATH": f"{site}:{ROOT}", "REDIS_URL": "", "BACKGROUND_WORK": "threads"}
    logs = Path(tempfile.mkdtemp(prefix="agentserver-embedded-"))
    port = _free_port()
    with serving(env, [port], logs, worker=False):
        task = send(RunHostStack(f"http://127.0.0.1:{port}", logs, 0), alice_key, "0.2", immediately=False)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "slept 0.2 s"}]
