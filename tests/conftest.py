"""Shared fixtures.

Two ways to exercise the server:
- `rpc` calls the ASGI view in-process (Django's test client); agent work runs eagerly in the
  same process once the request's transaction commits, so tests that need the agent to run
  use `transactional_db`.
- `live` starts daphne and a real Celery worker as subprocesses on the test database and a
  separate Redis database: the whole flow over real HTTP, a real broker and a real worker.
"""

from __future__ import annotations

import asyncio
import graphlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agentserver.celery import app as celery_app
from tests.procs import child_pids

ROOT = Path(__file__).resolve().parent.parent
V1 = {"A2A-Version": "1.0"}


def _one_default_tls_context() -> None:
    """httpx builds a verifying TLS context, loading certifi's whole CA bundle (33-60 ms of CPU
    here), for every client and so for every `httpx.get`/`httpx.post`; the tests make thousands
    of such calls, nearly all over plain HTTP to loopback (a fifth of the live tests' CPU).
    The default context is built once per process and shared (contexts are made to be); a
    client given its own `verify` or `cert` still gets its own."""
    from httpx._transports import default

    build = default.create_ssl_context
    made: dict[tuple, Any] = {}

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is not True or cert is not None:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in made:
            made[key] = build(verify=True, cert=None, trust_env=trust_env)
        return made[key]

    default.create_ssl_context = create_ssl_context


_one_default_tls_context()


# Tables a transactional test's teardown leaves alone: rows that migrations and post_migrate
# create once and no test changes.
_KEPT_BY_FLUSH = frozenset({"django_migrations", "django_content_type", "auth_permission"})


def _flush_by_delete(style, connection, reset_sequences=True, allow_cascade=False):
    """Django's flush TRUNCATEs every table and then re-runs post_migrate: about 0.25 s per
    transactional test here. DELETE is three times faster on tables this small, and every
    foreign key Django made is DEFERRABLE INITIALLY DEFERRED, so only the others set the order.
    Content types and permissions stay, so post_migrate need not re-create them."""
    tables = set(connection.introspection.django_table_names(only_existing=True, include_views=False))
    tables -= _KEPT_BY_FLUSH
    with connection.cursor() as cursor:
        # The foreign keys a migration wrote by hand (tenant-scoped composites) are checked at
        # once, so their referencing tables are emptied first.
        cursor.execute(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
            " WHERE contype = 'f' AND NOT condeferrable AND conrelid <> confrelid"
        )
        referenced_by: dict[str, set[str]] = {table: set() for table in tables}
        for referencing, referenced in cursor.fetchall():
            referencing, referenced = referencing.strip('"'), referenced.strip('"')
            if referencing in tables and referenced in tables:
                referenced_by[referenced].add(referencing)
    order = graphlib.TopologicalSorter(referenced_by).static_order()
    quote = connection.ops.quote_name
    return [f"DELETE FROM {quote(table)}" for table in order]


def _flush_again_if_raced(execute_sql_flush):
    """A live server's background thread may commit a row (a push delivery's retry) between
    two of the flush's DELETEs: the deferred foreign key then fails the flush at COMMIT, and
    nothing was deleted. Flush again once that write is done, rather than fail the next test's
    setup."""

    def execute(self, sql_list):
        from django.db import IntegrityError

        for attempt in range(5):
            try:
                return execute_sql_flush(self, sql_list)
            except IntegrityError:
                if attempt == 4:
                    raise
                time.sleep(0.1 * (attempt + 1))

    return execute


@pytest.fixture(scope="session", autouse=True)
def _cheap_flush():
    from django.core.management.commands import flush
    from django.db.backends.base.operations import BaseDatabaseOperations

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flush, "sql_flush", _flush_by_delete)
        patch.setattr(flush, "emit_post_migrate_signal", lambda *args, **kwargs: None)
        patch.setattr(
            BaseDatabaseOperations,
            "execute_sql_flush",
            _flush_again_if_raced(BaseDatabaseOperations.execute_sql_flush),
        )
        yield


@pytest.fixture(autouse=True)
def _fast_waits(settings):
    settings.A2A_BLOCKING_TIMEOUT = 10
    settings.AIP_RESPONSE_TIMEOUT = 10
    settings.HINT_FALLBACK_POLL = 0.2


