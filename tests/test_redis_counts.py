"""The Redis cost of the hot requests is pinned, as tests/test_query_counts.py pins their SQL:
the commands the web process and the worker send for one SendMessage, as Redis itself sees
them (MONITOR) on the live stack, each told apart by the process whose connection sent it."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings

from tests.conftest import user_message

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

ECHO = "/agents/acme/echo/"
# What a connection sends whatever the requests: the worker's wait for work (BRPOP, again at
# each timeout), the keepalives of the long-lived subscriptions, and a new connection's
# handshake (a thread of the web process that had not sent before opens its own).
IDLE = {"BRPOP", "PING", "CLIENT", "HELLO", "SELECT", "AUTH"}
# kombu's upkeep of the worker's expiring (pidbox) queue bindings: a script on
# `_kombu.binding*` keys, checked for with SCRIPT EXISTS first, when the worker's main process
# first polls and then every third of the binding's TTL, whatever the requests.
_UPKEEP = re.compile(r'^ "(?:EXISTS" "[0-9a-f]{40}"$|[0-9a-f]{40}" "\d+" "_kombu\.binding)')
_LINE = re.compile(r'^[\d.]+ \[(\d+) (?:lua|[\d.]+:(\d+))\] "(\w+)"(.*)$')


def _family(pid: int) -> set[int]:
    """`pid` and its children (a Celery worker's pool processes)."""
    found = {pid}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _local_ports(pids: set[int]) -> set[int]:
    """The local TCP ports of the sockets these processes hold (their Redis connections among them)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class Monitor:
    """Every command Redis runs for the test database's clients, while the block lasts."""

    def __init__(self) -> None:
        self.lines: list[tuple[int | None, str, str]] = []  # (client port, command, arguments)
        self._db = str(redis.Redis.from_url(settings.REDIS_URL).connection_pool.connection_kwargs.get("db", 0))
        self._stop = threading.Event()

    def _read(self, ready: threading.Event) -> None:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=0.2)
        with client.monitor() as monitor:
            ready.set()
            while not self._stop.is_set():
                try:
                    command = monitor.connection.read_response()
                except redis.TimeoutError:
                    continue
                match = _LINE.match(command.decode(errors="replace"))
                if match and match[1] == self._db:
                    port = int(match[2]) if match[2] else None  # None: run by a Lua script
                    self.lines.append((port, match[3].upper(), match[4]))

    @contextmanager
    def watching(self) -> Iterator[Monitor]:
        ready = threading.Event()
        thread = threading.Thread(target=self._read, args=(ready,), daemon=True)
        thread.start()
        assert ready.wait(5)
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(5)

    def sent_by(self, ports: set[int]) -> list[str]:
        return [
            command
            for port, command, args in self.lines
            if port in ports and command not in IDLE and not (command in {"SCRIPT", "EVALSHA"} and _UPKEEP.match(args))
        ]

    def wait_for(self, command: str, text: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(c == command and text in args for _, c, args in self.lines):
                return
            time.sleep(0.01)
        raise AssertionError(f"Redis never saw {command} …{text}…")


def send(live, key: str, configuration: dict | None = None) -> dict:
    params = {"message": user_message(), **({"configuration": configuration} if configuration else {})}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    response = httpx.post(f"{live.urls[0]}{ECHO}", json=body, headers={"A2A-Version": "1.0", "X-API-Key": key})
    assert response.status_code == 200, response.text
    return response.json()["result"]["task"]


def costs(live, key: str, configuration: dict | None) -> tuple[list[str], list[str]]:
    """The commands of the web process and of the worker for one send and the run it asks for."""
    send(live, key)  # warm: the key looked up and cached, the subscriptions made
    with Monitor().watching() as monitor:
        task = send(live, key, configuration)
        monitor.wait_for("PUBLISH", f":task:{task['id']}")  # the worker's last word on it
    # Told apart afterwards: a connection may have been opened for this very request.
    web = _local_ports({live.web_pids[0]})
    worker = _local_ports(_family(live.worker_pid))
    return monitor.sent_by(web), monitor.sent_by(worker)


def test_a_return_immediately_send_costs_the_web_two_redis_commands_and_its_run_the_worker_one(
    live, echo_agent, alice_key
):
    # The web: the rate limit (one script), the run onto the queue's list. The worker: the
    # hint that the task completed (popping the run is its BRPOP).
    assert costs(live, alice_key, {"returnImmediately": True}) == (["EVALSHA", "LPUSH"], ["PUBLISH"])


def test_a_blocking_send_costs_no_more_redis_commands_than_one_that_returns_at_once(live, echo_agent, alice_key):
    # The wait for the answer costs no command: the process's one subscription hears the hint.
    assert costs(live, alice_key, None) == (["EVALSHA", "LPUSH"], ["PUBLISH"])
