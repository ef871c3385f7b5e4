"""The README's run command (`make run`, scripts/run.sh) on a machine where neither Postgres nor
Redis can be reached: it falls back to the embedded mode, says so, and serves the demo agents;
then Ctrl-C or SIGTERM to the whole process group stops it cleanly."""

import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import orjson
import pytest

from tests.conftest import _free_port

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parent.parent


def _ctrl_c_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _lines_of(proc: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _read_until(lines: queue.Queue, marker: str, timeout: float) -> str:
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"no {marker!r} from scripts/run.sh in {timeout:.0f}s:\n" + "".join(seen)[-4000:])


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_with_no_postgres_or_redis_the_run_command_falls_back_to_the_embedded_mode_and_serves(tmp_path, stop):
    port = _free_port()
    # Nothing listens on port 1, and it is not the standard instance, so nothing is started.
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "LANG": "C.UTF-8",
        "PORT": str(port),
        "RUN_DIR": str(tmp_path / "run"),
        "SQLITE_PATH": str(tmp_path / "db.sqlite3"),
        "DATABASE_URL": "postgres://postgres@127.0.0.1:1/agentserver",
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    proc = subprocess.Popen(
        ["make", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        # As from a terminal: a suite started in the background of a shell inherits SIGINT
        # ignored, and a shell cannot trap a signal ignored when it started.
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    try:
        lines = _lines_of(proc)
        out = _read_until(lines, "Press Ctrl-C to stop.", timeout=150)
        assert "FALLING BACK TO THE EMBEDDED MODE" in out
        assert "mode: EMBEDDED" in out and str(tmp_path / "db.sqlite3") in out
        key = re.search(r"API key \(header X-API-Key\): (\S+)", out).group(1)
        echo = re.search(r"echo\s+(http://127\.0\.0\.1:\d+/agents/demo/echo/)", out).group(1)

        def call(method, params):
            body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            request = urllib.request.Request(
                echo, data=body, headers={"Content-Type": "application/json", "A2A-Version": "1.0", "X-API-Key": key}
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                return orjson.loads(response.read())["result"]

        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hello, embedded"}]}
        task = call("SendMessage", {"message": message})["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        read_back = call("GetTask", {"id": task["id"]})
        assert read_back["artifacts"][0]["parts"] == [{"text": "echo: hello, embedded"}]
        assert (tmp_path / "db.sqlite3").stat().st_size > 0
    finally:
        os.killpg(proc.pid, stop)  # a terminal's Ctrl-C, or a supervisor's SIGTERM, reaches every process
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # What was still running and what each said, for the failure's reader.
            tree = subprocess.run(
                ["ps", "-o", "pid,stat,wchan:20,args", "-g", str(proc.pid)], capture_output=True, text=True
            )
            os.killpg(proc.pid, signal.SIGKILL)
            said = "".join(iter(lambda: lines.get(timeout=5), None))
            web_log = (tmp_path / "run" / "web.log").read_text()[-3000:]
            report = f"still running 30 s after {stop!r}:\n{tree.stdout}\n{said}\nweb.log:\n{web_log}"
            raise AssertionError(report) from None
    # The script stopped what it started and said so; make, signalled too, had nothing to report.
    rest = "".join(iter(lambda: lines.get(timeout=5), None))
    assert "==> stopped" in rest and "make: ***" not in rest, rest
    with pytest.raises(OSError):  # and daphne went with it
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