@pytest.fixture(autouse=True)
def _card_key_forgotten():
    """Each test's database starts without card keys: the one this process keeps for signing
    cards (protocols.card_signing) goes with them."""
    from protocols import card_signing

    card_signing.forget()
    card_signing._signed.clear()  # noqa: SLF001 - and what it signed, to sign again in each test


@pytest.fixture(autouse=True)
def _eager_agents():
    """In-process tests run the agent right after commit, in the request's thread."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


# --- push: no DNS, no real delivery jobs in-process ------------------------------------


class FakeDns(dict):
    """Names the SSRF guard may resolve in this test (name -> addresses); any other name
    fails to resolve, as it would offline. IP literals never reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups: list[str] = []

    def getaddrinfo(self, host, port, *args, **kwargs):
        import socket

        self.lookups.append(host)
        host.encode("idna")  # as socket.getaddrinfo does first: UnicodeError for a name it cannot encode
        if host not in self:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in self[host]
        ]


@pytest.fixture(autouse=True)
def dns(monkeypatch) -> FakeDns:
    from outbound import ssrf

    fake = FakeDns()
    monkeypatch.setattr(ssrf, "_getaddrinfo", fake.getaddrinfo)
    return fake


@pytest.fixture(autouse=True)
def push_jobs(monkeypatch) -> list[tuple[int, float | None]]:
    """In-process, delivery jobs are recorded instead of run: (config pk, countdown).
    Tests that deliver drive them with `drain_push_jobs`."""
    from push import dispatch

    jobs: list[tuple[int, float | None]] = []
    monkeypatch.setattr(
        dispatch, "enqueue_delivery", lambda *, config_pk, countdown=None: jobs.append((config_pk, countdown))
    )
    return jobs


@contextmanager
def as_for_each_test() -> Iterator[None]:
    """What the autouse fixtures above give each in-process test (agents run eagerly after
    commit, delivery jobs not run, no DNS, short waits), for a fixture of a wider scope, which
    builds its data before they apply."""
    from django.test import override_settings

    from outbound import ssrf
    from push import dispatch

    eager = celery_app.conf.task_always_eager
    with pytest.MonkeyPatch.context() as patch, override_settings(A2A_BLOCKING_TIMEOUT=10, HINT_FALLBACK_POLL=0.2):
        patch.setattr(dispatch, "enqueue_delivery", lambda *, config_pk, countdown=None: None)
        patch.setattr(ssrf, "_getaddrinfo", FakeDns().getaddrinfo)
        celery_app.conf.task_always_eager = True
        try:
            yield
        finally:
            celery_app.conf.task_always_eager = eager


def drain_push_jobs(jobs: list, *, limit: int = 200) -> list[str]:
    """Run recorded delivery jobs in order (waiting out their countdowns) until none are left."""
    import time

    from push import delivery

    outcomes = []
    for _ in range(limit):
        if not jobs:
            return outcomes
        config_pk, countdown = jobs.pop(0)
        if countdown:
            time.sleep(countdown)
        outcomes.append(delivery.run(config_pk=config_pk))
    raise AssertionError(f"delivery jobs keep coming: {jobs[:5]}")


@pytest.fixture
def receiver():
    from tests.receiver import Receiver

    running = Receiver().start()
    yield running
    running.stop()


def own_session():
    """A psycopg connection of its own to the test database, outside Django's."""
    import psycopg
    from django.db import connection

    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"] or "postgres",
        dbname=db["NAME"],
        autocommit=True,
    )


def end_sessions(where: str, *params: Any) -> int:
    """End the Postgres sessions `where` selects in pg_stat_activity (as a restart ends them
    all), from a connection of its own; how many were ended."""
    with own_session() as admin:
        ended = admin.execute(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND ({where})",
            params,
        ).fetchall()
    return len(ended)


@contextmanager
def migrated_back(targets: list[tuple[str, str | None]]) -> Iterator[Any]:
    """The test database migrated back to `targets` for the block (its executor given), then
    forward to the latest migrations whatever happens, for the tests after it.

    Going back past a migration that makes a Postgres domain and forward again makes the type
    anew, under another oid, and every other session's prepared statements still name the old
    one ("cache lookup failed for type"): those sessions are ended, as a deployment restarts its
    processes after it migrates (the live stacks' take a new one, as after a Postgres restart),
    and this process's own connection is closed."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    try:
        yield executor
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        connection.close()
        end_sessions("datname = current_database()")


def backend_pid() -> int:
    """The Postgres session of Django's default connection in this thread."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


