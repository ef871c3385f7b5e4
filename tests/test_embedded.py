"""The embedded mode (SQLite, agents run in-process) serves the same requests end to end.

It runs in a subprocess: the suite's own settings are Postgres', and the embedded mode is
chosen at settings time. On SQLite the store takes its ORM path (tasks_app.sql is Postgres only).
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, _free_port, run_embedded, serving
from tests.test_aip import message, new_id

SCRIPT = r"""
import json, sys, uuid
import django
django.setup()
from django.core.management import call_command
from django.test import Client

call_command("migrate", verbosity=0)
call_command("seed_demo")
from accounts.models import Tenant
from accounts.services import api_key_create
key = api_key_create(tenant=Tenant.objects.get(slug="demo"), name="t", principal="t")[1]
client = Client()

def rpc(method, params):
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    r = client.post("/agents/demo/echo/", data=json.dumps(body), content_type="application/json",
                    headers={"A2A-Version": "1.0", "X-API-Key": key})
    return r.json()

message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hi"}]}
sent = rpc("SendMessage", {"message": message})["result"]["task"]
fetched = rpc("GetTask", {"id": sent["id"]})["result"]
print(json.dumps({"sent": sent, "fetched": fetched}))
"""


def test_the_embedded_mode_answers_a_blocking_send_message_and_get_task(tmp_path):
    result = run_embedded(SCRIPT, tmp_path)
    sent, fetched = result["sent"], result["fetched"]
    assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
    assert sent["artifacts"][0]["parts"] == [{"text": "echo: hi"}]
    assert fetched["id"] == sent["id"] and fetched["artifacts"] == sent["artifacts"]
    assert [m["role"] for m in fetched["history"]] == ["ROLE_USER"]


REGISTRY_SCRIPT = r"""
import json
import django
django.setup()
from django.core.management import call_command
from django.test import Client

call_command("migrate", verbosity=0)
call_command("seed_demo")
call_command("approve_entries", "demo")
client = Client()
api = client.get("/api/registry/agents/", {"q": "echo", "binding": "JSONRPC"})
page = client.get("/registry/", {"q": "echo"})
print(json.dumps({"api": api.status_code, "names": [e["name"] for e in api.json()["results"]],
                  "page": page.status_code, "page_has_echo": "echo" in page.content.decode().lower()}))
"""


def test_the_embedded_mode_lists_and_searches_the_directory_without_postgres(tmp_path):
    # SQLite has no full-text search: words are matched with LIKE, filters the same way.
    result = run_embedded(REGISTRY_SCRIPT, tmp_path)
    assert result["api"] == 200 and "Echo" in result["names"]
    assert result["page"] == 200 and result["page_has_echo"]


READY_SCRIPT = r"""
import json
import django
django.setup()
from django.core.management import call_command
from django.test import Client

