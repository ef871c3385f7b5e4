"""Interop: the official A2A 0.3 Python client (a2a-sdk 0.3.26, in a venv of its own: the
project's holds a2a-sdk 1.x) discovers the conformance agent by its host name alone, as 0.3
clients do (the card at the root of the host, read without naming a version) and runs send,
stream, get, cancel and resubscribe against the live stack (daphne, a Celery worker, Postgres,
Redis). The client is tests/sdk03/client.py, run by that venv's Python; it reports each step
as a line of JSON.

The venv is made once per machine (pip, from tests/sdk03/requirements.txt) and kept where
A2A_SDK03_VENV says, else in ~/.cache, stamped by the requirements' hash (as the 0.3 suite's
run.sh keeps its own).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accounts.host_services import host_bind

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

HERE = Path(__file__).resolve().parent / "sdk03"
REQUIREMENTS = HERE / "requirements.txt"
HOST = "conformance.localhost"


@pytest.fixture(scope="session")
def sdk03_python() -> Path:
    venv = Path(os.environ.get("A2A_SDK03_VENV") or Path.home() / ".cache" / "agentserver-a2a-sdk03-venv").expanduser()
    stamp = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    python = venv / "bin" / "python"
    if (venv / ".stamp").is_file() and (venv / ".stamp").read_text() == stamp and python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True, timeout=600)
    (venv / ".stamp").write_text(stamp)
    return python


def test_the_a2a_sdk_0_3_client_discovers_an_agent_by_its_host_name_and_runs_every_method(
    live, conformance_agent, sdk03_python
):
    host_bind(agent=conformance_agent, host=HOST, card_version="0.3")
    port = live.url.rpartition(":")[2]
    base = f"http://{HOST}:{port}"
    done = subprocess.run(
        [str(sdk03_python), str(HERE / "client.py"), base, "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    steps = {line["step"]: line for line in map(json.loads, done.stdout.splitlines())}

    assert steps["card"] == {"step": "card", "url": f"{base}/", "protocol_version": "0.3.0", "transport": "JSONRPC"}
    assert steps["send"]["state"] == "completed" and steps["send"]["artifacts"] == ["text-artifact"]
    assert steps["get"] == {"step": "get", "id": steps["send"]["id"], "state": "completed"}
    assert steps["stream"]["state"] == "completed"
    assert "TaskArtifactUpdateEvent" in steps["stream"]["events"]
    assert steps["cancel"]["before"] == "input-required" and steps["cancel"]["state"] == "canceled"
    assert steps["resubscribe"]["before"] in ("submitted", "working")
    assert steps["resubscribe"]["state"] == "canceled" and steps["resubscribe"]["events"] >= 2
    # Every request came by the name, and reached the one agent bound to it.
    ids = {steps[s]["id"] for s in ("send", "stream", "cancel", "resubscribe")}
    assert {str(pk) for pk in conformance_agent.tasks.filter(pk__in=ids).values_list("pk", flat=True)} == ids
