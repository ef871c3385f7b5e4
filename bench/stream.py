"""SSE streams at scale: event latency (commit in the worker -> arrival at the client) with
1, 200 and 2,000 streams, and 10,000 idle streams held by one daphne process (its memory, and
whether every stream's heartbeat comes on time).

    .venv/bin/python bench/stream.py                     # every scenario, defaults below
    .venv/bin/python bench/stream.py --only latency      # or: --only idle
    .venv/bin/python bench/stream.py --streams 1,200 --idle 1000   # the small, quick run

It starts its own daphne (one process) and Celery worker on a fresh `*bench*` database and a
Redis db of its own, with `bench/run.py`'s settings for our server (the limits on streams per
caller, active tasks and requests out of reach: one API key opens every stream), seeds the
demo agents, and stops everything at the end. Results go to
bench/results/stream-<stamp>.{md,json} (git-ignored).

Open files: each stream is a socket in daphne and one in this script, so the script raises
its own RLIMIT_NOFILE soft limit to the hard one (daphne, its child, inherits it) and refuses
to start if that is still short; `ulimit -Hn` shows the hard limit (docs/operations.md,
"Many streams"). 10,000 loopback connections from one client address to one server port take
10,000 ephemeral ports (`net.ipv4.ip_local_port_range`, 28,232 by default).

The client is one event loop (uvloop when installed) with a raw-socket SSE parser
(`asyncio.Protocol`, HTTP/1.0, so the body is the event stream itself); an event's arrival is
the time its bytes reach the parser. Its CPU is reported, as is the CPU of daphne, the worker,
Postgres and Redis over each measured window, so that a busy client can be told apart from a
slow server.

Latency: streams follow echo tasks that append `--chunks` chunks, `--delay-ms` apart. For
each event a client receives, latency = its arrival - its commit, taken as the first wake-up
hint of its task that this script hears (it subscribes to them in Redis) at or after the
event row's `created_at`; the worker publishes that hint right after the commit. Also
reported: arrival - `created_at` (set just before the INSERT), which adds the worker's own
write transaction and errs high.
One stream: `--rounds` SendStreamingMessage calls in a row. N streams: N/`--fanout` writer
tasks that wait for input, each followed by `--fanout` SubscribeToTask clients; once every
stream holds its snapshot (the time that takes is reported), each task gets its answer and
the writer reports progress and streams its text (7 events, 0.2 s apart); the answers are
spread over `--spread` seconds, as from independent clients (by default 0.1 s per task: 2 s
for 200 streams, 20 s for 2,000, so that the tasks' rate, and the work of the worker and
the requests that answer them, stay those of the 200-stream point while the streams grow
tenfold); the worker runs the tasks in threads. So the figure is the steady state of N open
streams, not the burst of opening them.

Idle: `--idle` tasks are left waiting for input (the writer agent, asked nothing clear),
then one SubscribeToTask stream each is opened and held for `--hold` seconds; daphne's
resident set size (VmRSS) is read before, with all streams open, and at the end. Heartbeats:
a stream that hears nothing sends `: keep-alive` after SSE_HEARTBEAT x U(0.85, 1) seconds
(tasks_app/streams.py's jitter, so that streams opened together do not all read the log at
once), measured from the end of its last read of the log: the intervals each stream sees
(from its snapshot's arrival to its first keep-alive, then between keep-alives), counted
when they end inside the hold, and their lateness (interval - SSE_HEARTBEAT; early is
by design). A stream still waiting at the end for longer than SSE_HEARTBEAT + 1 s counts as
silent.

No traffic leaves the machine: everything is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import os
import platform
import resource
import sys
import time
import uuid
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import load  # noqa: E402
from run import (  # noqa: E402
    Proc,
    cpu_delta,
    cpu_snapshot,
    ensure_database,
    flush_redis,
    log,
    ours_env,
    require_free_port,
    run_checked,
    wait_ready,
)

RESULTS = BENCH_DIR / "results"
# Streams being opened at once: daphne listens with Twisted's default backlog of 50, and a
# connection beyond it is dropped and retried by the kernel a second later.
OPENING_AT_ONCE = 40


# --- a minimal SSE client on a raw socket ------------------------------------------------------


class Stream(asyncio.Protocol):
    """One SSE stream: HTTP/1.0, so the body is the event stream itself, read to EOF."""

    def __init__(self, port: int, path: str, key: str, method: str, params: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
        self.port = port
        self.request = (
            f"POST {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"A2A-Version: 1.0\r\nX-API-Key: {key}\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.task_id: str | None = None
        self.events: list[tuple[int, float]] = []  # (seq, arrival epoch seconds) of status/artifact updates
        self.opened_at: float | None = None  # arrival of the first event (the task)
        self.beats: list[float] = []  # arrivals of keep-alives after the first event
        self.other = 0  # data frames that are neither the task nor an update (errors)
        loop = asyncio.get_running_loop()
        self.first: asyncio.Future[str | None] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None
        self._buffer = b""
        self._head = True
        self._refused = False
        self._seq = 0

    async def open(self) -> None:
        await asyncio.get_running_loop().create_connection(lambda: self, "127.0.0.1", self.port)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        arrived = time.time()
        buffer = self._buffer + data
        if self._head:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self._buffer = buffer
                return
            if b" 200 " not in buffer[: buffer.find(b"\r\n")]:
                self._refused = True
            if self._refused:
                self._buffer = buffer  # kept whole for the error, up to EOF
                return
            self._head = False
            buffer = buffer[end + 4 :]
        *lines, self._buffer = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                self._data(line, arrived)
            elif line.startswith(b"id:"):
                self._seq = int(line[3:])
            elif line.startswith(b": keep-alive") and self.opened_at is not None:
                self.beats.append(arrived)

    def _data(self, line: bytes, arrived: float) -> None:
        if self.opened_at is None:
            reply = json.loads(line[5:])
            result = reply.get("result")
            if result is None:
                self._end(RuntimeError(f"stream failed: {reply!r}"))
                return
            self.opened_at = arrived
            task = result.get("task")
            self.task_id = task["id"] if task else None
            if not self.first.done():
                self.first.set_result(self.task_id)
        elif b'"statusUpdate"' in line or b'"artifactUpdate"' in line:
            self.events.append((self._seq, arrived))
        else:
            self.other += 1

    def connection_lost(self, exc) -> None:
        if self._refused or self._head:
            self._end(RuntimeError(f"stream refused: {self._buffer[:2000]!r}"))
        else:
            self._end(None)

    def _end(self, error: Exception | None) -> None:
        if error is not None and not self.first.done():
            self.first.set_exception(error)
        elif not self.first.done():
            self.first.set_result(None)
        if not self.ended.done():
            self.ended.set_result(None)
        if error is not None and self.transport is not None:
            self.transport.close()


async def open_all(clients: list[Stream]) -> None:
    """Open the streams, `OPENING_AT_ONCE` at a time (from connect to the first event)."""
    semaphore = asyncio.Semaphore(OPENING_AT_ONCE)

    async def one(client: Stream) -> None:
        async with semaphore:
            await client.open()
            await client.first

    await asyncio.gather(*[one(c) for c in clients])


async def post(port: int, path: str, key: str, method: str, params: dict) -> dict:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    writer.write(
        (
            f"POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n"
            f"X-API-Key: {key}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
    )
    raw = await reader.read()
    writer.close()
    return json.loads(raw.split(b"\r\n\r\n", 1)[1])


def message(text: str, **metadata) -> dict:
    return {
        "message": {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            "metadata": metadata,
        }
    }


# --- measurements ----------------------------------------------------------------------


def commit_times(database_url: str, keys: set[tuple[str, int]]) -> dict[tuple[str, int], float]:
    import psycopg

    task_ids = sorted({t for t, _ in keys})
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT task_id::text, seq, extract(epoch from created_at) FROM tasks_app_taskevent "
            "WHERE task_id = ANY(%s::uuid[])",
            [task_ids],
        ).fetchall()
    return {(t, s): float(e) for t, s, e in rows}


def count_in_state(database_url: str, state: str) -> int:
    import psycopg

    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT count(*) FROM tasks_app_task WHERE state = %s", [state]).fetchone()[0]


def percentiles(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": load.percentile(ordered, 50),
        "p90": load.percentile(ordered, 90),
        "p99": load.percentile(ordered, 99),
        "max": ordered[-1] if ordered else None,
    }


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Usage:
    """CPU over a window: this client (getrusage) and, from /proc, the server's processes,
    Postgres and Redis (all of the machine's: another user of them counts too), and the
    machine's busy and steal time."""

    def __init__(self, sessions: dict[str, int]) -> None:
        self.sessions = sessions
        self.wall = time.monotonic()
        self.client = self._client()
        self.procs = cpu_snapshot(sessions)

    @staticmethod
    def _client() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def percent(self) -> dict:
        wall = time.monotonic() - self.wall
        spent = cpu_delta(self.procs, cpu_snapshot(self.sessions))
        out = {"seconds": round(wall, 1), "client": round((self._client() - self.client) / wall * 100, 1)}
        for name in (*self.sessions, "postgres", "redis"):
            out[name] = round(spent.get(name, 0.0) / wall * 100, 1)
        out["machine_busy"] = round(spent.get("_busy", 0.0) / wall * 100, 1)  # of 100 % x cores
        out["steal"] = round(spent.get("_steal", 0.0) / wall * 100, 1)
        return out


class Hints:
    """When each task's wake-up hints reach this process: the worker publishes one right after
    each commit, so the first hint of a task at or after an event's `created_at` marks that
    event's commit (give or take Redis' delivery, which daphne's listener pays too)."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self.seen: dict[str, list[float]] = {}

    async def __aenter__(self) -> Hints:
        import redis.asyncio as aioredis

        self.client = aioredis.Redis.from_url(self.redis_url)
        self.pubsub = self.client.pubsub()
        from redis.connection import parse_url

        # The server's hint channels (settings.REDIS_CHANNEL_PREFIX, by default per database).
        await self.pubsub.psubscribe(f"agentserver:{parse_url(self.redis_url).get('db', 0)}:task:*")
        self.runner = asyncio.ensure_future(self._run())
        return self

    async def _run(self) -> None:
        async for item in self.pubsub.listen():
            if item["type"] == "pmessage":
                task_id = item["channel"].decode().rsplit(":", 1)[1]
                self.seen.setdefault(task_id, []).append(time.time())

    async def __aexit__(self, *exc) -> None:
        self.runner.cancel()
        await self.pubsub.aclose()
        await self.client.aclose()

    def commit_after(self, task_id: str, created: float) -> float | None:
        return next((t for t in self.seen.get(task_id, []) if t >= created), None)


async def latency(a, key: str, agents: dict, streams: int, sessions: dict[str, int]) -> dict:
    load_before = loadavg()
    async with Hints(a.redis_url) as hints:
        received, opening, usage = await _follow(a, key, agents, streams, sessions)
    created = commit_times(a.database_url, {(t, s) for t, s, _ in received})
    from_write, from_commit, by_seq = [], [], {}
    for task_id, seq, arrived in received:
        if (task_id, seq) not in created:
            continue
        from_write.append((arrived - created[(task_id, seq)]) * 1000)
        committed = hints.commit_after(task_id, created[(task_id, seq)])
        if committed is not None:
            from_commit.append((arrived - committed) * 1000)
            by_seq.setdefault(seq, []).append(from_commit[-1])
    return {
        "streams": streams,
        "events": len(received),
        "latency_ms": percentiles(from_commit),
        "from_write_ms": percentiles(from_write),
        "opening_s": round(opening, 2),
        "cpu_percent": usage,
        "loadavg_before": load_before,
        # which events are slow: e.g. those the web process commits itself (a follow-up's
        # "submitted") wait behind the requests it is serving
        "by_seq_ms": {seq: percentiles(values) for seq, values in sorted(by_seq.items())},
    }


async def _follow(
    a, key: str, agents: dict, streams: int, sessions: dict[str, int]
) -> tuple[list[tuple[str, int, float]], float, dict]:
    """(every event the streams received, seconds it took to open them, CPU while they ran)."""
    if streams == 1:
        meta = {"benchChunks": a.chunks, "benchDelayMs": a.delay_ms}
        usage = Usage(sessions)
        clients = []
        for _ in range(a.rounds):
            one = Stream(a.port, agents["echo"], key, "SendStreamingMessage", message("latency", **meta))
            await one.open()
            await one.ended
            clients.append(one)
        return [(c.task_id or "", s, t) for c in clients for s, t in c.events], 0.0, usage.percent()
    # Steady state: every stream is open before any task produces. Writer tasks wait for input
    # first; once all their subscribers hold their snapshot, the answers set them to work.
    writer = agents["writer"]
    tasks = max(1, streams // a.fanout)
    semaphore = asyncio.Semaphore(32)

    async def waiting_task() -> str:
        async with semaphore:
            return (await post(a.port, writer, key, "SendMessage", message("write")))["result"]["task"]["id"]

    ids = await asyncio.gather(*[waiting_task() for _ in range(tasks)])
    clients = [
        Stream(a.port, writer, key, "SubscribeToTask", {"id": task_id}) for task_id in ids for _ in range(a.fanout)
    ][:streams]
    opened = time.monotonic()
    await open_all(clients)
    opening = time.monotonic() - opened
    for c in clients:
        c.events.clear()  # what came in while the others were opening is not steady state
    spread = a.spread if a.spread is not None else 0.1 * len(ids)
    log(f"{len(clients)} streams open ({opening:.1f} s); {len(ids)} tasks get their answers over {spread:.1f} s")
    usage = Usage(sessions)

    async def answer(i: int, task_id: str) -> None:
        # Spread over `spread` seconds, so events arrive as from independent clients, not
        # in bursts of one per task at the same instant (nor a burst of requests to daphne).
        await asyncio.sleep(i * spread / len(ids))
        await post(
            a.port,
            writer,
            key,
            "SendMessage",
            {
                "message": {**message(f"a poem about rivers {i}")["message"], "taskId": task_id},
                "configuration": {"returnImmediately": True},
            },
        )

    await asyncio.gather(*[answer(i, task_id) for i, task_id in enumerate(ids)])
    await asyncio.gather(*[c.ended for c in clients])
    cpu = usage.percent()
    cpu["spread_s"] = round(spread, 1)
    return [(c.task_id or "", s, t) for c in clients for s, t in c.events], opening, cpu


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def idle(a, key: str, writer: str, web_pid: int, sessions: dict[str, int]) -> dict:
    semaphore = asyncio.Semaphore(32)

    async def waiting_task() -> str:
        async with semaphore:
            reply = await post(
                a.port,
                writer,
                key,
                "SendMessage",
                {**message("write something"), "configuration": {"returnImmediately": True}},
            )
            return reply["result"]["task"]["id"]

    started = time.monotonic()
    ids = await asyncio.gather(*[waiting_task() for _ in range(a.idle)])
    deadline = time.monotonic() + 900
    while (waiting := count_in_state(a.database_url, "input-required")) < a.idle:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {waiting} of {a.idle} tasks reached input-required in 900 s")
        await asyncio.sleep(1)
    setup = time.monotonic() - started
    log(f"{a.idle} tasks wait for input ({setup:.0f} s); opening the streams")
    await asyncio.sleep(2)
    before = rss_mb(web_pid)
    load_before = loadavg()
    clients = [Stream(a.port, writer, key, "SubscribeToTask", {"id": task_id}) for task_id in ids]
    opened = time.monotonic()
    opening_usage = Usage(sessions)
    await open_all(clients)
    opening = time.monotonic() - opened
    opening_cpu = opening_usage.percent()
    status, body = await load.http_get(load.Target(f"http://127.0.0.1:{a.port}/", None, "X-API-Key"), "/healthz")
    open_streams = json.loads(body)["streams"]
    log(f"{open_streams} streams open ({opening:.0f} s); holding them {a.hold:.0f} s")
    window_start = time.time()
    usage = Usage(sessions)
    await asyncio.sleep(2)
    held = rss_mb(web_pid)
    await asyncio.sleep(max(0.0, a.hold - 2))
    holding_cpu = usage.percent()
    window_end = time.time()
    at_end = rss_mb(web_pid)
    load_after = loadavg()
    ended_early = sum(c.ended.done() for c in clients)
    for c in clients:
        c.close()
    await asyncio.gather(*[c.ended for c in clients])

    intervals: list[float] = []
    first: list[float] = []  # from the snapshot to the first keep-alive (it includes the first read)
    by_time: dict[int, list[float]] = {}  # lateness by when the interval ended (5 s buckets of the hold)
    silent = 0
    for c in clients:
        marks = [c.opened_at or window_start, *c.beats]
        for n, (s, t) in enumerate(zip(marks, marks[1:], strict=False)):
            if window_start <= t <= window_end:
                intervals.append(t - s)
                if n == 0:
                    first.append(t - s)
                by_time.setdefault(int((t - window_start) // 5) * 5, []).append(t - s - a.heartbeat)
        if window_end - marks[-1] > a.heartbeat + 1:
            silent += 1
    late = [i - a.heartbeat for i in intervals]
    return {
        "idle_streams": a.idle,
        "open_per_healthz": open_streams,
        "setup_s": round(setup, 1),
        "opening_s": round(opening, 1),
        "opening_cpu_percent": opening_cpu,
        "hold_s": a.hold,
        "holding_cpu_percent": holding_cpu,
        "loadavg": [load_before, load_after],
        "rss_before_mb": round(before, 1),
        "rss_held_mb": round(held, 1),
        "rss_at_end_mb": round(at_end, 1),
        "per_stream_kb": round((max(held, at_end) - before) * 1024 / a.idle, 1),
        "heartbeat_s": a.heartbeat,
        "heartbeat_interval_s": {**percentiles(intervals), "min": min(intervals, default=None)},
        "heartbeat_lateness_s": percentiles(late),
        "late_over_1s": sum(x > 1 for x in late),
        "first_interval_s": percentiles(first),
        "lateness_by_time_s": {t: percentiles(v) for t, v in sorted(by_time.items())},
        "silent_streams": silent,
        "ended_early": ended_early,
        "error_frames": sum(c.other for c in clients),
    }


# --- the run ---------------------------------------------------------------------------


def raise_open_files(need: int) -> tuple[int, int]:
    """The soft RLIMIT_NOFILE up to the hard limit (children started from here inherit it);
    refuses to go on if `need` descriptors still do not fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, need)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < need:
        raise SystemExit(
            f"{need} open files are needed (streams + margin) and the hard limit is {hard}: raise it "
            "(`ulimit -Hn`; docs/operations.md, 'Many streams') or ask for fewer streams"
        )
    return soft, hard


