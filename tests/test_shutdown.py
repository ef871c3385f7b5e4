"""SIGTERM to daphne and to a Celery worker, across the real thing: processes of the test's own
beside the live stack, sharing its Postgres and Redis."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import orjson
import pytest

from tests.conftest import (
    ROOT,
    STARTUP_TIMEOUT,
    WORKER_COMMAND,
    _free_port,
    _wait_for,
    daphne_command,
    make_agent,
    serves,
    user_message,
    worker_ready,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

PATH = "/agents/acme/longwriter/"


def _headers(key: str, **extra: str) -> dict[str, str]:
    return {"A2A-Version": "1.0", "X-API-Key": key, **extra}


def _rpc(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}


def _sse_lines(base: str, body: dict, key: str, into: list[str], **headers: str) -> None:
    with httpx.stream("POST", f"{base}{PATH}", json=body, headers=_headers(key, **headers), timeout=30) as response:
        assert response.status_code == 200
        into.extend(response.iter_lines())


def _events(lines: list[str]) -> list[tuple[int, dict]]:
    ids = [int(line[3:]) for line in lines if line.startswith("id:")]
    data = [orjson.loads(line[5:]) for line in lines if line.startswith("data:")]
    assert len(ids) == len(data) and all("result" in d for d in data), lines
    return list(zip(ids, (d["result"] for d in data), strict=True))


def _start(live, name: str, command: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    log = live.logs / f"{name}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", *command],
        cwd=ROOT,
        env={**live.env, **env},
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )
    return proc, log


def _daphne(live, env: dict[str, str]) -> tuple[subprocess.Popen, str, Path]:
    port = _free_port()
    proc, log = _start(live, f"shutdown-web-{port}", daphne_command(port), env)
    base = f"http://127.0.0.1:{port}"
    _wait_for(lambda: serves(base), STARTUP_TIMEOUT, "daphne", live.logs)
    return proc, base, log


def _worker(live, env: dict[str, str], name: str) -> tuple[subprocess.Popen, Path]:
    proc, log = _start(live, name, WORKER_COMMAND, env)
    _wait_for(lambda: worker_ready(log), STARTUP_TIMEOUT, "the worker", live.logs)
    return proc, log


@pytest.fixture
def stopped_at_the_end():
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def own_daphne(live, stopped_at_the_end):
    proc, base, log = _daphne(live, {"SHUTDOWN_GRACE": "10"})
    stopped_at_the_end.append(proc)
    return proc, base, log


def test_sigterm_ends_streams_with_a_last_word_finishes_requests_in_flight_and_stops_listening(
    live, own_daphne, tenant, alice_key
):
    proc, base, log = own_daphne
    make_agent(tenant, "longwriter", "writer", settings={"delay": 0.3, "paragraphs": 6})  # ~2.4 s a run

    streamed: list[str] = []
    streaming = threading.Thread(
        target=_sse_lines,
        args=(base, _rpc("SendStreamingMessage", {"message": user_message("a poem about tides")}), alice_key, streamed),
    )
    answered: list[httpx.Response] = []
    blocking = threading.Thread(
        target=lambda: answered.append(
            httpx.post(
                f"{base}{PATH}",
                json=_rpc("SendMessage", {"message": user_message("a poem about the sea")}),
                headers=_headers(alice_key),
                timeout=30,
            )
        )
    )
    streaming.start()
    blocking.start()
    _wait_for(lambda: any(line.startswith("id: 3") for line in streamed), 15, "the stream's first events", live.logs)

    proc.send_signal(signal.SIGTERM)
    streaming.join(5)
    assert not streaming.is_alive(), "the stream did not end on SIGTERM"
    # The stream ended in an orderly way, its last word a comment that says what to do.
    assert streamed[-2].startswith(": the server is shutting down; resubscribe"), streamed[-4:]
    with pytest.raises(httpx.ConnectError):  # nothing listens any more
        httpx.get(f"{base}/healthz", timeout=2)

    # The blocking request in flight got its whole answer, then daphne stopped by itself.
    blocking.join(15)
    assert answered and answered[0].status_code == 200
    assert answered[0].json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert proc.wait(10) == 0
    assert "drained in" in log.read_text()

    # Resubscribing elsewhere with the last event's id gives the rest of the task, nothing twice.
    before = _events(streamed)
    task_id = before[0][1]["task"]["id"]
    rest: list[str] = []
    _sse_lines(
        live.url, _rpc("SubscribeToTask", {"id": task_id}), alice_key, rest, **{"Last-Event-ID": str(before[-1][0])}
    )
    after = [(seq, result) for seq, result in _events(rest) if "task" not in result]
    seqs = [seq for seq, _ in before + after]
    assert seqs == list(range(1, seqs[-1] + 1))
    assert after[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_request_that_reaches_a_draining_process_is_told_to_come_back(live, own_daphne, tenant, alice_key):
    proc, base, _ = own_daphne
    make_agent(tenant, "longwriter", "writer", settings={"delay": 0.3, "paragraphs": 6})
    with httpx.Client(base_url=base, headers=_headers(alice_key), timeout=30) as client:
        assert client.get("/healthz").status_code == 200  # the connection is open before the drain
        blocking = threading.Thread(
            target=lambda: httpx.post(
                f"{base}{PATH}",
                json=_rpc("SendMessage", {"message": user_message("a poem about the moon")}),
                headers=_headers(alice_key),
                timeout=30,
            )
        )
        blocking.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        body = _rpc("GetTask", {"id": str(uuid.uuid4())})
        refused = client.post(PATH, json=body)
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
    assert refused.headers["Connection"] == "close"
    assert refused.json()["id"] == body["id"]
    assert "shutting down" in refused.json()["error"]["message"]
    blocking.join(15)
    assert proc.wait(10) == 0


def test_a_second_sigterm_stops_at_once(live, own_daphne, tenant, alice_key):
    proc, base, log = own_daphne
    make_agent(tenant, "longwriter", "writer", settings={"delay": 0.3, "paragraphs": 6})
    outcome: list[object] = []

    def send() -> None:
        try:
            outcome.append(
                httpx.post(
                    f"{base}{PATH}",
                    json=_rpc("SendMessage", {"message": user_message("a poem about waves")}),
                    headers=_headers(alice_key),
                    timeout=30,
                )
            )
        except httpx.HTTPError as exc:
            outcome.append(exc)

    blocking = threading.Thread(target=send)
    blocking.start()
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(5) == 0 and time.monotonic() - started < 3
    assert "second SIGTERM" in Path(log).read_text()
    blocking.join(30)
    assert isinstance(outcome[0], httpx.RemoteProtocolError)  # cut off, as asked


def test_sigterm_to_a_worker_finishes_the_runs_it_began_and_hands_back_the_rest(
    live, tenant, alice_key, stopped_at_the_end
):
    from tasks_app.models import Task

    make_agent(tenant, "longwriter", "writer", settings={"delay": 0.3, "paragraphs": 6})
    env = {"CELERY_QUEUE": f"shutdown-{uuid.uuid4().hex}"}  # these processes' work, and no one else's
    web, base, _ = _daphne(live, env)
    first, first_log = _worker(live, env, "shutdown-worker-1")
    stopped_at_the_end.extend([web, first])
    ids = []
    for n in range(8):
        body = _rpc(
            "SendMessage",
            {"message": user_message(f"a poem about tide {n}"), "configuration": {"returnImmediately": True}},
        )
        ids.append(
            httpx.post(f"{base}{PATH}", json=body, headers=_headers(alice_key), timeout=10).json()["result"]["task"][
                "id"
            ]
        )
    _wait_for(lambda: Task.objects.filter(pk__in=ids, state="working").count() == 2, 10, "two runs", live.logs)
    _wait_for(lambda: first_log.read_text().count("] received") == 8, 10, "all eight taken", live.logs)

    first.send_signal(signal.SIGTERM)
    assert first.wait(10) == 0  # the two runs took ~2.4 s: well within their soft limit
    began = Task.objects.filter(pk__in=ids).exclude(state="submitted")
    assert {t.state for t in began} == {"completed"} and began.count() == 2
    assert "Restoring 6 unacknowledged message(s)" in first_log.read_text()

    # The six it had taken but not begun are back on the queue: the next worker runs them now,
    # not the sweeper a while later (none runs here).
    second, _ = _worker(live, env, "shutdown-worker-2")
    stopped_at_the_end.append(second)
    _wait_for(lambda: Task.objects.filter(pk__in=ids, state="completed").count() == 8, 20, "the rest", live.logs)