async def asgi_get(app, path: str, host: str | bytes) -> tuple[int, bytes]:
    """One GET through an ASGI application with exactly this Host header."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", host if isinstance(host, bytes) else host.encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict] = []
    incoming = [{"type": "http.request", "body": b"", "more_body": False}]
    answered = asyncio.Event()

    async def receive():
        if incoming:
            return incoming.pop()
        await answered.wait()  # the client stays until the answer is complete, then leaves
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body


def run_async(coro):
    """asyncio.run, then close the connection the ORM opened on asgiref's worker thread."""
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections

    async def main():
        try:
            return await coro
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(main())


@pytest.fixture(params=["one-statement", "orm"])
def store_path(request, monkeypatch):
    """Run a test on both write/read paths: Postgres' single statements, and the ORM path
    that SQLite (the embedded mode) takes and that a failed guard falls back to."""
    if request.param == "orm":
        from tasks_app import sql

        monkeypatch.setattr(sql, "available", lambda: False)
    return request.param


# --- tenants, agents, keys -------------------------------------------------------------


@pytest.fixture
def tenant(db):
    from accounts.services import tenant_ensure

    return tenant_ensure(slug="acme", name="Acme")


def make_agent(tenant, slug: str, executor: str, **fields):
    from accounts.services import agent_ensure

    defaults = {
        "name": slug.title(),
        "description": f"The {slug} agent",
        "executor": executor,
        "input_modes": ["text/plain"],
        "output_modes": ["text/plain"],
        "is_public": False,
        "skills": [{"id": slug, "name": slug, "description": f"{slug} skill", "tags": ["test"]}],
    }
    defaults.update(fields)
    return agent_ensure(tenant=tenant, slug=slug, defaults=defaults)


@pytest.fixture
def auth_caches(settings):
    """Agents and keys cached as in production: while this process hears of every change on
    Redis, so that a change must be announced to take effect before the entry expires."""
    import time

    from accounts import changes
    from accounts.selectors import caches_clear

    settings.AUTH_CACHE_SECONDS = 60
    caches_clear()
    deadline = time.monotonic() + 5
    while not changes.caches_usable():
        assert time.monotonic() < deadline, "the accounts change listener never subscribed"
        time.sleep(0.01)
    yield
    caches_clear()


def run_embedded(script: str, tmp_path: Path) -> Any:
    """Run `script` in a fresh Python with the embedded mode's settings (SQLite in `tmp_path`)
    and return the JSON of its last line of output."""
    env = {
        **os.environ,
        "AGENTSERVER_EMBEDDED": "1",
        "SQLITE_PATH": str(tmp_path / "db.sqlite3"),
        "DJANGO_SETTINGS_MODULE": "agentserver.settings",
        "DB_THREADS": "0",
        "LOG_LEVEL": "WARNING",
    }
    # A bound, not a wait: migrating a fresh SQLite database is most of it, and a machine busy
    # with parallel workers has taken over 120 s for that.
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def echo_agent(tenant):
    return make_agent(tenant, "echo", "echo")


@pytest.fixture
def writer_agent(tenant):
    return make_agent(tenant, "writer", "writer", settings={"delay": 0})


@pytest.fixture
def conformance_agent(tenant):
    return make_agent(tenant, "conformance", "conformance", is_public=True)


@pytest.fixture
def alice_key(tenant) -> str:
    from accounts.services import api_key_create

    return api_key_create(tenant=tenant, name="alice", principal="alice")[1]


@pytest.fixture
def bob_key(tenant) -> str:
    from accounts.services import api_key_create

    return api_key_create(tenant=tenant, name="bob", principal="bob")[1]


# --- calling the JSON-RPC endpoint -----------------------------------------------------


def user_message(text: str = "hello", **extra: Any) -> dict[str, Any]:
    import uuid

    return {
        "messageId": extra.pop("messageId", str(uuid.uuid4())),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        **extra,
    }


@dataclass
class RpcResponse:
    status: int
    headers: Any
    body: dict[str, Any]

    @property
    def result(self) -> Any:
        assert "error" not in self.body, self.body
        return self.body["result"]

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.body, self.body
        return self.body["error"]


