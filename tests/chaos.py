"""Faults, injected into a stack of our own, and what must hold after each (issue 25).

`Stack` starts a private Postgres and Redis on free ports in a temp dir (never the machine's
shared ones), migrates and seeds, then runs daphne and a Celery worker with beat against them.
`run(stack, fault, plan)` drives a mixed load through daphne (returnImmediately SendMessage
to echo and writer, multi-turn writer tasks, open streams, push configs to a receiver on
127.0.0.1), injects one fault, and checks the invariants against the store and the API:
nothing lost, nothing stuck, every event log whole, every stream complete after a resume
with Last-Event-ID, every push delivered, no 500 and no hang, and how many seconds service
took to return. tests/test_chaos.py runs a short version, bench/chaos.py a long one.

The harness runs no Django: it talks to the server as a client does and reads the store
with psycopg (only the state sets come from tasks_app.lifecycle).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tasks_app.lifecycle import SETTLED as _SETTLED
from tests.procs import child_pids
from tests.receiver import Answer, Receiver

ROOT = Path(__file__).resolve().parent.parent
PG_BIN = Path("/usr/lib/postgresql/15/bin")
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
SETTLED = sorted(state.value for state in _SETTLED)  # terminal, or waiting on the client
TERMINAL_WIRE = {"TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"}
KIND_OF_FRAME = {"statusUpdate": "status", "artifactUpdate": "artifact", "message": "message", "task": "status"}


# --- settings of a run --------------------------------------------------------------------


@dataclass(frozen=True)
class Knobs:
    """The server's settings for the run (agentserver/settings.py names them)."""

    sweep_every: float = 1.0
    unclaimed_after: int = 1
    soft_limit: int = 4
    hard_limit: int = 6
    lost_grace: int = 1
    retries: int = 2
    push_sweep_every: float = 1.0
    push_timeout: float = 1.0
    push_backoff_base: float = 0.2
    sse_heartbeat: float = 1.0
    concurrency: int = 2

    def env(self) -> dict[str, str]:
        return {
            "SWEEP_EVERY": str(self.sweep_every),
            "SWEEP_UNCLAIMED_AFTER": str(self.unclaimed_after),
            "AGENT_SOFT_TIME_LIMIT": str(self.soft_limit),
            "AGENT_TIME_LIMIT": str(self.hard_limit),
            "SWEEP_LOST_GRACE": str(self.lost_grace),
            "AGENT_RUN_RETRIES": str(self.retries),
            "PUSH_SWEEP_EVERY": str(self.push_sweep_every),
            "PUSH_TIMEOUT": str(self.push_timeout),
            "PUSH_BACKOFF_BASE": str(self.push_backoff_base),
            "PUSH_BACKOFF_CAP": "5",
            "SSE_HEARTBEAT": str(self.sse_heartbeat),
            "HINT_FALLBACK_POLL": "1",
            "WORKER_CONCURRENCY": str(self.concurrency),
            # The receiver listens on 127.0.0.1; nothing else may be reached.
            "OUTBOUND_ALLOW_NETS": "127.0.0.1/32",
        }

    @property
    def push_lease(self) -> float:
        """A delivery job that died holds its config this long (push/services._lease_seconds)."""
        return self.push_timeout * 4 + 30


@dataclass(frozen=True)
class Plan:
    """The load around one fault."""

    tasks: int = 24  # SendMessage tasks (echo, writer, two-turn writer in turn)
    streams: int = 4  # half wait for input under SubscribeToTask, half stream a writer task
    push_every: int = 3  # every nth task carries an inline push config
    spread: float = 5.0  # seconds over which the tasks are sent
    fault_after: float = 1.5  # seconds into the load
    kills: int = 3  # worker-kill: rounds of SIGKILL
    kill_every: float = 1.0
    redis_down: float = 5.0
    postgres_down: float = 2.0
    web_down: float = 1.0
    cuts: int = 3  # postgres-cut: rounds of pg_terminate_backend of every session of the server
    cut_every: float = 1.0
    postgres_slow: float = 8.0  # postgres-slow: seconds during which every write statement waits ...
    postgres_delay: float = 0.2  # ... this long first
    redis_full: float = 5.0  # redis-full: seconds during which Redis refuses every write (maxmemory)
    broker_gone: float = 60.0  # redis-gone: seconds the broker (Redis) is away
    push_slow: float = 5.0  # push-slow: seconds during which the receiver answers a byte at a time ...
    push_drip: float = 0.5  # ... one every this many seconds
    client_timeout: float = 5.0
    settle_within: float = 40.0  # after the dependency is back, every task must have settled
    push_within: float = 10.0  # ... and every push arrived, beyond the lease a killed delivery job holds


# --- the private stack -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} not within {timeout} s")


def _as_postgres(argv: list[str]) -> list[str]:
    # initdb and pg_ctl refuse root; any other user may run a cluster of its own.
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def available() -> str:
    """Why a stack cannot start here ("" if it can)."""
    missing = [str(p) for p in (PG_BIN / "initdb", PG_BIN / "pg_ctl", Path(REDIS_SERVER)) if not p.exists()]
    return f"missing {', '.join(missing)}" if missing else ""


