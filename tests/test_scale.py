"""Scale-out with the real processes, as `docker compose up --scale web=3 --scale worker=3` runs
them (this machine has no Docker engine to run the compose file itself): three daphne processes,
three Celery workers and two beats, on one Postgres and one Redis. Any web process serves any
stream, the workers share the runs and each run happens once, every web process's /metrics sums
them all, and two beats' sweeps never run at once."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import (
    ROOT,
    STARTUP_TIMEOUT,
    WORKER_COMMAND,
    _free_port,
    _live_env,
    _wait_for,
    make_agent,
    serving,
    stop,
    user_message,
    worker_ready,
)
from tests.test_live_streaming import WRITER_EVENTS, describe, stream

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

BEAT_COMMAND = ["celery", "-A", "agentserver", "beat", "-l", "info"]


@dataclass
class Scaled:
    urls: list[str]
    logs: Path

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def scaled(django_db_setup, django_db_blocker) -> Iterator[Scaled]:
    logs = Path(tempfile.mkdtemp(prefix="agentserver-scale-"))
    env = {
        **_live_env(),
        # A queue of their own: the session's live worker must not take these runs.
        "CELERY_QUEUE": f"scale-{uuid.uuid4().hex[:8]}",
        "SWEEP_EVERY": "0.5",
        "SWEEP_UNCLAIMED_AFTER": "1",
    }
    ports = [_free_port() for _ in range(3)]
    others: list[subprocess.Popen] = []
    with serving(env, ports, logs) as _:
        try:
            for i in (1, 2):  # two more workers (serving starts one) and two beats
                others.append(_start([*WORKER_COMMAND, "-n", f"scale{i}@%h"], env, logs / f"worker{i}.log"))
            for i in (0, 1):
                beat = [*BEAT_COMMAND, "-s", str(logs / f"beat{i}-schedule"), "--pidfile="]
                others.append(_start(beat, env, logs / f"beat{i}.log"))
            for i in (1, 2):
                _wait_for(lambda i=i: worker_ready(logs / f"worker{i}.log"), STARTUP_TIMEOUT, f"worker {i}", logs)
            yield Scaled(urls=[f"http://127.0.0.1:{port}" for port in ports], logs=logs)
        finally:
            stop(others)


@pytest.fixture
def slow_writer(tenant):
    return make_agent(tenant, "slowwriter", "writer", settings={"delay": 0.25, "paragraphs": 4})


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", *command], cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT
    )


def call(base: str, method: str, params: dict, key: str) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"A2A-Version": "1.0", "X-API-Key": key}
    response = httpx.post(f"{base}/agents/acme/echo/", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["result"]


def metric(base: str, name: str, labels: str = "") -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_stream_begun_on_one_web_process_is_followed_and_resumed_on_the_others(scaled, slow_writer, alice_key):
    one, two, three = scaled.urls
    path = "/agents/acme/slowwriter/"
    with stream(
        one, path, "SendStreamingMessage", {"message": user_message("a story about ports")}, key=alice_key
    ) as sent:
        first = next(sent)
        task_id = first[1]["task"]["id"]
        with stream(two, path, "SubscribeToTask", {"id": task_id}, key=alice_key) as follower:
            second = next(sent)  # then the sender's connection drops
            followed = list(follower)
    with stream(three, path, "SubscribeToTask", {"id": task_id}, key=alice_key, last_event_id=second[0]) as rest:
        resumed = list(rest)
    assert [describe(r) for _, r in [first, second, *resumed]] == WRITER_EVENTS
    snapshot_id = followed[0][0]
    assert followed[1:] == [(i, r) for i, r in [first, second, *resumed] if i > snapshot_id]


def test_runs_sent_to_every_web_process_are_shared_by_the_workers_and_each_runs_once(scaled, echo_agent, alice_key):
    from tasks_app.models import StatusChange

    done_before = metric(scaled.urls[0], "agentserver_runs_total", '{outcome="done"}')
    params = {"configuration": {"returnImmediately": True}}
    ids = [
        call(scaled.urls[n % 3], "SendMessage", {"message": user_message(f"n{n}"), **params}, alice_key)["task"]["id"]
        for n in range(30)
    ]
    deadline = time.monotonic() + 30
    while StatusChange.objects.filter(task_id__in=ids, state="completed").count() < 30:
        assert time.monotonic() < deadline, "not every run completed"
        time.sleep(0.2)
    for task_id in ids:
        states = list(StatusChange.objects.filter(task_id=task_id).order_by("id").values_list("state", flat=True))
        assert states.count("completed") == 1 and states.count("working") <= 1, states
    ran = [scaled.log(name).count("run_agent[") for name in ("worker", "worker1", "worker2")]
    assert sum(1 for count in ran if count) >= 2, f"runs per worker: {ran}"
    # Any web process's /metrics sums the counts of every worker's children.
    counted = metric(scaled.urls[2], "agentserver_runs_total", '{outcome="done"}') - done_before
    assert counted >= 30


@contextmanager
def taken(leases, name: str, *, seconds: float) -> Iterator[None]:
    """Hold the lease `name`, waiting for a beat's sweep that holds it now to let go: the beats
    sweep every 0.5 s, so the first try may land inside one."""
    deadline = time.monotonic() + 5
    while True:
        with leases.lease(name, seconds=seconds) as held:
            if held:
                yield
                return
        assert time.monotonic() < deadline, f"the lease {name} was never free"
        time.sleep(0.01)


def test_two_beats_sweep_one_at_a_time_and_a_held_lease_holds_both_back(scaled, echo_agent, monkeypatch):
    from accounts.selectors import Principal
    from tasks_app import dispatch, leases, services
    from tasks_app.domain import NewMessage
    from tasks_app.models import Task

    skipped = 'agentserver_sweeps_skipped_total{sweep="sweep-stuck-work"}'
    with taken(leases, "sweep-stuck-work", seconds=30):  # a sweep "running" elsewhere
        skipped_before = metric(scaled.urls[0], skipped)
        monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)  # the broker "was down" at commit
        message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "lost"}])
        task, _ = services.message_receive(
            agent=echo_agent, principal=Principal("alice", api_key_id=1), message=message
        )
        monkeypatch.undo()
        time.sleep(3)  # both beats send a sweep every 0.5 s; the run is due after 1 s
        assert Task.objects.get(pk=task.pk).state == "submitted"
        assert metric(scaled.urls[1], skipped) - skipped_before >= 4
    deadline = time.monotonic() + 15
    while Task.objects.get(pk=task.pk).state != "completed":
        assert time.monotonic() < deadline, "the sweepers never sent the run once the lease was free"
        time.sleep(0.1)
    states = list(task.status_changes.order_by("id").values_list("state", flat=True))
    assert states == ["submitted", "completed"]  # the echo agent completes at once, and it ran once
    assert "beat: Starting" in scaled.log("beat0") and "beat: Starting" in scaled.log("beat1")
