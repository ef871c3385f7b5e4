"""SSE streams: event latency (commit in the worker -> arrival at the client) and the memory
of one daphne process holding many idle streams.

    .venv/bin/python bench/stream.py                 # every scenario, defaults below
    .venv/bin/python bench/stream.py --only latency  # or: --only memory

It starts its own daphne (one process) and Celery worker on a fresh `*bench*` database and a
Redis db of its own, seeds the demo agents, and stops everything at the end. Results go to
bench/results/stream-<stamp>.{md,json} (git-ignored).

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
spread over `--spread` seconds (2), as from independent clients; the worker runs the tasks
in threads. So the figure is the steady state of N open streams, not the burst of
opening them.

Memory: `--idle` tasks are left waiting for input (the writer agent, asked nothing clear),
then one SubscribeToTask stream each is opened and held; daphne's resident set size (VmRSS)
is read before, with all streams open, and after a heartbeat has gone by.

No traffic leaves the machine: everything is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import os
import platform
import sys
import time
import uuid
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import load  # noqa: E402
from run import Proc, ensure_database, flush_redis, log, require_free_port, run_checked, wait_ready  # noqa: E402

RESULTS = BENCH_DIR / "results"


# --- a minimal SSE client: HTTP/1.0, so the body is the event stream itself -------------------


class Stream:
    def __init__(self, port: int, path: str, key: str, method: str, params: dict) -> None:
        self.port, self.path, self.key = port, path, key
        self.body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
        self.events: list[tuple[str, int, float]] = []  # (task id, seq, arrival epoch seconds)
        self.first = asyncio.get_event_loop().create_future()
        self.writer: asyncio.StreamWriter | None = None

    async def run(self) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port, limit=2**22)
        head = (
            f"POST {self.path} HTTP/1.0\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
            f"A2A-Version: 1.0\r\nX-API-Key: {self.key}\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(self.body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + self.body)
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"stream refused: {status!r} {await reader.read(2000)!r}")
        while (await reader.readline()).strip():
            pass
        seq = None
        try:
            while line := await reader.readline():
                if line.startswith(b"id:"):
                    seq = int(line[3:])
                elif line.startswith(b"data:"):
                    arrived = time.time()
                    result = json.loads(line[5:])["result"]
                    if "task" in result:
                        if not self.first.done():
                            self.first.set_result(result["task"]["id"])
                    else:
                        update = result.get("statusUpdate") or result.get("artifactUpdate")
                        if update is not None:
                            self.events.append((update["taskId"], seq, arrived))
        finally:
            self.writer.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


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
        await self.pubsub.psubscribe("agentserver:task:*")
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


async def latency(a, key: str, agents: dict, streams: int) -> dict:
    async with Hints(a.redis_url) as hints:
        received, opening = await _follow(a, key, agents, streams)
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
        # which events are slow: e.g. those the web process commits itself (a follow-up's
        # "submitted") wait behind the requests it is serving
        "by_seq_ms": {seq: percentiles(values) for seq, values in sorted(by_seq.items())},
    }


async def _follow(a, key: str, agents: dict, streams: int) -> tuple[list[tuple[str, int, float]], float]:
    """(every event the streams received, seconds it took to open them)."""
    if streams == 1:
        meta = {"benchChunks": a.chunks, "benchDelayMs": a.delay_ms}
        clients = []
        for _ in range(a.rounds):
            one = Stream(a.port, agents["echo"], key, "SendStreamingMessage", message("latency", **meta))
            await one.run()
            clients.append(one)
        return [e for c in clients for e in c.events], 0.0
    # Steady state: every stream is open before any task produces. Writer tasks wait for input
    # first; once all their subscribers hold their snapshot, the answers set them to work.
    writer = agents["writer"]
    tasks = max(1, streams // a.fanout)
    waiting = await asyncio.gather(*[post(a.port, writer, key, "SendMessage", message("write")) for _ in range(tasks)])
    ids = [w["result"]["task"]["id"] for w in waiting]
    clients = [
        Stream(a.port, writer, key, "SubscribeToTask", {"id": task_id}) for task_id in ids for _ in range(a.fanout)
    ][:streams]
    opened = time.monotonic()
    runners = [asyncio.ensure_future(c.run()) for c in clients]
    await asyncio.gather(*[c.first for c in clients])
    opening = time.monotonic() - opened
    for c in clients:
        c.events.clear()  # what came in while the others were opening is not steady state

    async def answer(i: int, task_id: str) -> None:
        # Spread over `--spread` seconds, so events arrive as from independent clients, not
        # in bursts of one per task at the same instant (nor a burst of requests to daphne).
        await asyncio.sleep(i * a.spread / len(ids))
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
    await asyncio.gather(*runners)
    return [e for c in clients for e in c.events], opening


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def memory(a, key: str, writer: str, web_pid: int) -> dict:
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

    ids = await asyncio.gather(*[waiting_task() for _ in range(a.idle)])
    deadline = time.monotonic() + 600
    while (waiting := count_in_state(a.database_url, "input-required")) < a.idle:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {waiting} of {a.idle} tasks reached input-required in 600 s")
        await asyncio.sleep(1)
    await asyncio.sleep(1)
    before = rss_mb(web_pid)
    clients = [Stream(a.port, writer, key, "SubscribeToTask", {"id": task_id}) for task_id in ids]
    runners = [asyncio.ensure_future(c.run()) for c in clients]
    for i in range(0, len(clients), 100):  # open them a hundred at a time
        await asyncio.gather(*[c.first for c in clients[i : i + 100]])
    status, body = await load.http_get(load.Target(f"http://127.0.0.1:{a.port}/", None, "X-API-Key"), "/healthz")
    open_streams = json.loads(body)["streams"]
    await asyncio.sleep(2)
    held = rss_mb(web_pid)
    await asyncio.sleep(a.hold)  # at least one heartbeat: every stream has read the log again
    after_heartbeat = rss_mb(web_pid)
    for c in clients:
        c.close()
    await asyncio.gather(*runners, return_exceptions=True)
    return {
        "idle_streams": a.idle,
        "open_per_healthz": open_streams,
        "rss_before_mb": round(before, 1),
        "rss_held_mb": round(held, 1),
        "rss_after_heartbeat_mb": round(after_heartbeat, 1),
        "per_stream_kb": round((max(held, after_heartbeat) - before) * 1024 / a.idle, 1),
    }


# --- the run ---------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["latency", "memory"])
    p.add_argument("--port", type=int, default=8400)
    p.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/agentserver_bench_stream")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    p.add_argument("--streams", default="1,200", help="latency points: concurrent streams")
    p.add_argument("--fanout", type=int, default=10, help="subscribers per task when streams > 1")
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--delay-ms", type=int, default=200)
    p.add_argument("--spread", type=float, default=2.0, help="seconds over which the tasks get their answers")
    p.add_argument("--rounds", type=int, default=5, help="sequential streams for the 1-stream point")
    p.add_argument("--idle", type=int, default=1000, help="idle streams for the memory point")
    p.add_argument("--heartbeat", type=float, default=15.0, help="SSE_HEARTBEAT of the server")
    p.add_argument("--hold", type=float, default=17.0, help="seconds to hold the idle streams")
    p.add_argument("--worker-cmd", default=".venv/bin/celery -A agentserver worker -l warning -P threads -c 32")
    p.add_argument("--web-cmd", default=".venv/bin/daphne -v 0 -b 127.0.0.1 -p {port} agentserver.asgi:application")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    logdir = RESULTS / "logs" / f"stream-{stamp}"
    logdir.mkdir(parents=True, exist_ok=True)
    require_free_port(a.port, "server", "--port")
    env = {
        **os.environ,
        "DATABASE_URL": a.database_url,
        "REDIS_URL": a.redis_url,
        "DJANGO_SETTINGS_MODULE": "agentserver.settings",
        "CELERY_QUEUE": f"bench-stream-{os.getpid()}",
        "SSE_HEARTBEAT": str(a.heartbeat),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
        # the worker runs up to 32 agent threads, each needing a connection of its own
        "DB_POOL_MAX": "40",
    }
    env.pop("AGENTSERVER_EMBEDDED", None)
    ensure_database(a.database_url, fresh=True)
    flush_redis(a.redis_url)
    run_checked([".venv/bin/python", "manage.py", "migrate", "--noinput"], logdir / "setup.log", env)
    seed = json.loads(
        run_checked([".venv/bin/python", "manage.py", "seed_demo", "--json"], logdir / "setup.log", env)
        .strip()
        .splitlines()[-1]
    )
    procs = [
        Proc("worker", a.worker_cmd.split(), logdir / "worker.log", env),
        Proc("web", a.web_cmd.format(port=a.port).split(), logdir / "web.log", env),
    ]
    results: dict = {
        "machine": f"{platform.node()} {os.cpu_count()} cpu, {platform.python_version()}",
        "when": stamp,
        "args": vars(a),
        "latency": [],
        "memory": None,
    }
    try:
        echo, writer = seed["agents"]["echo"], seed["agents"]["writer"]
        wait_ready(
            load.Target(f"http://127.0.0.1:{a.port}{echo}", seed["api_key"], "X-API-Key"),
            [echo + ".well-known/agent-card.json"],
            procs,
            60,
        )
        if a.only in (None, "latency"):
            for n in [int(x) for x in a.streams.split(",")]:
                log(f"latency with {n} stream(s)")
                results["latency"].append(asyncio.run(latency(a, seed["api_key"], seed["agents"], n)))
                log(json.dumps(results["latency"][-1]))
        if a.only in (None, "memory"):
            log(f"memory with {a.idle} idle streams")
            results["memory"] = asyncio.run(memory(a, seed["api_key"], writer, procs[1].pid))
            log(json.dumps(results["memory"]))
    finally:
        for proc in reversed(procs):
            proc.stop()
    md = report(results)
    (RESULTS / f"stream-{stamp}.json").write_text(json.dumps(results, indent=2))
    (RESULTS / f"stream-{stamp}.md").write_text(md)
    print(md)
    return 0


def report(r: dict) -> str:
    lines = [f"# SSE streams, {r['when']} ({r['machine']})", ""]
    if r["latency"]:
        a = r["args"]
        lines += [
            f"Commit in the worker -> arrival at the client (and, in brackets, from the worker's "
            f"INSERT: its transaction included). One stream: echo tasks of {a['chunks']} chunks "
            f"{a['delay_ms']} ms apart; more: writer tasks with {a['fanout']} subscribers each, "
            "all streams open before the tasks produce.",
            "",
            "| streams | events | p50 ms | p90 ms | p99 ms | max ms | opening all streams |",
            "|---|---|---|---|---|---|---|",
        ]
        for point in r["latency"]:
            q, w = point["latency_ms"], point["from_write_ms"]
            lines.append(
                f"| {point['streams']} | {point['events']} | {q['p50']:.1f} ({w['p50']:.1f}) | "
                f"{q['p90']:.1f} ({w['p90']:.1f}) | {q['p99']:.1f} ({w['p99']:.1f}) | "
                f"{q['max']:.1f} ({w['max']:.1f}) | {point['opening_s']} s |"
            )
        lines.append("")
    if r["memory"]:
        m = r["memory"]
        lines += [
            "| idle streams | daphne RSS before | with streams | after a heartbeat | per stream |",
            "|---|---|---|---|---|",
            f"| {m['idle_streams']} ({m['open_per_healthz']} per /healthz) | {m['rss_before_mb']} MB | "
            f"{m['rss_held_mb']} MB | {m['rss_after_heartbeat_mb']} MB | {m['per_stream_kb']} KB |",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