def port_range() -> tuple[int, int] | None:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["latency", "idle"])
    p.add_argument("--port", type=int, default=8300)
    p.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/agentserver_bench_streams")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/9")
    p.add_argument("--streams", default="1,200,2000", help="latency points: concurrent streams")
    p.add_argument("--fanout", type=int, default=10, help="subscribers per task when streams > 1")
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--delay-ms", type=int, default=200)
    p.add_argument(
        "--spread", type=float, default=None, help="seconds over which the tasks get their answers (0.1 per task)"
    )
    p.add_argument("--rounds", type=int, default=5, help="sequential streams for the 1-stream point")
    p.add_argument("--idle", type=int, default=10000, help="idle streams (0: none)")
    p.add_argument("--heartbeat", type=float, default=15.0, help="SSE_HEARTBEAT of the server")
    p.add_argument("--hold", type=float, default=35.0, help="seconds to hold the idle streams (two heartbeats)")
    p.add_argument("--ours-env", action="append", default=[], metavar="KEY=VALUE", help="extra server settings")
    p.add_argument("--worker-cmd", default=".venv/bin/celery -A agentserver worker -l warning -P threads -c 32")
    p.add_argument("--web-cmd", default=".venv/bin/daphne -v 0 -b 127.0.0.1 -p {port} agentserver.asgi:application")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    logdir = RESULTS / "logs" / f"stream-{stamp}"
    logdir.mkdir(parents=True, exist_ok=True)
    points = [int(x) for x in a.streams.split(",") if x] if a.only in (None, "latency") else []
    idle_streams = a.idle if a.only in (None, "idle") else 0
    most = max([idle_streams, *points])
    nofile = raise_open_files(most + 500)
    ports = port_range()
    if ports is not None and ports[1] - ports[0] + 1 < most + 500:
        log(f"warning: the ephemeral port range {ports} is short of {most} connections")
    require_free_port(a.port, "server", "--port")
    env = ours_env(a)  # bench/run.py's: DEBUG off, the limits out of reach
    env.update(
        {
            "CELERY_QUEUE": f"bench-stream-{os.getpid()}",
            "SSE_HEARTBEAT": str(a.heartbeat),
            # the worker runs up to 32 agent threads, each needing a connection of its own
            "DB_POOL_MAX": "40",
        }
    )
    for kv in a.ours_env:
        k, _, v = kv.partition("=")
        env[k] = v
    ensure_database(a.database_url, fresh=True)
    flush_redis(a.redis_url)
    run_checked([".venv/bin/python", "manage.py", "migrate", "--noinput"], logdir / "setup.log", env)
    seed = json.loads(
        run_checked([".venv/bin/python", "manage.py", "seed_demo", "--json"], logdir / "setup.log", env)
        .strip()
        .splitlines()[-1]
    )
    loop_kind = "uvloop" if load.install_uvloop() else "asyncio"
    procs = [
        Proc("worker", a.worker_cmd.split(), logdir / "worker.log", env),
        Proc("web", a.web_cmd.format(port=a.port).split(), logdir / "web.log", env),
    ]
    sessions = {"web": procs[1].pid, "worker": procs[0].pid}
    results: dict = {
        "machine": f"{platform.node()} {os.cpu_count()} cpu, {platform.python_version()}",
        "when": stamp,
        "loadavg_start": loadavg(),
        "client_loop": loop_kind,
        "nofile": list(nofile),
        "ephemeral_ports": ports,
        "args": vars(a),
        "latency": [],
        "idle": None,
    }
    try:
        echo, writer = seed["agents"]["echo"], seed["agents"]["writer"]
        wait_ready(
            load.Target(f"http://127.0.0.1:{a.port}{echo}", seed["api_key"], "X-API-Key"),
            [echo + ".well-known/agent-card.json"],
            procs,
            60,
        )
        for n in points:
            log(f"latency with {n} stream(s)")
            results["latency"].append(asyncio.run(latency(a, seed["api_key"], seed["agents"], n, sessions)))
            log(json.dumps({k: v for k, v in results["latency"][-1].items() if k != "by_seq_ms"}))
        if idle_streams:
            log(f"{idle_streams} idle streams")
            results["idle"] = asyncio.run(idle(a, seed["api_key"], writer, procs[1].pid, sessions))
            log(json.dumps(results["idle"]))
    finally:
        for proc in reversed(procs):
            proc.stop()
    md = report(results)
    (RESULTS / f"stream-{stamp}.json").write_text(json.dumps(results, indent=2))
    (RESULTS / f"stream-{stamp}.md").write_text(md)
    print(md)
    return 0


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def report(r: dict) -> str:
    lines = [
        f"# SSE streams, {r['when']} ({r['machine']}; load {r['loadavg_start']}; client {r['client_loop']})",
        "",
    ]
    if r["latency"]:
        a = r["args"]
        lines += [
            f"Commit in the worker -> arrival at the client (and, in brackets, from the worker's "
            f"INSERT: its transaction included). One stream: echo tasks of {a['chunks']} chunks "
            f"{a['delay_ms']} ms apart; more: writer tasks with {a['fanout']} subscribers each, "
            "all streams open before the tasks produce. CPU in % of one core while the events flow.",
            "",
            "| streams | events | p50 ms | p90 ms | p99 ms | max ms | opening | answers over | "
            "CPU client / daphne / worker / postgres |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for point in r["latency"]:
            q, w, c = point["latency_ms"], point["from_write_ms"], point["cpu_percent"]
            lines.append(
                f"| {point['streams']} | {point['events']} | {_ms(q['p50'])} ({_ms(w['p50'])}) | "
                f"{_ms(q['p90'])} ({_ms(w['p90'])}) | {_ms(q['p99'])} ({_ms(w['p99'])}) | "
                f"{_ms(q['max'])} ({_ms(w['max'])}) | {point['opening_s']} s | {c.get('spread_s', '-')} s | "
                f"{c['client']} / {c['web']} / {c['worker']} / {c['postgres']} |"
            )
        lines.append("")
    if r["idle"]:
        m = r["idle"]
        i, late, c = m["heartbeat_interval_s"], m["heartbeat_lateness_s"], m["holding_cpu_percent"]
        lines += [
            "| idle streams | daphne RSS before | all open | at the end | per stream | opening |",
            "|---|---|---|---|---|---|",
            f"| {m['idle_streams']} ({m['open_per_healthz']} per /healthz) | {m['rss_before_mb']} MB | "
            f"{m['rss_held_mb']} MB | {m['rss_at_end_mb']} MB | {m['per_stream_kb']} KB | {m['opening_s']} s |",
            "",
            f"Heartbeats (SSE_HEARTBEAT {m['heartbeat_s']} s, held {m['hold_s']} s): {i['n']} intervals, "
            f"min {_s(i['min'])} / p50 {_s(i['p50'])} / p90 {_s(i['p90'])} / p99 {_s(i['p99'])} / max {_s(i['max'])}; "
            f"lateness p50 {_s(late['p50'])} / p90 {_s(late['p90'])} / p99 {_s(late['p99'])} / max {_s(late['max'])}; "
            f"{m['late_over_1s']} over 1 s late, {m['silent_streams']} streams silent at the end, "
            f"{m['ended_early']} ended early.",
            "",
            f"CPU while holding (% of one core): client {c['client']}, daphne {c['web']}, worker {c['worker']}, "
            f"postgres {c['postgres']}, redis {c['redis']}; machine busy {c['machine_busy']} %, steal {c['steal']} %.",
            "",
        ]
    return "\n".join(lines)


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} s"


if __name__ == "__main__":
    raise SystemExit(main())