def _holds_a_pipe(pid: int) -> bool:
    for fd in Path(f"/proc/{pid}/fd").glob("*"):
        try:
            if os.readlink(fd).startswith("pipe:"):
                return True
        except OSError:
            continue
    return False


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class Stack:
    """Postgres, Redis, daphne and a Celery worker with beat, all private to this object."""

    def __init__(self, knobs: Knobs) -> None:
        self.knobs = knobs
        self.dir = Path(tempfile.mkdtemp(prefix="agentserver-chaos-"))
        self.dir.chmod(0o755)  # the postgres user must reach its data directory
        self.pg_port, self.redis_port, self.web_port = _free_port(), _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{self.web_port}"
        self.dsn = f"postgres://postgres@127.0.0.1:{self.pg_port}/agentserver"
        self.key = ""
        self.paths: dict[str, str] = {}
        self.receiver = Receiver()
        self._procs: dict[str, subprocess.Popen] = {}
        self._dead: list[subprocess.Popen] = []
        self._pg_started = False

    # start and stop

    def start(self) -> Stack:
        try:
            self._start_postgres()
            self.start_redis()
            self._manage("migrate", "--noinput")
            seed = json.loads(self._manage("seed_demo", "--json").strip().splitlines()[-1])
            self.key, self.paths = seed["api_key"], seed["agents"]
            self.receiver.start()
            self.start_web()
            self._start_worker()
            # Bounds for a machine busy with a whole suite on parallel workers; the waits end
            # when the processes answer.
            _wait(self.web_up, 120, "daphne")
            _wait(
                lambda: "ready." in self.log("worker") and "beat: Starting" in self.log("worker"),
                120,
                "the worker and beat",
            )
        except BaseException as exc:
            tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in self.dir.glob("*.log"))
            self.stop()
            self.remove()
            if isinstance(exc, Exception):
                raise RuntimeError(f"the chaos stack did not start: {exc}\n{tails}") from exc
            raise
        return self

    def stop(self) -> None:
        for proc in [*self._procs.values(), *self._dead]:
            if proc.poll() is None:
                try:  # the worker's group holds its children and beat
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait(10)
        self._procs.clear()
        if self._pg_started:
            self._pg_ctl("stop", "-m", "immediate", check=False)
            self._pg_started = False
        self.receiver.stop()

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.remove()

    def env(self) -> dict[str, str]:
        # A bare environment: nothing of the caller's (pytest sets DB_POOL=0 and the like) leaks in.
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "agentserver.settings",
            "DATABASE_URL": self.dsn,
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            # Celery's emergency dumps of messages it could not give back (Redis gone) land here.
            "TMPDIR": str(self.dir),
            **self.knobs.env(),
        }

    def log(self, name: str) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _spawn(self, name: str, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        previous = self._procs.pop(name, None)
        if previous is not None:
            self._dead.append(previous)
        with open(self.dir / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(
                argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **kwargs
            )
        self._procs[name] = proc
        return proc

    def _manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env(), capture_output=True, text=True, timeout=300
        )
        if done.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return done.stdout

    # Postgres

    def _pg_ctl(self, *args: str, check: bool = True) -> None:
        subprocess.run(
            _as_postgres(
                [
                    str(PG_BIN / "pg_ctl"),
                    "-D",
                    str(self.dir / "pg"),
                    "-l",
                    str(self.dir / "postgres.log"),
                    "-w",
                    "-t",
                    "30",
                    *args,
                ]
            ),
            check=check,
            capture_output=True,
            timeout=60,
        )

    def _start_postgres(self) -> None:
        data = self.dir / "pg"
        data.mkdir()
        (self.dir / "postgres.log").touch()
        if os.geteuid() == 0:
            for path in (data, self.dir / "postgres.log"):
                shutil.chown(path, "postgres")
        subprocess.run(
            _as_postgres(
                [str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"]
            ),
            check=True,
            capture_output=True,
            timeout=60,
        )
        with open(data / "postgresql.conf", "a") as conf:
            # fsync off: a fast shutdown still writes everything; only a crash of the machine would lose data.
            conf.write(
                f"port = {self.pg_port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{data}'\nfsync = off\nmax_connections = 200\n"
            )
        self._pg_ctl("start")
        self._pg_started = True
        with psycopg.connect(
            host="127.0.0.1", port=self.pg_port, user="postgres", dbname="postgres", autocommit=True
        ) as admin:
            admin.execute("CREATE DATABASE agentserver")

    def postgres_stop(self) -> None:
        self._pg_ctl("stop", "-m", "fast")

    def postgres_start(self) -> None:
        self._pg_ctl("start")

    def sql(self, query: str, *params: Any) -> list[tuple]:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def terminate_sessions(self) -> int:
        """End every session of the server's processes, as a failover or an operator's
        pg_terminate_backend does; how many there were."""
        return len(
            self.sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = 'agentserver' AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        )

    def slow_writes(self, delay: float) -> None:
        """Every statement that writes to one of the server's tables first sleeps `delay` s, in
        the transaction that runs it (a statement trigger), holding what it has locked."""
        self.sql(
            "CREATE FUNCTION chaos_slow() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM pg_sleep({float(delay)}); RETURN NULL; END $$"
        )
        for (table,) in self._tables():
            self._sql_until_no_deadlock(
                f'CREATE TRIGGER chaos_slow BEFORE INSERT OR UPDATE OR DELETE ON "{table}" '
                "FOR EACH STATEMENT EXECUTE FUNCTION chaos_slow()"
            )

    def fast_writes(self) -> None:
        # One table at a time: dropping them all in one transaction takes each table's
        # exclusive lock in turn while the server's transactions hold some and wait for others,
        # and a deadlock there would leave every later fault on a slowed database.
        for (table,) in self._tables():
            self._sql_until_no_deadlock(f'DROP TRIGGER IF EXISTS chaos_slow ON "{table}"')
        self._sql_until_no_deadlock("DROP FUNCTION IF EXISTS chaos_slow() CASCADE")

    def _sql_until_no_deadlock(self, query: str) -> None:
        for attempt in range(20):
            try:
                self.sql(query)
                return
            except psycopg.errors.DeadlockDetected:
                if attempt == 19:
                    raise
                time.sleep(0.05)

    def _tables(self) -> list[tuple]:
        return self.sql(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
        )

    # Redis

    def start_redis(self) -> None:
        # No persistence: a restart comes back empty, every queued message gone.
        self._spawn(
            "redis",
            [
                REDIS_SERVER,
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
        )
        _wait(lambda: _redis_answers(self.redis_port), 10, "redis")

    def redis_kill(self) -> None:
        self._kill("redis")

    def redis_config(self, name: str, value: str) -> None:
        with socket.create_connection(("127.0.0.1", self.redis_port), timeout=2) as s:
            s.sendall(f"CONFIG SET {name} {value}\r\n".encode())
            answer = s.recv(64)
        if not answer.startswith(b"+OK"):
            raise RuntimeError(f"CONFIG SET {name} {value}: {answer!r}")

    # daphne and the worker

    def start_web(self) -> None:
        self._spawn(
            "web",
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.web_port),
                "agentserver.asgi:application",
            ],
            env=self.env(),
        )

    def web_up(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def web_kill(self) -> None:
        self._kill("web")

    def _start_worker(self) -> None:
        self._spawn(
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "agentserver",
                "worker",
                "-B",
                "-l",
                "info",
                "-s",
                str(self.dir / "celerybeat-schedule"),
            ],
            env=self.env(),
        )

    def _kill(self, name: str) -> None:
        proc = self._procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def worker_children(self) -> list[int]:
        """The worker's prefork children, which run the agents; not beat, its other child: beat
        closes every descriptor it inherited (celery.beat._Process.run), while a pool child
        keeps its pipes to the main process. Killing beat would stop the sweepers for good."""
        return [pid for pid in child_pids(self._procs["worker"].pid) if _holds_a_pipe(pid)]

    def kill_worker_children(self) -> list[int]:
        children = self.worker_children()
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return children


# --- what the clients saw ------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    what: str  # the method
    started: float  # time.time()
    ended: float
    result: str  # ok, rpc <code>, http 503 retry-after, http <status>, timeout, refused, dropped


def _classify(response: httpx.Response) -> tuple[str, dict[str, Any] | None]:
    try:
        body = response.json()
    except ValueError:
        return f"http {response.status_code} not json", None
    if response.status_code == 503:
        return ("http 503 retry-after" if response.headers.get("retry-after") else "http 503 without retry-after"), None
    if response.status_code != 200:
        return f"http {response.status_code}", None
    if "error" in body:
        return f"rpc {body['error'].get('code')}", None
    return "ok", body["result"]


def _transport(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "refused"
    return "dropped"


# Worth trying again: the service was not there. A JSON-RPC error other than -32603 is an
# answer about the request itself (e.g. a follow-up to a task that already moved on).
RETRYABLE = {"rpc -32603", "http 503 retry-after", "timeout", "refused", "dropped"}


@dataclass
class Frame:
    id: int
    kind: str  # status, artifact, message (a Task frame is the status it shows)
    state: str  # the wire state of a status or task frame, else ""
    snapshot: bool  # SubscribeToTask's first frame: the task as it is, not an event of the log


@dataclass
class StreamSeen:
    task_id: str = ""
    frames: list[Frame] = field(default_factory=list)
    opened: int = 0  # responses that came as a stream
    resumes: int = 0  # ... of which resumed one with Last-Event-ID
    breaks: Counter = field(default_factory=Counter)  # how connections ended before the task did

    @property
    def last_id(self) -> int:
        return max((f.id for f in self.frames), default=0)

    @property
    def ended(self) -> bool:
        return any(f.state in TERMINAL_WIRE for f in self.frames)


@dataclass
class Job:
    kind: str  # echo, writer, writer2 (asks for input, then gets a follow-up), probe, stream
    task_id: str
    push: bool
    accepted_at: float
    followed_up: bool = False


class Client:
    """JSON-RPC over HTTP to the stack's daphne; every request's outcome is recorded."""

    def __init__(self, stack: Stack, timeout: float) -> None:
        self.stack = stack
        self.timeout = timeout
        self.http = httpx.Client(timeout=timeout, limits=httpx.Limits(max_connections=200))
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()

    def _url(self, agent: str) -> str:
        return self.stack.url + self.stack.paths[agent]

    def _headers(self, **extra: str) -> dict[str, str]:
        return {"A2A-Version": "1.0", "X-API-Key": self.stack.key, **extra}

    def record(self, what: str, started: float, result: str) -> None:
        with self._lock:
            self.outcomes.append(Outcome(what, started, time.time(), result))

    def call(self, agent: str, method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
        body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        started = time.time()
        try:
            result, answer = _classify(self.http.post(self._url(agent), json=body, headers=self._headers()))
        except httpx.HTTPError as exc:
            result, answer = _transport(exc), None
        self.record(method, started, result)
        return result, answer

    def stream(
        self, agent: str, method: str, params: dict[str, Any], seen: StreamSeen, *, last_event_id: int | None = None
    ) -> str:
        """Read one SSE response into `seen`; how it ended: "end" (the server closed it), or
        why not ("dropped", "stalled", "rpc <code>" in the stream, or the request's outcome)."""
        headers = self._headers(Accept="text/event-stream")
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        # A heartbeat comes every SSE_HEARTBEAT seconds: silence for three of them is a hang.
        timeout = httpx.Timeout(self.timeout, read=self.stack.knobs.sse_heartbeat * 3 + 2)
        started = time.time()
        snapshot = method == "SubscribeToTask" and last_event_id is None
        try:
            with self.http.stream("POST", self._url(agent), json=body, headers=headers, timeout=timeout) as response:
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    response.read()
                    result, _ = _classify(response)
                    self.record(method, started, "rpc answer instead of a stream" if result == "ok" else result)
                    return result
                self.record(method, started, "ok")
                seen.opened += 1
                event_id = None
                for line in response.iter_lines():
                    if line.startswith("id:"):
                        event_id = int(line[3:])
                    elif line.startswith("data:"):
                        payload = json.loads(line[5:])
                        if "error" in payload:
                            return f"rpc {payload['error'].get('code')}"
                        result = payload["result"]
                        kind = next(iter(result))
                        inner = result[kind]
                        seen.task_id = seen.task_id or inner.get("taskId") or inner.get("id", "")
                        state = inner["status"]["state"] if "status" in inner else ""
                        seen.frames.append(
                            Frame(event_id or 0, KIND_OF_FRAME[kind], state, snapshot and kind == "task")
                        )
                        snapshot, event_id = False, None
                return "end"
        except httpx.HTTPError as exc:
            return "stalled" if isinstance(exc, httpx.ReadTimeout) else _transport(exc)


# --- the load around a fault ----------------------------------------------------------------


def _message(text: str, task_id: str | None = None) -> dict[str, Any]:
    return {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        **({"taskId": task_id} if task_id else {}),
    }


class Load:
    def __init__(self, stack: Stack, plan: Plan) -> None:
        self.stack, self.plan = stack, plan
        self.client = Client(stack, plan.client_timeout)
        self.jobs: list[Job] = []
        self.streams: list[StreamSeen] = []
        self.back_at: float | None = None  # the dependency is back (set by `run`)
        self.give_up_at = time.time() + 600  # narrowed once the fault is over
        self._lock = threading.Lock()
        self._senders: list[threading.Thread] = []
        self._readers: list[threading.Thread] = []
        self._waiting: list[StreamSeen] = []  # two-turn streams, subscribed while the task waits for input

    def _thread(self, target: Callable[..., None], *args: Any, into: list[threading.Thread]) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        into.append(thread)

    def _accept(
        self, agent: str, text: str, *, kind: str, push: bool = False, task_id: str | None = None, retry: bool = True
    ) -> str | None:
        """SendMessage with returnImmediately, again while the service is away; the task id."""
        configuration: dict[str, Any] = {"returnImmediately": True}
        if push:
            configuration["taskPushNotificationConfig"] = {"url": self.stack.receiver.url(), "token": "chaos"}
        params = {"message": _message(text, task_id), "configuration": configuration}
        while True:
            result, answer = self.client.call(agent, "SendMessage", params)
            if answer is not None:
                accepted = answer["task"]["id"]
                if task_id is None:
                    with self._lock:
                        self.jobs.append(Job(kind, accepted, push, time.time()))
                return accepted
            if not retry or result not in RETRYABLE or time.time() > self.give_up_at:
                return None
            time.sleep(1.0)  # a client's pause (the server asks for Retry-After: 5; we are impatient)

    def _state(self, agent: str, task_id: str) -> str:
        """GetTask until the task settles (or the client gives up); its wire state."""
        while time.time() < self.give_up_at:
            _, answer = self.client.call(agent, "GetTask", {"id": task_id, "historyLength": 0})
            state = answer["status"]["state"] if answer else ""
            if state in TERMINAL_WIRE or state == "TASK_STATE_INPUT_REQUIRED":
                return state
            time.sleep(0.5)
        return ""

    def _job(self, n: int) -> None:
        kind = ("echo", "writer", "writer2")[n % 3]
        text = {"echo": f"chaos {n}", "writer": f"a poem about chaos {n}", "writer2": "write something"}[kind]
        agent = "echo" if kind == "echo" else "writer"
        task_id = self._accept(agent, text, kind=kind, push=n % self.plan.push_every == 0)
        if task_id is None or kind != "writer2":
            return
        if self._state(agent, task_id) == "TASK_STATE_INPUT_REQUIRED":
            if self._accept(agent, f"a story about chaos {n}", kind=kind, task_id=task_id):
                self._job_of(task_id).followed_up = True

    def _job_of(self, task_id: str) -> Job:
        with self._lock:
            return next(j for j in self.jobs if j.task_id == task_id)

    def send_tasks(self) -> None:
        """The tasks, evenly over `plan.spread` seconds, from here on."""
        start = time.time()

        def scheduled(n: int) -> None:
            time.sleep(max(0.0, start + n * self.plan.spread / self.plan.tasks - time.time()))
            self._job(n)

        for n in range(self.plan.tasks):
            self._thread(scheduled, n, into=self._senders)

    # streams

    def _follow(self, seen: StreamSeen, method: str, params: dict[str, Any]) -> None:
        """Read the stream; whenever it breaks before the task ends, resume with Last-Event-ID."""
        ended = self.client.stream("writer", method, params, seen)
        while not seen.ended and time.time() < self.give_up_at:
            if not seen.task_id:  # never got as far as the task: nothing to resume
                return
            seen.breaks[ended] += 1
            time.sleep(0.2)
            opened = seen.opened
            ended = self.client.stream(
                "writer", "SubscribeToTask", {"id": seen.task_id}, seen, last_event_id=seen.last_id
            )
            seen.resumes += seen.opened - opened

    def open_streams(self) -> None:
        """Two-turn streams: the writer asks for input, and a subscriber waits on the task."""

        def two_turn(seen: StreamSeen, n: int) -> None:
            self.client.stream("writer", "SendStreamingMessage", {"message": _message(f"write {n}")}, seen)
            if seen.frames and seen.frames[-1].state == "TASK_STATE_INPUT_REQUIRED":
                with self._lock:
                    self.jobs.append(Job("stream", seen.task_id, False, time.time()))
                self._follow(seen, "SubscribeToTask", {"id": seen.task_id})

        waiting = [StreamSeen() for _ in range(0, self.plan.streams, 2)]
        for n, seen in enumerate(waiting):
            self.streams.append(seen)
            self._thread(two_turn, seen, n, into=self._readers)
        # Open once the subscription's snapshot is in: the task waits for input from there on.
        deadline = time.time() + 15
        while time.time() < deadline and not all(any(f.snapshot for f in s.frames) for s in waiting):
            time.sleep(0.05)
        self._waiting = [s for s in waiting if any(f.snapshot for f in s.frames)]

    def release_streams(self) -> None:
        """Right before the fault: answer the waiting tasks and stream new ones, so that their
        events are written while the fault is on."""
        direct = [StreamSeen() for _ in range(1, self.plan.streams, 2)]
        for seen in direct:
            self.streams.append(seen)
            self._thread(
                self._follow,
                seen,
                "SendStreamingMessage",
                {"message": _message("a haiku about waves")},
                into=self._readers,
            )
        for seen in self._waiting:
            if self._accept("writer", "a letter about the storm", kind="stream", task_id=seen.task_id):
                self._job_of(seen.task_id).followed_up = True
        # A new task's first frame goes out with the agent's first event; until then a client
        # that lost its stream would not know which task to resume.
        deadline = time.time() + 5
        while time.time() < deadline and not all(s.task_id for s in direct):
            time.sleep(0.05)
        with self._lock:
            self.jobs += [Job("stream", s.task_id, False, time.time()) for s in direct if s.task_id]

    # recovery

    def probe(self) -> None:
        """Every quarter second from the fault on, a new SendMessage, until one succeeded after
        the dependency came back (and two seconds more)."""

        def loop() -> None:
            n, done_at = 0, None
            while time.time() < self.give_up_at and (done_at is None or time.time() < done_at + 2):
                started = time.time()
                if self._accept("echo", f"probe {n}", kind="probe", retry=False) and done_at is None:
                    if self.back_at is not None and started >= self.back_at:
                        done_at = time.time()
                n += 1
                time.sleep(max(0.0, started + 0.25 - time.time()))

        self._thread(loop, into=self._senders)

    def join(self, until: float) -> None:
        self.give_up_at = until
        for thread in self._senders + self._readers:
            thread.join(max(0.1, until - time.time()))


# --- the faults ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    fault_at: float  # time.time() when the fault began
    back_at: float  # ... and when the dependency was back
    kills: tuple[float, ...] = ()  # worker-kill: when each round of SIGKILL went out


def _kill_worker_children(stack: Stack, plan: Plan) -> Window:
    fault_at = time.time()
    kills = []
    for round_ in range(plan.kills):
        if round_:
            time.sleep(plan.kill_every)
        _wait_for_work(stack)
        kills.append(time.time())
        stack.kill_worker_children()  # the main process forks new ones at once
    return Window(fault_at, time.time(), tuple(kills))


def _restart_redis_empty(stack: Stack, plan: Plan) -> Window:
    fault_at = time.time()
    stack.redis_kill()
    time.sleep(plan.redis_down)
    stack.start_redis()  # returns once it answers PING
    return Window(fault_at, time.time())


def _restart_postgres(stack: Stack, plan: Plan) -> Window:
    fault_at = time.time()
    stack.postgres_stop()
    time.sleep(plan.postgres_down)
    stack.postgres_start()  # returns once it accepts connections
    return Window(fault_at, time.time())


def _kill_daphne(stack: Stack, plan: Plan) -> Window:
    fault_at = time.time()
    stack.web_kill()
    time.sleep(plan.web_down)
    stack.start_web()  # as a supervisor would; its start-up is part of the outage
    _wait(stack.web_up, 30, "daphne")
    return Window(fault_at, time.time())


def _wait_for_work(stack: Stack, within: float = 2) -> None:
    """Mid-run: wait (briefly) until some agent is at work."""
    deadline = time.time() + within
    while time.time() < deadline and not stack.sql("SELECT 1 FROM tasks_app_task WHERE state = 'working' LIMIT 1"):
        time.sleep(0.02)


def _cut_postgres_sessions(stack: Stack, plan: Plan) -> Window:
    fault_at = time.time()
    for round_ in range(plan.cuts):
        if round_:
            time.sleep(plan.cut_every)
        _wait_for_work(stack)
        stack.terminate_sessions()
    return Window(fault_at, time.time())


def _slow_postgres(stack: Stack, plan: Plan) -> Window:
    fault_at = time.time()
    stack.slow_writes(plan.postgres_delay)
    try:
        time.sleep(plan.postgres_slow)
    finally:
        stack.fast_writes()
    return Window(fault_at, time.time())


def _fill_redis(stack: Stack, plan: Plan) -> Window:
    fault_at = time.time()
    # A limit below what Redis holds: it refuses every command that could add memory ("OOM
    # command not allowed"), while reads and deletes go on.
    stack.redis_config("maxmemory-policy", "noeviction")
    stack.redis_config("maxmemory", "1")
    try:
        time.sleep(plan.redis_full)
    finally:
        stack.redis_config("maxmemory", "0")
    return Window(fault_at, time.time())


def _broker_gone(stack: Stack, plan: Plan) -> Window:
    fault_at = time.time()
    stack.redis_kill()
    time.sleep(plan.broker_gone)
    stack.start_redis()
    return Window(fault_at, time.time())


def _slow_receiver(stack: Stack, plan: Plan) -> Window:
    fault_at = time.time()
    stack.receiver.default = Answer(drip=plan.push_drip)
    time.sleep(plan.push_slow)
    stack.receiver.default = Answer()
    return Window(fault_at, time.time())


FAULTS: dict[str, tuple[str, Callable[[Stack, Plan], Window]]] = {
    "worker-kill": ("SIGKILL of the worker's prefork children mid-run, several rounds", _kill_worker_children),
    "redis-restart": ("Redis stopped, restarted empty (no persistence)", _restart_redis_empty),
    "postgres-restart": ("Postgres stopped (fast) and started again", _restart_postgres),
    "daphne-kill": ("daphne SIGKILLed under open streams, restarted on its port", _kill_daphne),
    "postgres-cut": (
        "every session of the server ended by pg_terminate_backend mid-run, several rounds",
        _cut_postgres_sessions,
    ),
    "postgres-slow": ("every write statement delayed (a trigger's pg_sleep) for a while", _slow_postgres),
    "redis-full": ("Redis at its maxmemory: every write refused for a while", _fill_redis),
    "redis-gone": ("the broker (Redis) away for a minute while requests keep coming, back empty", _broker_gone),
    "push-slow": ("the push receiver answers one byte at a time for a while", _slow_receiver),
}


# --- the verdict ---------------------------------------------------------------------------


@dataclass
class Report:
    fault: str
    window: Window
    accepted: int  # tasks a client was given the id of
    orphans: Counter  # state -> tasks the store holds that no client learnt of (an answer lost); they settle too
    settled: Counter  # final state (with the failure kind) -> tasks
    stuck: list[str]  # not settled in time
    lost: list[str]  # accepted and gone, or a follow-up accepted and never acted on
    log_gaps: list[str]
    log_dups: list[str]
    reruns: int  # runs given again after their worker was lost
    streams: int
    streams_incomplete: list[str]
    stream_resumes: int
    stream_breaks: Counter
    pushed_tasks: int
    push_missing: dict[str, list[int]]
    outage: Counter  # outcomes of the requests sent while the dependency was away
    elsewhere: Counter  # outcomes other than ok of the requests sent at any other time
    anomalies: list[str]  # a 500, a hang, a 503 without Retry-After, a dropped connection, a stalled stream
    slowest_s: float  # the slowest answer to a request sent while the dependency was away
    resumed_s: float | None  # worker-kill: the longest a run given again waited, from the kill to its next event
    recovery_s: float | None  # dependency back -> first successful SendMessage sent after it
    served_s: float | None  # dependency back -> a task sent after it completed
    settled_s: float | None  # dependency back -> the last task settled
    pushed_s: float | None  # dependency back -> every push delivered
    tracebacks: dict[str, list[str]]  # first lines of each traceback the servers logged meanwhile

    def violations(self, *, recovery_within: float, served_within: float) -> list[str]:
        """Every invariant that failed, said plainly (empty: the fault cost nothing it may not)."""
        found = []
        if not self.accepted:
            found.append("no task was accepted: the load never ran")
        for what, items in (
            ("lost", self.lost),
            ("stuck", self.stuck),
            ("with a gap in their event log", self.log_gaps),
            ("with a duplicate seq", self.log_dups),
            ("streams incomplete", self.streams_incomplete),
            ("anomalies", self.anomalies),
        ):
            if items:
                found.append(f"{len(items)} {what}: {items[:5]}")
        if self.push_missing:
            found.append(f"{len(self.push_missing)} tasks' pushes missing: {dict(list(self.push_missing.items())[:5])}")
        if self.recovery_s is None or self.recovery_s > recovery_within:
            found.append(
                f"SendMessage succeeded again after {seconds(self.recovery_s)} s, not within {recovery_within} s"
            )
        if self.served_s is None or self.served_s > served_within:
            found.append(f"a new task was done after {seconds(self.served_s)} s, not within {served_within} s")
        return found


def counts(counter: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in counter.most_common()) or "-"


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


COLUMNS = [
    "fault",
    "accepted (orphans)",
    "settled by state",
    "stuck",
    "lost",
    "log gaps / dups",
    "reruns",
    "streams complete / resumes",
    "pushes delivered",
    "requests during outage",
    "slowest answer s",
    "anomalies",
    "runs resumed s (max)",
    "recovery s",
    "first new task done s",
    "all settled s",
    "all pushed s",
]


def row(report: Report) -> list[str]:
    streams_ok = report.streams - len(report.streams_incomplete)
    return [
        report.fault,
        f"{report.accepted} ({sum(report.orphans.values())})",
        counts(report.settled),
        str(len(report.stuck)),
        str(len(report.lost)),
        f"{len(report.log_gaps)} / {len(report.log_dups)}",
        str(report.reruns),
        f"{streams_ok}/{report.streams} / {report.stream_resumes}",
        f"{report.pushed_tasks - len(report.push_missing)}/{report.pushed_tasks}",
        counts(report.outage),
        f"{report.slowest_s:.1f}",
        str(len(report.anomalies)),
        seconds(report.resumed_s),
        seconds(report.recovery_s),
        seconds(report.served_s),
        seconds(report.settled_s),
        seconds(report.pushed_s),
    ]


def table(reports: list[Report]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(row(r)) + " |" for r in reports])


# --- one run: load, fault, checks ---------------------------------------------------------


def run(stack: Stack, fault: str, plan: Plan) -> Report:
    _, inject = FAULTS[fault]
    since = stack.sql("SELECT now()")[0][0]
    logged = {name: len(stack.log(name)) for name in ("web", "worker")}
    load = Load(stack, plan)
    load.open_streams()
    load.send_tasks()
    time.sleep(plan.fault_after)
    load.release_streams()
    load.probe()
    window = inject(stack, plan)
    load.back_at = window.back_at
    until = window.back_at + plan.settle_within
    load.join(until)
    stuck = _poll(lambda: _unsettled(stack, since), until)
    settled_s = _last_settled(stack, since) - window.back_at
    push_ids = [j.task_id for j in load.jobs if j.push]
    push_until = (
        max(time.time(), window.back_at + stack.knobs.push_lease) + stack.knobs.push_sweep_every + plan.push_within
    )
    missing = _poll(lambda: _pushes_missing(stack, push_ids), push_until)
    pushed_s = None if missing else _last_push(stack, push_ids) - window.back_at
    return _report(stack, fault, window, load, since, stuck, settled_s, push_ids, missing, pushed_s, logged)


def _poll(pending: Callable[[], Any], until: float) -> Any:
    """Poll `pending()` until it is empty or `until` passed; its last value."""
    while (left := pending()) and time.time() < until:
        time.sleep(0.25)
    return left


def _unsettled(stack: Stack, since: Any) -> list[str]:
    rows = stack.sql(
        "SELECT id::text, state FROM tasks_app_task WHERE created_at >= %s AND NOT state = ANY(%s)", since, SETTLED
    )
    return [f"{task_id} {state}" for task_id, state in rows]


def _last_settled(stack: Stack, since: Any) -> float:
    (latest,) = stack.sql("SELECT max(status_timestamp) FROM tasks_app_task WHERE created_at >= %s", since)[0]
    return latest.timestamp()


def _pushes_missing(stack: Stack, task_ids: list[str]) -> dict[str, list[int]]:
    last = dict(stack.sql("SELECT id::text, last_seq FROM tasks_app_task WHERE id = ANY(%s::uuid[])", task_ids))
    got: dict[str, set[int]] = {}
    for received in list(stack.receiver.requests):
        if received.dripped:  # the sender gave up on the answer: not delivered
            continue
        task_id, _, seq = received.event_id.rpartition(":")
        got.setdefault(task_id, set()).add(int(seq))
    missing = {t: sorted(set(range(1, last.get(t, 0) + 1)) - got.get(t, set())) for t in task_ids}
    return {t: seqs for t, seqs in missing.items() if seqs}


def _last_push(stack: Stack, task_ids: list[str]) -> float:
    ours = set(task_ids)
    got = [r for r in list(stack.receiver.requests) if not r.dripped and r.event_id.rpartition(":")[0] in ours]
    at = max((r.at for r in got), default=0.0)
    return at - time.monotonic() + time.time()  # Received.at is monotonic


def _stream_verdict(seen: StreamSeen, log: list[tuple[int, str]]) -> str | None:
    """What a stream missed or repeated against the task's log (None: nothing)."""
    frames = [(f.id, f.kind) for f in seen.frames if not f.snapshot]
    if frames != log:
        return f"{seen.task_id}: saw {[i for i, _ in frames]}, the log has 1..{len(log)}"
    if not seen.ended:
        return f"{seen.task_id}: never saw the task end"
    return None


def _report(
    stack: Stack,
    fault: str,
    window: Window,
    load: Load,
    since: Any,
    stuck: list[str],
    settled_s: float,
    push_ids: list[str],
    missing: dict[str, list[int]],
    pushed_s: float | None,
    logged: dict[str, int],
) -> Report:
    jobs = {j.task_id: j for j in load.jobs}
    rows = stack.sql(
        "SELECT t.id::text, t.state, t.failure, t.last_seq, t.run_retries, count(e.id), count(DISTINCT e.seq), "
        "coalesce(min(e.seq), 0), coalesce(max(e.seq), 0) FROM tasks_app_task t "
        "LEFT JOIN tasks_app_taskevent e ON e.task_id = t.id WHERE t.created_at >= %s GROUP BY t.id",
        since,
    )
    stored = {r[0]: r for r in rows}
    settled = Counter(f"{state} ({failure})" if failure else state for _, state, failure, *_ in rows)
    lost = [t for t in jobs if t not in stored]
    lost += [
        f"{t}: the follow-up was accepted, the task still waits for input"
        for t, j in jobs.items()
        if j.followed_up and t in stored and stored[t][1] == "input-required"
    ]
    gaps = [r[0] for r in rows if r[3] and (r[6] != r[3] or r[7] != 1 or r[8] != r[3])]
    dups = [r[0] for r in rows if r[5] != r[6]]

    incomplete = []
    for seen in load.streams:
        if not seen.task_id:
            incomplete.append("a stream that never got as far as its task")
            continue
        log = [
            (seq, kind)
            for seq, kind in stack.sql(
                "SELECT seq, kind FROM tasks_app_taskevent WHERE task_id = %s ORDER BY seq", seen.task_id
            )
        ]
        if (verdict := _stream_verdict(seen, log)) is not None:
            incomplete.append(verdict)

    outcomes = load.client.outcomes
    ok_after = [
        o.ended for o in outcomes if o.what == "SendMessage" and o.result == "ok" and o.started >= window.back_at
    ]
    recovery_s = min(ok_after) - window.back_at if ok_after else None
    during = [o for o in outcomes if o.ended >= window.fault_at and o.started <= window.back_at]
    outage = Counter(o.result for o in during)
    answered = [o.ended - o.started for o in during if o.result not in ("timeout", "refused", "dropped")]
    elsewhere = Counter(o.result for o in outcomes if o not in during and o.result != "ok")
    # While daphne is away nothing answers: refused and dropped connections are the outage
    # itself. At any other time they are faults of the server.
    anomalies = [
        f"{o.what} at {o.started - window.fault_at:+.1f} s: {o.result}"
        for o in outcomes
        if o.result in ("timeout", "http 503 without retry-after")
        or o.result.startswith("http ")
        and o.result != "http 503 retry-after"
        or o.result in ("refused", "dropped")
        and not (fault == "daphne-kill" and o in during)
    ]
    breaks = sum((s.breaks for s in load.streams), Counter())
    anomalies += [f"a stream stalled (no heartbeat) {n} times" for n in [breaks["stalled"]] if n]

    probes_after = [t for t, j in jobs.items() if j.kind == "probe" and j.accepted_at >= window.back_at]
    done_at = (
        stack.sql(
            "SELECT min(status_timestamp) FROM tasks_app_task WHERE id = ANY(%s::uuid[]) AND state = 'completed'",
            probes_after,
        )[0][0]
        if probes_after
        else None
    )
    rerun = [r[0] for r in rows if r[4]]
    tracebacks = {}
    for name, offset in logged.items():
        text = stack.log(name)[offset:]
        tracebacks[name] = [text[i : i + 600] for i in _find_all(text, "Traceback")][:3]
    return Report(
        fault=fault,
        window=window,
        accepted=len(jobs),
        orphans=Counter(stored[t][1] for t in set(stored) - set(jobs)),
        settled=settled,
        stuck=stuck,
        lost=lost,
        log_gaps=gaps,
        log_dups=dups,
        reruns=sum(r[4] for r in rows),
        streams=len(load.streams),
        streams_incomplete=incomplete,
        stream_resumes=sum(s.resumes for s in load.streams),
        stream_breaks=breaks,
        pushed_tasks=len(push_ids),
        push_missing=missing,
        outage=outage,
        elsewhere=elsewhere,
        anomalies=anomalies,
        slowest_s=max(answered, default=0.0),
        resumed_s=_resumed(stack, rerun, window.kills),
        recovery_s=recovery_s,
        served_s=done_at.timestamp() - window.back_at if done_at else None,
        settled_s=settled_s,
        pushed_s=pushed_s,
        tracebacks={k: v for k, v in tracebacks.items() if v},
    )


def _resumed(stack: Stack, task_ids: list[str], kills: tuple[float, ...]) -> float | None:
    """The longest a run given again waited: for each such task and each kill while it ran,
    from the kill to the task's next event (a kill that missed the run finds one at once)."""
    if not task_ids or not kills:
        return None
    waits = []
    for task_id in task_ids:
        stamps = [
            at.timestamp()
            for (at,) in stack.sql(
                "SELECT created_at FROM tasks_app_taskevent WHERE task_id = %s ORDER BY seq", task_id
            )
        ]
        for kill in kills:
            after = [at for at in stamps if at > kill]
            if stamps and stamps[0] < kill and after:
                waits.append(after[0] - kill)
    return max(waits, default=None)


def _find_all(text: str, needle: str) -> Iterator[int]:
    at = text.find(needle)
    while at >= 0:
        yield at
        at = text.find(needle, at + 1)
