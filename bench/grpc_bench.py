#!/usr/bin/env python3
"""SendMessage over gRPC, side by side: OUR gRPC binding (`manage.py serve_grpc` and a Celery
worker, on Postgres and Redis) against the a2a-sdk's own gRPC server (bench/grpc_peer.py: its
GrpcHandler and DefaultRequestHandler on its Postgres task store), blocking SendMessage to the
echo agent at each concurrency, the servers alternating point by point. Loopback only.

    .venv/bin/python bench/grpc_bench.py                      # -c 1,8,32 x 10 s each
    .venv/bin/python bench/grpc_bench.py -c 8 --duration 5 --rounds 3

The client is grpc.aio in our venv, one channel (HTTP/2 multiplexes the calls), `c` calls
always in flight. Prints a markdown table (req/s, p50, p99, ratio ours/peer, server CPU per
request alone and with Postgres and Redis, from /proc) and saves it with
the JSON in bench/results/. The databases and the Redis db are its own (see --help).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import os
import shlex
import statistics
import sys
import time
import uuid
from pathlib import Path

import grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as R  # noqa: E402 - bench/run.py: processes, databases, Redis

REPO = R.REPO


def request() -> a2a_pb2.SendMessageRequest:
    message = a2a_pb2.Message(message_id=uuid.uuid4().hex, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="hi")])
    return a2a_pb2.SendMessageRequest(message=message)


async def one_point(address: str, metadata: list, c: int, warmup: float, duration: float) -> dict:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        latencies: list[float] = []
        errors = answered = 0
        start = time.monotonic()
        measure_from, end = start + warmup, start + warmup + duration

        async def worker() -> None:
            nonlocal errors, answered
            while (now := time.monotonic()) < end:
                try:
                    answer = await stub.SendMessage(request(), metadata=metadata, timeout=30)
                    ok = answer.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
                except grpc.aio.AioRpcError:
                    ok = False
                done = time.monotonic()
                answered += ok  # warm-up too: the CPU is measured over all of it
                if now >= measure_from and done <= end:
                    if ok:
                        latencies.append(done - now)
                    else:
                        errors += 1

        await asyncio.gather(*(worker() for _ in range(c)))
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else float("nan")

    return {
        "c": c,
        "rps": len(latencies) / duration,
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "errors": errors,
        "answered": answered,
    }


def measured(side: list[R.Proc], sessions: dict[str, int], point_run) -> dict:
    """A point with its server CPU per request (the side's processes and their children) and
    with Postgres and Redis, from start of warm-up to end, over every answer in that time."""
    before = R.cpu_snapshot(sessions)
    point = asyncio.run(point_run)
    d = R.cpu_delta(before, R.cpu_snapshot(sessions))
    server = sum(d.get(p.name, 0.0) for p in side)
    n = max(1, point["answered"])
    point["server_cpu_ms_per_req"] = round(1000 * server / n, 3)
    point["total_cpu_ms_per_req"] = round(1000 * (server + d.get("postgres", 0.0) + d.get("redis", 0.0)) / n, 3)
    return point


def wait_serving(address: str, metadata: list, procs: list[R.Proc], limit: float) -> None:
    deadline = time.monotonic() + limit
    last: object = None
    while time.monotonic() < deadline:
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited:\n{p.tail()}")
        try:
            with grpc.insecure_channel(address) as channel:
                answer = a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(request(), metadata=metadata, timeout=10)
            if answer.task.status.state == a2a_pb2.TASK_STATE_COMPLETED:
                return
            last = answer
        except grpc.RpcError as exc:
            last = exc
        time.sleep(0.5)
    raise RuntimeError(f"{address} never completed an echo: {last}")


def start_ours(a, logdir: Path) -> tuple[list[R.Proc], list]:
    env = R.ours_env(a)
    R.ensure_database(a.database_url, fresh=not a.keep_db)
    R.flush_redis(a.redis_url)
    py = str(REPO / ".venv" / "bin" / "python")
    setup = logdir / "ours-setup.log"
    R.run_checked([py, "manage.py", "migrate", "--noinput"], setup, env)
    out = R.run_checked([py, "manage.py", "seed_demo", "--json"], setup, env)
    seed = next(json.loads(line) for line in reversed(out.strip().splitlines()) if line.strip().startswith("{"))
    procs = [
        R.Proc("ours-worker", shlex.split(a.worker_cmd), logdir / "ours-worker.log", env),
        R.Proc(
            "ours-grpc",
            [py, "manage.py", "serve_grpc", "--port", str(a.ours_port)],
            logdir / "ours-grpc.log",
            {**env, "GRPC_PORT": str(a.ours_port)},
        ),
    ]
    metadata = [("a2a-version", "1.0"), ("x-api-key", seed["api_key"]), ("agentserver-agent", "demo/echo")]
    return procs, metadata


def start_peer(a, logdir: Path) -> tuple[list[R.Proc], list]:
    python = REPO / a.peer_python
    R.ensure_database(a.peer_dsn.replace("+asyncpg", ""), fresh=False)
    argv = [str(python), str(REPO / "bench" / "grpc_peer.py"), "--port", str(a.peer_port), "--dsn", a.peer_dsn]
    return [R.Proc("peer-grpc", argv, logdir / "peer-grpc.log")], [("a2a-version", "1.0")]


def markdown(rows: dict[str, dict[int, list[dict]]], label: str) -> str:
    lines = [
        f"SendMessage over gRPC (blocking, echo), {label}",
        "",
        "| c | ours req/s | peer req/s | ratio | ours p50 ms | peer p50 ms | ours p99 ms | peer p99 ms "
        "| server CPU ms/req ours / peer | with Postgres and Redis | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    keys = ("rps", "p50_ms", "p99_ms", "server_cpu_ms_per_req", "total_cpu_ms_per_req")
    for c in sorted(rows["ours"]):
        ours = {k: statistics.median(r[k] for r in rows["ours"][c]) for k in keys}
        peer = {k: statistics.median(r[k] for r in rows["peer"][c]) for k in keys}
        errors = sum(r["errors"] for side in rows.values() for r in side[c])
        ratio = ours["rps"] / peer["rps"] if peer["rps"] else float("nan")
        lines.append(
            f"| {c} | {ours['rps']:.0f} | {peer['rps']:.0f} | {ratio:.2f} | {ours['p50_ms']:.1f} | "
            f"{peer['p50_ms']:.1f} | {ours['p99_ms']:.1f} | {peer['p99_ms']:.1f} | "
            f"{ours['server_cpu_ms_per_req']:.2f} / {peer['server_cpu_ms_per_req']:.2f} | "
            f"{ours['total_cpu_ms_per_req']:.2f} / {peer['total_cpu_ms_per_req']:.2f} | {errors} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-c", "--concurrency", default="1,8,32")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=1, help="sweeps; the table shows each point's median")
    p.add_argument("--label", default="")
    p.add_argument("--ours-port", type=int, default=9201)
    p.add_argument("--peer-port", type=int, default=9202)
    p.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agentserver_grpc_bench"),
    )
    p.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/4"))
    p.add_argument(
        "--peer-dsn",
        default=os.environ.get("BENCH_PEER_DSN", "postgresql+asyncpg://postgres@127.0.0.1:5432/grpc_bench_peer"),
    )
    p.add_argument("--peer-python", default=os.environ.get("BENCH_PEER_PYTHON", "bench/.peer-venv/bin/python"))
    p.add_argument("--worker-cmd", default=".venv/bin/celery -A agentserver worker -l warning")
    p.add_argument("--ours-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--keep-db", action="store_true")
    a = p.parse_args()
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S")
    results = REPO / "bench" / "results"
    logdir = results / "logs" / f"grpc-{stamp}"
    logdir.mkdir(parents=True, exist_ok=True)
    counts = [int(x) for x in a.concurrency.split(",")]
    sides: dict[str, tuple[list[R.Proc], list, str]] = {}
    rows: dict[str, dict[int, list[dict]]] = {"ours": {c: [] for c in counts}, "peer": {c: [] for c in counts}}
    try:
        for name, start, port in (("ours", start_ours, a.ours_port), ("peer", start_peer, a.peer_port)):
            procs, metadata = start(a, logdir)
            address = f"127.0.0.1:{port}"
            sides[name] = (procs, metadata, address)
            wait_serving(address, metadata, procs, 60)
        order = ["ours", "peer"]
        sessions = {p.name: p.pid for procs, _, _ in sides.values() for p in procs}
        for _ in range(a.rounds):
            for c in counts:
                for name in order:
                    procs, metadata, address = sides[name]
                    point = measured(procs, sessions, one_point(address, metadata, c, a.warmup, a.duration))
                    R.log(
                        f"{name} c={c}: {point['rps']:.0f} req/s, p50 {point['p50_ms']:.1f} ms, "
                        f"{point['server_cpu_ms_per_req']:.2f} ms CPU/req"
                    )
                    rows[name][c].append(point)
                order.reverse()  # who goes first flips from one point to the next
    finally:
        for procs, _, _ in sides.values():
            for proc in reversed(procs):
                proc.stop()
    label = a.label or f"{a.rounds} round(s) of {a.duration:g} s per point"
    table = markdown(rows, label)
    print(table)
    (results / f"grpc-{stamp}.md").write_text(table)
    (results / f"grpc-{stamp}.json").write_text(json.dumps({"args": vars(a), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