class Rpc:
    """JSON-RPC as an A2A 1.0 client sends it."""

    version_headers = V1
    send_method = "SendMessage"
    new_message = staticmethod(user_message)

    def __init__(self, client) -> None:
        self.client = client

    def raw(
        self,
        path: str,
        body: bytes,
        *,
        key: str | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> RpcResponse:
        hdrs = {**self.version_headers, **(headers or {})}
        if key:
            hdrs["X-API-Key"] = key
        response = self.client.post(path, data=body, content_type=content_type, headers=hdrs)
        body_json = orjson.loads(response.content) if response.content else {}
        return RpcResponse(response.status_code, response.headers, body_json)

    def __call__(
        self,
        path: str,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        request_id: Any = 1,
    ) -> RpcResponse:
        body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        return self.raw(path, body, key=key, headers=headers)

    def send(
        self,
        path: str,
        text: str = "hello",
        *,
        key: str | None = None,
        configuration: dict | None = None,
        **message_fields: Any,
    ) -> RpcResponse:
        params: dict[str, Any] = {"message": self.new_message(text, **message_fields)}
        if configuration:
            params["configuration"] = configuration
        return self(path, self.send_method, params, key=key)


@pytest.fixture
def rpc(client) -> Rpc:
    return Rpc(client)


# --- a webhook agent's endpoint (tests/webhook_endpoint.py) ------------------------------


@pytest.fixture
def secret() -> str:
    """A webhook agent's signing secret, in Standard Webhooks' form."""
    from accounts.services import agent_secret_generate

    return agent_secret_generate()


@pytest.fixture
def endpoint(secret):
    """A webhook endpoint on 127.0.0.1 that checks each request's signature with `secret`."""
    from tests.webhook_endpoint import Endpoint

    running = Endpoint(secret).start()
    yield running
    running.stop()


# --- a fronted agent's upstream (tests/a2a_upstream.py) ----------------------------------


@pytest.fixture
def upstream():
    """An A2A 1.0 agent on 127.0.0.1, built on the official SDK, for a fronted agent to call."""
    from tests.a2a_upstream import Upstream

    running = Upstream("1.0").start()
    yield running
    running.stop()


@pytest.fixture
def upstream_03():
    """The same agent speaking A2A 0.3."""
    from tests.a2a_upstream import Upstream

    running = Upstream("0.3").start()
    yield running
    running.stop()


# --- the live stack: daphne + a Celery worker as subprocesses ---------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CELERY = "celery"
IN_PROCESS = "in-process"


@dataclass
class LiveStack:
    """The server as it runs, over real HTTP: in the `celery` mode two daphne processes (no
    shared memory between them) and a Celery worker, woken through Redis; in the `in-process`
    mode, the embedded mode's, one daphne that runs the agents on its own threads and wakes its
    own streams, without Redis (then both `urls` are that one process)."""

    urls: list[str]
    env: dict[str, str]
    logs: Path
    web_pids: list[int]
    worker_pid: int = 0
    mode: str = CELERY

    def worker_children(self) -> list[int]:
        """The worker's prefork children: the processes that run the agents."""
        return child_pids(self.worker_pid)

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def web_pid(self) -> int:
        return self.web_pids[0]

    def log(self, name: str) -> str:
        """A process's log; in the in-process mode the worker's is the web process's."""
        if name == "worker" and self.mode == IN_PROCESS:
            name = "web0"
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def needs_workers(self, why: str) -> None:
        """Skip a test about the worker processes themselves in the in-process mode."""
        if self.mode == IN_PROCESS:
            pytest.skip(f"the in-process mode has no worker process: {why}")


# What the live tests start: daphne on a port, and a Celery worker with two children.
WORKER_COMMAND = [
    *("celery", "-A", "agentserver", "worker", "-l", "info", "--concurrency", "2"),
    *("--without-gossip", "--without-mingle", "--without-heartbeat"),
]


# The run host (tasks_app/runhost.py): a worker with the threads pool on the async runs' queue.
RUN_HOST_COMMAND = [
    *("celery", "-A", "agentserver", "worker", "-l", "info", "-P", "threads", "--concurrency", "1000"),
    *("--without-gossip", "--without-mingle", "--without-heartbeat"),
]


def daphne_command(port: int) -> list[str]:
    return ["daphne", "-b", "127.0.0.1", "-p", str(port), "agentserver.asgi:application"]


def serves(url: str) -> bool:
    """Whether a daphne at `url` answers its health check."""
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def worker_ready(log: Path) -> bool:
    return "ready." in log.read_text(errors="replace")


# How long a server the tests start may take to answer: it returns as soon as the server does.
# Seconds on an idle machine, but a whole suite on parallel workers (and whatever else shares
# the machine) can starve a starting process of CPU far longer than that.
STARTUP_TIMEOUT = 120


def _wait_for(predicate, timeout: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    dump = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs.glob("*.log"))
    raise RuntimeError(f"{what} did not come up in {timeout}s\n{dump}")


def _live_env() -> dict[str, str]:
    """The live stack's settings: the test database, short limits and polls."""
    from django.db import connection

    db = connection.settings_dict
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentserver.settings",
        "DATABASE_URL": (
            f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        ),
        "REDIS_URL": os.environ["REDIS_URL"],
        "DB_POOL": "1",
        "DB_THREADS": "6",
        # As in production: lookups cached, and dropped everywhere on a change (accounts.changes).
        "AUTH_CACHE_SECONDS": "30",
        "DB_POOL_MAX": "8",
        "HINT_FALLBACK_POLL": "0.5",
        "SSE_HEARTBEAT": "1",
        "AGENT_SOFT_TIME_LIMIT": "3",
        "AGENT_TIME_LIMIT": "6",
        "SWEEP_UNCLAIMED_AFTER": "1",
        "RUN_LIVENESS_TIMEOUT": "10",  # worker liveness on, as in production (the tests' own process has it off)
        "PYTHONUNBUFFERED": "1",
        # Prometheus in multiprocess mode, as make run has it: every process (the worker's
        # children too) writes its counts there, and any web process's /metrics sums them.
        "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix="agentserver-metrics-"),
        "METRICS_ENABLED": "1",
        "METRICS_PUBLIC": "1",  # as make run has it (on loopback); tests/test_ops.py tests the token
    }