call_command("migrate", verbosity=0)
answer = Client().get("/readyz")
print(json.dumps({"status": answer.status_code, "body": answer.json()}))
"""


def test_the_embedded_mode_s_readiness_names_its_database_sqlite(tmp_path):
    result = run_embedded(READY_SCRIPT, tmp_path)
    assert result["status"] == 200
    assert result["body"]["checks"] == {"sqlite": {"ok": True}, "redis": {"ok": True}, "queue": {"ok": True}}


# --- the embedded mode served by daphne: agents on its threads, wake-ups in-process ------------
# The rest of the live tests run against these threads too, on Postgres without Redis
# (tests/conftest.py `live_each_mode`); these run the embedded mode whole, on SQLite.

SLOW = "test-resubscribe-message-id-"  # the conformance agent works ~4 s, looking for a cancel


def _embedded_env(tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AGENTSERVER_EMBEDDED": "1",
        "SQLITE_PATH": str(tmp / "db.sqlite3"),
        "DJANGO_SETTINGS_MODULE": "agentserver.settings",
        "PYTHONUNBUFFERED": "1",
        "SSE_HEARTBEAT": "1",
        "HINT_FALLBACK_POLL": "30",  # a wait that ends sooner was woken in-process, not by a poll
    }


@dataclass
class Embedded:
    base: str
    key: str
    daphne: subprocess.Popen
    logs: Path

    def log(self) -> str:
        return (self.logs / "web0.log").read_text(errors="replace")


@contextmanager
def embedded_server(tmp: Path) -> Iterator[Embedded]:
    """Migrate and seed an embedded store in `tmp`, then serve it with daphne alone."""
    env = _embedded_env(tmp)
    manage = [sys.executable, "manage.py"]
    # A bound, not a wait (a busy machine has taken over 120 s to migrate SQLite).
    subprocess.run([*manage, "migrate", "--noinput"], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    seeded = subprocess.run(
        [*manage, "seed_demo", "--json"], cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=60
    )
    key = json.loads(seeded.stdout.strip().splitlines()[-1])["api_key"]
    port = _free_port()
    with serving(env, [port], tmp, worker=False) as procs:
        yield Embedded(f"http://127.0.0.1:{port}", key, procs[0], tmp)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory) -> Iterator[Embedded]:
    with embedded_server(tmp_path_factory.mktemp("embedded")) as served:
        yield served


def rpc(base: str, path: str, method: str, params: dict, key: str | None = None) -> dict[str, Any]:
    headers = {"A2A-Version": "1.0", **({"X-API-Key": key} if key else {})}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = httpx.post(f"{base}{path}", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def slow_message() -> dict[str, Any]:
    return {"messageId": f"{SLOW}{uuid.uuid4()}", "role": "ROLE_USER", "parts": [{"text": "take your time"}]}


def state_of(base: str, task_id: str) -> str:
    return rpc(base, "/agents/demo/conformance/", "GetTask", {"id": task_id})["result"]["status"]["state"]


def until_state(base: str, task_id: str, state: str, seconds: float = 15) -> float:
    """Seconds until the task reached `state`."""
    started = time.monotonic()
    while (now := time.monotonic()) - started < seconds:
        if state_of(base, task_id) == state:
            return now - started
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} is {state_of(base, task_id)}, not {state}, after {seconds} s")


def send_slowly(base: str) -> str:
    params = {"message": slow_message(), "configuration": {"returnImmediately": True}}
    return rpc(base, "/agents/demo/conformance/", "SendMessage", params)["result"]["task"]["id"]


def test_return_immediately_answers_while_the_agent_still_works_on_a_thread(embedded):
    started = time.monotonic()
    params = {"message": slow_message(), "configuration": {"returnImmediately": True}}
    task = rpc(embedded.base, "/agents/demo/conformance/", "SendMessage", params)["result"]["task"]
    answered = time.monotonic() - started
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING") and answered < 2
    assert until_state(embedded.base, task["id"], "TASK_STATE_COMPLETED") > 2  # the agent takes ~4 s


def test_a_stream_carries_each_event_when_the_agent_writes_it(embedded):
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": slow_message()}}
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    with httpx.stream(
        "POST", f"{embedded.base}/agents/demo/conformance/", json=body, headers={"A2A-Version": "1.0"}, timeout=30
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                result = json.loads(line[5:])["result"]
                state = (result.get("task") or result.get("statusUpdate") or {}).get("status", {}).get("state")
                arrivals.append((time.monotonic() - started, state))
    states = [state for _, state in arrivals]
    assert states[-2:] == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], states
    # "working" reached the client while the agent was still at work, ~4 s before the end.
    assert arrivals[-1][0] - arrivals[-2][0] > 3, arrivals


def test_a_cancel_reaches_the_agent_running_on_a_thread(embedded):
    closed_before = embedded.log().count("'closed'")
    task_id = send_slowly(embedded.base)
    until_state(embedded.base, task_id, "TASK_STATE_WORKING")
    canceled = rpc(embedded.base, "/agents/demo/conformance/", "CancelTask", {"id": task_id})["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    # The agent polls for a cancel every 0.1 s: its run ends 'closed', long before its 4 s.
    deadline = time.monotonic() + 2
    while embedded.log().count("'closed'") == closed_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert embedded.log().count("'closed'") == closed_before + 1
    assert state_of(embedded.base, task_id) == "TASK_STATE_CANCELED"


def test_an_aip_task_left_awaiting_input_is_canceled_at_its_timeout_by_the_timer_thread(embedded):
    task_id = new_id()
    params = {"message": message("start", task_id, "hello", commandParams={"awaitingInputTimeout": 500})}

    def aip(params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "rpc", "params": params}
        response = httpx.post(
            f"{embedded.base}/agents/demo/writer/aip/rpc", json=body, headers={"X-API-Key": embedded.key}, timeout=30
        )
        return response.json()["result"]

    assert aip(params)["status"]["state"] == "awaiting-input"  # the writer asks what to write
    # The timeout's job is due after 0.5 s; beat's sweep would take 15 s, so 10 s tells them apart.
    deadline = time.monotonic() + 10
    while (task := aip({"message": message("get", task_id)}))["status"]["state"] != "canceled":
        assert time.monotonic() < deadline, task["status"]
        time.sleep(0.1)
    assert "awaitingInputTimeout of 500 ms" in task["status"]["dataItems"][0]["text"]


def test_on_sigterm_a_run_begun_finishes_before_the_process_exits(tmp_path):
    with embedded_server(tmp_path) as served:
        task_id = send_slowly(served.base)
        until_state(served.base, task_id, "TASK_STATE_WORKING")
        served.daphne.send_signal(signal.SIGTERM)
        assert served.daphne.wait(15) == 0
    with sqlite3.connect(tmp_path / "db.sqlite3") as db:
        (state,) = db.execute("select state from tasks_app_task where id = ?", (task_id.replace("-", ""),)).fetchone()
    assert state == "completed", served.log()[-3000:]