@pytest.fixture(scope="session")
def live_celery(django_db_setup, django_db_blocker):
    """daphne and a Celery worker serving the test database over real HTTP and Redis."""
    ports = [_free_port(), _free_port()]
    logs = Path(tempfile.mkdtemp(prefix="agentserver-live-"))
    env = _live_env()
    with serving(env, ports, logs) as procs:
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        yield LiveStack(urls=urls, env=env, logs=logs, web_pids=[p.pid for p in procs[:-1]], worker_pid=procs[-1].pid)


@pytest.fixture
def live(live_celery):
    return live_celery


@pytest.fixture(scope="module")
def live_in_process(django_db_setup, django_db_blocker):
    """One daphne doing its own background work on threads (BACKGROUND_WORK=threads, as the
    embedded mode does), without Redis, on the test database. Per module: its beat thread
    sweeps the shared test database, which only the live tests should see."""
    port = _free_port()
    logs = Path(tempfile.mkdtemp(prefix="agentserver-live-threads-"))
    # Sweeps as often as the live tests' limits call for, but never a run a test just sent.
    env = {**_live_env(), "REDIS_URL": "", "BACKGROUND_WORK": "threads", "SWEEP_EVERY": "1"}
    with serving(env, [port], logs, worker=False) as procs:
        url = f"http://127.0.0.1:{port}"
        yield LiveStack(urls=[url, url], env=env, logs=logs, web_pids=[procs[0].pid], mode=IN_PROCESS)


@pytest.fixture(scope="module", params=[CELERY, IN_PROCESS])
def live_each_mode(request) -> LiveStack:
    """The live stack in each mode in turn: a module runs its live tests against both by
    defining `live` as this. Module-scoped, so a module's tests run in one mode, then the
    other: the in-process server (and its beat) is up only for the second half."""
    return request.getfixturevalue("live_celery" if request.param == CELERY else "live_in_process")


@contextmanager
def serving(
    env: dict[str, str], ports: list[int], logs: Path, *, worker: bool = True
) -> Iterator[list[subprocess.Popen]]:
    """A daphne on each of `ports` and (unless not `worker`) a Celery worker, with `env`,
    logging into `logs`; once they answer, the processes (the worker last); stopped afterwards."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", *daphne_command(port)],
            cwd=ROOT,
            env=env,
            stdout=open(logs / f"web{i}.log", "wb"),
            stderr=subprocess.STDOUT,
        )
        for i, port in enumerate(ports)
    ]
    if worker:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", *WORKER_COMMAND],
                cwd=ROOT,
                env=env,
                stdout=open(logs / "worker.log", "wb"),
                stderr=subprocess.STDOUT,
            )
        )
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        _wait_for(lambda: all(map(serves, urls)), STARTUP_TIMEOUT, "daphne", logs)
        if worker:
            _wait_for(lambda: worker_ready(logs / "worker.log"), STARTUP_TIMEOUT, "the worker", logs)
        yield procs
    finally:
        stop(procs)


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process, then wait up to 10 s for each before killing it."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


# --- calling the HTTP+JSON routes -------------------------------------------------------


@dataclass
class RestResponse:
    status: int
    headers: Any
    body: Any  # the JSON body, or the raw bytes of a stream
    streamed: bool = False

    @property
    def status_error(self) -> dict[str, Any]:
        """The google.rpc.Status of an error answer, checked for its form (AIP-193)."""
        assert self.status >= 400, (self.status, self.body)
        error = self.body["error"]
        assert error["code"] == self.status and isinstance(error["message"], str), error
        return error

    @property
    def reason(self) -> str:
        (info,) = self.status_error["details"]
        assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo", info
        return info["reason"]

    def events(self) -> list[tuple[int | None, dict[str, Any]]]:
        """(id, data) of each event of a streamed answer; an `event: error` frame as ("error", data)."""
        assert self.streamed, (self.status, self.body)
        found: list = []
        for frame in self.body.split(b"\n\n"):
            fields = dict(
                line.partition(b":")[::2] for line in frame.split(b"\n") if line and not line.startswith(b":")
            )
            if b"data" in fields:
                name = fields.get(b"event", b"").strip().decode() or None
                event_id = int(fields[b"id"]) if b"id" in fields else None
                found.append((name or event_id, orjson.loads(fields[b"data"])))
        return found


class Rest:
    """The A2A 1.0 HTTP+JSON routes of an agent through Django's client: `rest("GET", path,
    "tasks/<id>", query=...)`; path is the agent's, the route is appended to it."""

    def __init__(self, client) -> None:
        self.client = client

    def __call__(
        self,
        http_method: str,
        agent_path: str,
        route: str,
        *,
        key: str | None = None,
        query: dict[str, Any] | None = None,
        body: Any = None,
        raw: bytes | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> RestResponse:
        from urllib.parse import urlencode

        from asgiref.sync import async_to_sync

        hdrs = {**V1, **(headers or {})}
        if key:
            hdrs["X-API-Key"] = key
        url = agent_path + route + (f"?{urlencode(query)}" if query else "")
        data = raw if raw is not None else (orjson.dumps(body) if body is not None else b"")
        response = self.client.generic(http_method, url, data=data, content_type=content_type, headers=hdrs)
        if response.streaming:

            async def drained() -> bytes:
                return b"".join([chunk async for chunk in response.streaming_content])

            return RestResponse(response.status_code, response.headers, async_to_sync(drained)(), streamed=True)
        body_json = orjson.loads(response.content) if response.content else None
        return RestResponse(response.status_code, response.headers, body_json)


@pytest.fixture
def rest(client) -> Rest:
    return Rest(client)


# --- calling the endpoint in A2A 0.3 -----------------------------------------------------


def user_message_v03(text: str = "hello", **extra: Any) -> dict[str, Any]:
    """A 0.3 user message: `kind` discriminators, lowercase role."""
    import uuid

    return {
        "kind": "message",
        "messageId": extra.pop("messageId", str(uuid.uuid4())),
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        **extra,
    }


class Rpc03(Rpc):
    """JSON-RPC as an A2A 0.3 client sends it: no A2A-Version header (unless `headers` name one)."""

    version_headers: dict[str, str] = {}
    send_method = "message/send"
    new_message = staticmethod(user_message_v03)


@pytest.fixture
def rpc03(client) -> Rpc03:
    return Rpc03(client)
