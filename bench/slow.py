"""Runs that wait (issue 53): N runs of D ms each, ours against the a2a-sdk peer.

    .venv/bin/python bench/slow.py                      # N = 40, 400, 2000 x 2000 ms, + the noisy neighbour
    .venv/bin/python bench/slow.py --quick              # a minute or two: N = 20 x 1000 ms, a small noisy point
    .venv/bin/python bench/slow.py -n 40,400 --delay-ms 2000 --only ours --no-noisy
    .venv/bin/python bench/slow.py --noisy-only --noisy-runs 100 --noisy-delay-ms 3000

A hosted agent mostly waits (on a model, a webhook, an upstream agent). The echo agent and the
peer both sleep `benchDelayMs` ms (message metadata) before they answer, so a run here is D ms of
waiting and almost no work: what is measured is how many waiting runs a server keeps in flight.

Both servers are started as bench/run.py starts them (ours: migrate, seed_demo, the limits raised
so that they never refuse, daphne and a Celery worker shaped as `make run`'s, WORKER_CONCURRENCY
prefork children; the peer from its own venv with its Postgres store), on a database, Redis db
and ports of this bench's own, and stopped at the end whatever happens.

A point (N, D) against one server:

* **send**: all N SendMessage calls with `returnImmediately: true` and `benchDelayMs: D` are
  written at once, at most --send-concurrency in flight (one keep-alive connection each);
  *accept s* is from the first request written to the last answer read.
* **completion**: GetTask (`historyLength: 0`) polls the accepted tasks oldest first, each not
  before it has waited its D ms and then at most every --poll-interval s, at most
  --poll-concurrency in flight and --poll-rate a second in all, until every one is terminal or
  --point-timeout has passed since the first send. A task's completion time is its own
  `status.timestamp` (when the server wrote the completed status; same machine, same clock),
  not the moment a poll saw it, so the polling's pace moves no figure; its load is bounded and
  reported (GetTask/s).
* **makespan**: from the first send to the last completion. *run p50/p99*: each run's
  completion minus the moment its own SendMessage was written (nearest rank).
* **peak RSS / PSS**: the server's processes (ours: daphne and the worker with its children;
  the peer: uvicorn and its workers), summed, sampled every --sample-interval s over the point;
  PSS divides the pages the prefork children share. **peak PG conns**: pg_stat_activity rows
  of that server's own database, sampled alike.
* A point that passes --point-timeout is reported as "> timeout"; its unfinished tasks are
  canceled (CancelTask) and one blocking echo goes through the queue after them before the next
  point starts, so a backlog never leaks into it.

The noisy neighbour: tenant B (ours: a second tenant made as seed_demo makes the first, its own
echo agent and key; the peer has no tenants, so B is simply a second client of it) sends
--noisy-probes blocking echoes, one every --probe-every s (open loop, so a slow answer delays no
later probe; a probe gives up after --probe-timeout s), first on a quiet server, then while
tenant A has --noisy-runs runs of --noisy-delay-ms in flight (B starts once A's sends are all
accepted). B's p50/p99 loaded against quiet is the figure.

Results: bench/results/slow-<stamp>.{md,json}; the servers' logs in bench/results/logs/slow-<stamp>/.
No traffic leaves the machine: everything is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime as _dt
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import load  # noqa: E402
import run  # noqa: E402

RESULTS = BENCH_DIR / "results"
SIDES = ("ours", "peer")
DONE = "TASK_STATE_COMPLETED"


# --------------------------------------------------------------------------- #
# Requests
# --------------------------------------------------------------------------- #
def send_body(req_id: int, delay_ms: int, *, immediate: bool) -> bytes:
    params: dict[str, Any] = {
        "message": {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": "hello"}],
            "metadata": {"benchDelayMs": delay_ms},
        }
    }
    if immediate:
        params["configuration"] = {"returnImmediately": True}
    return json.dumps({"jsonrpc": "2.0", "id": str(req_id), "method": "SendMessage", "params": params}).encode()


def rpc_body(req_id: int, method: str, task_id: str) -> bytes:
    params: dict[str, Any] = {"id": task_id}
    if method == "GetTask":
        params["historyLength"] = 0
    return json.dumps({"jsonrpc": "2.0", "id": str(req_id), "method": method, "params": params}).encode()


_FRACTION = re.compile(r"\.(\d+)")


def epoch(stamp: Any) -> float | None:
    """An A2A timestamp (RFC 3339, maybe nanoseconds, maybe Z) as epoch seconds."""
    if not isinstance(stamp, str) or not stamp:
        return None
    text = _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), stamp.replace("Z", "+00:00"), count=1)
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return when.timestamp()


def task_of(status: int, body: bytes) -> dict | None:
    if status != 200:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    result = doc.get("result") if isinstance(doc, dict) else None
    if not isinstance(result, dict):
        return None
    task = result.get("task", result)
    return task if isinstance(task, dict) and task.get("id") else None


def failure(prefix: str, status: int, body: bytes) -> str:
    """What an answer without a task was: its HTTP status, or its JSON-RPC error's code."""
    try:
        error = json.loads(body).get("error") if status == 200 else None
    except (ValueError, AttributeError):
        error = None
    return f"{prefix}_rpc_{error.get('code')}" if isinstance(error, dict) else f"{prefix}_http_{status}"


def percentile(values: list[float], p: float) -> float | None:
    return load.percentile(sorted(values), p)


def rounded(v: float | None, nd: int = 2) -> float | None:
    return None if v is None else round(v, nd)


# --------------------------------------------------------------------------- #
# What the server holds: memory of its processes, connections to its database
# --------------------------------------------------------------------------- #
def _session_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("latin-1")
        return int(data[data.rfind(")") + 2 :].split()[3])
    except (OSError, ValueError, IndexError):
        return None


def _kib(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def memory_kib(sessions: set[int]) -> tuple[int, int, int]:
    """(RSS, PSS, processes) summed over every process of these sessions."""
    rss = pss = n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit() and _session_of(pid) in sessions:
            rss += _kib(f"/proc/{pid}/status", "VmRSS:")
            pss += _kib(f"/proc/{pid}/smaps_rollup", "Pss:")
            n += 1
    return rss, pss, n


class Sampler:
    """A thread that samples a side's memory and its database's connections until stopped."""

    def __init__(self, sessions: set[int], dsn: str | None, database: str, interval: float) -> None:
        self.sessions, self.database, self.interval = sessions, database, interval
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._conn = None
        if dsn:
            try:
                import psycopg

                # the "postgres" database, so that the probe is not one of the counted connections
                parts = run._pg_parts(dsn)
                self._conn = psycopg.connect(
                    host=parts["host"], port=parts["port"], user=parts["user"], dbname="postgres", autocommit=True
                )
            except Exception as exc:  # noqa: BLE001 - the figure is then missing, the point still runs
                run.log(f"no pg_stat_activity samples: {exc!r}")
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _pg(self) -> int | None:
        if self._conn is None:
            return None
        try:
            row = self._conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.database,)
            ).fetchone()
            return int(row[0]) if row else None
        except Exception:  # noqa: BLE001
            return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            rss, pss, n = memory_kib(self.sessions)
            self.samples.append({"t": time.time(), "rss_kib": rss, "pss_kib": pss, "procs": n, "pg": self._pg()})
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        if self._conn is not None:
            self._conn.close()

    def figures(self) -> dict:
        def peak(key: str) -> Any:
            vals = [s[key] for s in self.samples if s[key] is not None]
            return max(vals) if vals else None

        first = self.samples[0] if self.samples else {}
        mib = lambda v: None if v is None else round(v / 1024, 1)  # noqa: E731
        return {
            "samples": len(self.samples),
            "rss_mib_before": mib(first.get("rss_kib")),
            "peak_rss_mib": mib(peak("rss_kib")),
            "peak_pss_mib": mib(peak("pss_kib")),
            "peak_processes": peak("procs"),
            "pg_conns_before": first.get("pg"),
            "peak_pg_conns": peak("pg"),
        }


# --------------------------------------------------------------------------- #
# One point: send N at once, watch them complete
# --------------------------------------------------------------------------- #
class Runs:
    """The runs of one point: when each was written, accepted and completed."""

    def __init__(self) -> None:
        self.sent: dict[str, float] = {}  # task id -> epoch its SendMessage was written
        self.done: dict[str, float] = {}  # task id -> epoch of its terminal status
        self.states: collections.Counter = collections.Counter()
        # (task id, when it may next be polled, monotonic): oldest first
        self.pending: collections.deque[tuple[str, float]] = collections.deque()
        self.errors: collections.Counter = collections.Counter()
        self.error_samples: list[str] = []
        self.first_send: float | None = None
        self.last_accept: float | None = None
        self.sends_finished = False
        self.polls = 0

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(f"{kind}: {detail[:300]}")


async def send_all(
    target: load.Target, runs: Runs, n: int, delay_ms: int, concurrency: int, timeout: float, limit: float
) -> None:
    todo = iter(range(n))

    async def sender() -> None:
        conn = load.Conn(target)
        try:
            for i in todo:
                raw = target.post(send_body(i, delay_ms, immediate=True))
                t0 = time.time()
                if runs.first_send is None:
                    runs.first_send = t0
                try:
                    status, body = await asyncio.wait_for(conn.request(raw), timeout)
                except (TimeoutError, OSError, asyncio.IncompleteReadError, load.HTTPError, ValueError) as exc:
                    runs.error("send_" + type(exc).__name__, repr(exc))
                    continue
                task = task_of(status, body)
                if task is None:
                    runs.error(failure("send", status, body), body.decode("utf-8", "replace"))
                    continue
                runs.last_accept = time.time()
                runs.sent[task["id"]] = t0
                # it cannot be done before it has waited its D ms: no poll before then
                runs.pending.append((task["id"], time.monotonic() + delay_ms / 1000))
        finally:
            conn.close()

    try:
        await asyncio.wait_for(asyncio.gather(*(sender() for _ in range(max(1, min(concurrency, n))))), limit)
    except TimeoutError:
        # the point is over: what was not accepted by now is reported as not accepted
        pass
    runs.sends_finished = True


async def watch(target: load.Target, runs: Runs, a: argparse.Namespace, deadline: float) -> None:
    """GetTask each pending task (oldest first, each at most every poll_interval s, at most
    poll_rate a second in all) until none is pending or the deadline."""
    gap = 1.0 / a.poll_rate
    pace = {"next": time.monotonic()}

    async def poller(k: int) -> None:
        conn = load.Conn(target)
        try:
            while time.monotonic() < deadline:
                if not runs.pending:
                    if runs.sends_finished:
                        return
                    await asyncio.sleep(0.05)
                    continue
                task_id, not_before = runs.pending.popleft()
                wait = max(not_before - time.monotonic(), pace["next"] - time.monotonic())
                pace["next"] = max(pace["next"], time.monotonic()) + gap
                if wait > 0:
                    await asyncio.sleep(wait)
                runs.polls += 1
                try:
                    status, body = await asyncio.wait_for(
                        conn.request(target.post(rpc_body(k, "GetTask", task_id))), a.timeout
                    )
                except (TimeoutError, OSError, asyncio.IncompleteReadError, load.HTTPError, ValueError) as exc:
                    runs.error("poll_" + type(exc).__name__, repr(exc))
                    runs.pending.append((task_id, time.monotonic() + a.poll_interval))
                    await asyncio.sleep(0.05)
                    continue
                task = task_of(status, body)
                state = ((task or {}).get("status") or {}).get("state")
                if state in load.TERMINAL_STATES:
                    assert task is not None
                    runs.states[state] += 1
                    runs.done[task_id] = epoch(task["status"].get("timestamp")) or time.time()
                else:
                    if task is None:
                        runs.error(failure("poll", status, body), body.decode("utf-8", "replace"))
                    runs.pending.append((task_id, time.monotonic() + a.poll_interval))
        finally:
            conn.close()

    await asyncio.gather(*(poller(k) for k in range(a.poll_concurrency)))


async def cancel_all(target: load.Target, task_ids: list[str], concurrency: int, limit: float) -> int:
    todo = iter(task_ids)
    deadline = time.monotonic() + limit
    canceled = 0

    async def canceller(k: int) -> None:
        nonlocal canceled
        conn = load.Conn(target)
        try:
            for task_id in todo:
                if time.monotonic() > deadline:
                    return
                with contextlib.suppress(Exception):
                    status, body = await asyncio.wait_for(
                        conn.request(target.post(rpc_body(k, "CancelTask", task_id))), 30
                    )
                    canceled += task_of(status, body) is not None
        finally:
            conn.close()

    await asyncio.gather(*(canceller(k) for k in range(concurrency)))
    return canceled


async def slow_point(target: load.Target, n: int, delay_ms: int, a: argparse.Namespace) -> Runs:
    runs = Runs()
    deadline = time.monotonic() + a.point_timeout
    await asyncio.gather(
        send_all(target, runs, n, delay_ms, a.send_concurrency, a.timeout, a.point_timeout),
        watch(target, runs, a, deadline),
        return_exceptions=False,
    )
    return runs


def settle(side: run.Side, runs: Runs, a: argparse.Namespace) -> None:
    """Leave the server idle for the next point: cancel what is still pending, then one blocking
    echo, which the queue holds behind every leftover."""
    assert side.target is not None
    left = [task_id for task_id, _ in runs.pending]
    if left:
        run.log(f"{side.name}: canceling the {len(left)} unfinished tasks")
        n = asyncio.run(cancel_all(side.target, left, 16, 120))
        run.log(f"{side.name}: {n} canceled")
    run.smoke(side.target, side.procs, a.settle_timeout)


def measure_slow(side: run.Side, n: int, delay_ms: int, a: argparse.Namespace, db: str) -> dict:
    for p in side.procs:
        if not p.alive():
            raise RuntimeError(f"{p.name} died (exit {p.p.returncode}):\n{p.tail()}")
    assert side.target is not None
    dsn = a.database_url if side.name == "ours" else a.peer_dsn
    with Sampler({p.pid for p in side.procs}, dsn, db, a.sample_interval) as sampler:
        runs = asyncio.run(slow_point(side.target, n, delay_ms, a))
    r = figures(runs, n, a)
    r.update({"side": side.name, "n": n, "delay_ms": delay_ms, **sampler.figures()})
    if r["timed_out"]:
        settle(side, runs, a)
    return r


def figures(runs: Runs, n: int, a: argparse.Namespace) -> dict:
    first = runs.first_send or time.time()
    per_run = [runs.done[t] - runs.sent[t] for t in runs.done if t in runs.sent]
    completed = runs.states.get(DONE, 0)
    timed_out = completed < n
    last = max(runs.done.values()) if runs.done else None
    watched = (max(last or first, runs.last_accept or first) - first) if not timed_out else a.point_timeout
    return {
        "accepted": len(runs.sent),
        "completed": completed,
        "states": dict(runs.states),
        "timed_out": timed_out,
        "accept_s": rounded((runs.last_accept - first) if runs.last_accept else None),
        "makespan_s": None if timed_out or last is None else rounded(last - first),
        # on a timed-out point too: how far in the runs that did end ended
        "last_completion_s": None if last is None else rounded(last - first),
        "run_p50_s": rounded(percentile(per_run, 50)),
        "run_p99_s": rounded(percentile(per_run, 99)),
        "run_max_s": rounded(max(per_run) if per_run else None),
        "gettask": runs.polls,
        "gettask_per_s": rounded(runs.polls / max(1e-9, watched), 1),
        "errors": sum(runs.errors.values()),
        "error_kinds": dict(runs.errors),
        "error_samples": runs.error_samples,
    }


# --------------------------------------------------------------------------- #
# The noisy neighbour
# --------------------------------------------------------------------------- #
async def probes(target: load.Target, count: int, every: float, timeout: float) -> dict:
    """`count` blocking echoes, one started every `every` s, each on its own connection."""
    latencies: list[float] = []
    failures: collections.Counter = collections.Counter()

    async def one(i: int) -> None:
        conn = load.Conn(target)
        try:
            await asyncio.wait_for(conn._connect(), timeout)
            t0 = time.perf_counter()
            status, body = await asyncio.wait_for(conn.request(target.post(send_body(i, 0, immediate=False))), timeout)
            state = ((task_of(status, body) or {}).get("status") or {}).get("state")
            if state == DONE:
                latencies.append(time.perf_counter() - t0)
            else:
                failures[f"state_{state}" if state else f"http_{status}"] += 1
        except (TimeoutError, OSError, asyncio.IncompleteReadError, load.HTTPError, ValueError) as exc:
            failures[type(exc).__name__] += 1
        finally:
            conn.close()

    started = []
    for i in range(count):
        started.append(asyncio.create_task(one(i)))
        await asyncio.sleep(every)
    await asyncio.gather(*started)
    ms = lambda v: None if v is None else round(v * 1000, 1)  # noqa: E731
    return {
        "probes": count,
        "completed": len(latencies),
        "failures": dict(failures),
        "p50_ms": ms(percentile(latencies, 50)),
        "p99_ms": ms(percentile(latencies, 99)),
        "max_ms": ms(max(latencies) if latencies else None),
    }


async def loaded_probes(a_target: load.Target, b_target: load.Target, a: argparse.Namespace) -> tuple[Runs, dict]:
    runs = Runs()
    deadline = time.monotonic() + a.point_timeout
    watcher = asyncio.create_task(watch(a_target, runs, a, deadline))
    await send_all(a_target, runs, a.noisy_runs, a.noisy_delay_ms, a.send_concurrency, a.timeout, a.point_timeout)
    b = await probes(b_target, a.noisy_probes, a.probe_every, a.probe_timeout)
    await watcher
    return runs, b


def measure_noisy(side: run.Side, b_target: load.Target, a: argparse.Namespace, db: str) -> dict:
    assert side.target is not None
    quiet = asyncio.run(probes(b_target, a.noisy_probes, a.probe_every, a.probe_timeout))
    run.log(f"{side.name}: B quiet {quiet}")
    dsn = a.database_url if side.name == "ours" else a.peer_dsn
    with Sampler({p.pid for p in side.procs}, dsn, db, a.sample_interval) as sampler:
        runs, loaded = asyncio.run(loaded_probes(side.target, b_target, a))
    a_figs = figures(runs, a.noisy_runs, a)
    run.log(f"{side.name}: B while A has {a.noisy_runs} x {a.noisy_delay_ms} ms in flight {loaded}")
    if a_figs["timed_out"]:
        settle(side, runs, a)
    return {
        "side": side.name,
        "a_runs": a.noisy_runs,
        "a_delay_ms": a.noisy_delay_ms,
        "a": {**a_figs, **sampler.figures()},
        "b_quiet": quiet,
        "b_loaded": loaded,
    }


# --------------------------------------------------------------------------- #
# Tenant B
# --------------------------------------------------------------------------- #
def seed_tenant_b(a: argparse.Namespace, logdir: Path) -> load.Target:
    """A second tenant made as seed_demo makes the first: the tenant, an echo agent, a key."""
    env = run.ours_env(a)
    py = str(REPO / ".venv" / "bin" / "python")
    log = logdir / "ours-setup.log"

    def manage(*args: str) -> dict:
        out = run.run_checked([py, "manage.py", *args, "--json"], log, env)
        return json.loads(out.strip().splitlines()[-1])

    manage("create_tenant", a.tenant_b, "--name", "Noisy-neighbour bench, tenant B")
    agent = manage("create_agent", a.tenant_b, "echo", "--executor", "echo")
    key = manage("create_api_key", a.tenant_b, "--name", "bench")
    target = load.Target(f"http://127.0.0.1:{a.ours_port}{agent['path']}", key["api_key"], "X-API-Key")
    run.smoke(target, [], a.settle_timeout)
    return target


# --------------------------------------------------------------------------- #
# Report
# --------------------------------------------------------------------------- #
def _f(v: Any, nd: int = 1) -> str:
    return "–" if v is None else f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def _ratio(x: Any, y: Any) -> str:
    return "–" if not x or not y else f"**{x / y:.2f}**"


def markdown(doc: dict) -> str:
    slow, noisy = doc["slow"], doc["noisy"]
    timeout = doc["config"]["point_timeout_s"]
    out = [f"# Runs that wait, {doc['started']} ({doc['host']})", ""]
    if slow:
        out += [
            "| N × D | server | accepted | completed | accept s | makespan s | run p50 s | run p99 s "
            "| peak RSS MiB | peak PSS MiB | peak PG conns | GetTask/s | errors |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for r in slow:
            span = f"> {timeout:g}" if r["timed_out"] else _f(r["makespan_s"])
            # a timed-out point's percentiles would be those of the runs that made it: none shown
            p50, p99 = (None, None) if r["timed_out"] else (r["run_p50_s"], r["run_p99_s"])
            other = [f"{v} {k.removeprefix('TASK_STATE_').lower()}" for k, v in r["states"].items() if v and k != DONE]
            done = f"{r['completed']} ({', '.join(other)})" if other else str(r["completed"])
            out.append(
                f"| {r['n']} × {r['delay_ms'] / 1000:g} s | {r['side']} | {r['accepted']} | {done} | "
                f"{_f(r['accept_s'])} | {span} | {_f(p50)} | {_f(p99)} | "
                f"{_f(r['peak_rss_mib'], 0)} | {_f(r['peak_pss_mib'], 0)} | {_f(r['peak_pg_conns'])} | "
                f"{_f(r['gettask_per_s'])} | {r['errors']} |"
            )
        pairs: dict = {}
        for r in slow:
            pairs.setdefault((r["n"], r["delay_ms"]), {})[r["side"]] = r
        both = {k: v for k, v in pairs.items() if set(SIDES) <= set(v)}
        if both:
            out += [
                "",
                "| N × D | makespan ours/SDK | run p99 ours/SDK | peak RSS ours/SDK | peak PG conns ours/SDK |",
                "|---|--:|--:|--:|--:|",
            ]
            for (n, d), v in both.items():
                o, p = v["ours"], v["peer"]
                span = _ratio(o["makespan_s"], p["makespan_s"])
                if o["timed_out"] and p["makespan_s"]:
                    span = f"> {timeout / p['makespan_s']:.0f}"
                out.append(
                    f"| {n} × {d / 1000:g} s | {span} | "
                    f"{'–' if o['timed_out'] else _ratio(o['run_p99_s'], p['run_p99_s'])} | "
                    f"{_ratio(o['peak_rss_mib'], p['peak_rss_mib'])} | "
                    f"{_ratio(o['peak_pg_conns'], p['peak_pg_conns'])} |"
                )
    if noisy:
        out += [
            "",
            "| noisy neighbour | B quiet p50 / p99 ms | B loaded p50 / p99 / max ms | B loaded completed | "
            "A makespan s | loaded p50 / quiet p50 |",
            "|---|--:|--:|--:|--:|--:|",
        ]
        for r in noisy:
            q, ld, aa = r["b_quiet"], r["b_loaded"], r["a"]
            span = f"> {timeout:g}" if aa["timed_out"] else _f(aa["makespan_s"])
            out.append(
                f"| {r['side']}: A {r['a_runs']} × {r['a_delay_ms'] / 1000:g} s | {_f(q['p50_ms'])} / "
                f"{_f(q['p99_ms'])} | {_f(ld['p50_ms'])} / {_f(ld['p99_ms'])} / {_f(ld['max_ms'])} | "
                f"{ld['completed']} of {ld['probes']} | {span} | {_ratio(ld['p50_ms'], q['p50_ms'])} |"
            )
    errs = [r for r in slow if r["errors"]] + [r["a"] | {"side": r["side"]} for r in noisy if r["a"]["errors"]]
    if errs:
        out += ["", "Errors:"] + [f"- {r['side']}: {r['error_kinds']}; e.g. {r['error_samples'][:1]}" for r in errs]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- #
# Main
# --------------------------------------------------------------------------- #
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Runs that wait: N x D ms, ours vs the a2a-sdk peer, and a noisy neighbour",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("what to run")
    g.add_argument("-n", "--runs", default="40,400,2000", help="comma list of N (runs sent at once)")
    g.add_argument("--delay-ms", type=int, default=2000, help="D: how long each run waits (benchDelayMs)")
    g.add_argument("--only", choices=SIDES, help="one server only")
    g.add_argument("--quick", action="store_true", help="N = 20 x 1000 ms, noisy 20 x 2000 ms with 5 probes")
    g.add_argument("--no-noisy", action="store_true", help="leave the noisy-neighbour point out")
    g.add_argument("--noisy-only", action="store_true", help="only the noisy-neighbour point")
    g.add_argument("--point-timeout", type=float, default=300.0, help="a point gives up this long after its first send")
    g.add_argument("--send-concurrency", type=int, default=200, help="SendMessage calls in flight")
    g.add_argument("--poll-concurrency", type=int, default=8, help="GetTask calls in flight")
    g.add_argument("--poll-interval", type=float, default=0.2, help="a task is polled at most this often, s")
    g.add_argument("--poll-rate", type=float, default=100.0, help="GetTask calls a second, at most, in all")
    g.add_argument("--timeout", type=float, default=60.0, help="per-request timeout of sends and polls, s")
    g.add_argument("--sample-interval", type=float, default=0.5, help="memory / pg_stat_activity sampling, s")
    g.add_argument("--settle-timeout", type=float, default=300.0, help="the blocking echo after a timed-out point")
    g.add_argument("--pause", type=float, default=2.0, help="idle seconds between points")
    g.add_argument("--label", default="", help="free text stored with the results")
    g.add_argument("--report", metavar="JSON", help="run nothing: print the tables of an earlier run's results")
    g = p.add_argument_group("the noisy neighbour")
    g.add_argument("--noisy-runs", type=int, default=100, help="tenant A's runs in flight")
    g.add_argument("--noisy-delay-ms", type=int, default=3000, help="how long each of A's runs waits")
    g.add_argument("--noisy-probes", type=int, default=20, help="tenant B's blocking echoes (each phase)")
    g.add_argument("--probe-every", type=float, default=1.0, help="one probe started every this many s")
    g.add_argument("--probe-timeout", type=float, default=200.0, help="a probe gives up after this many s")
    g.add_argument("--tenant-b", default="bench-b", help="tenant B's slug (ours)")
    g = p.add_argument_group("servers (as bench/run.py; defaults of this bench's own)")
    g.add_argument("--ours-port", type=int, default=8150)
    g.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_SLOW_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agentserver_slow_bench"),
        help="dropped and made afresh at start (names containing 'bench' only)",
    )
    g.add_argument("--redis-url", default=os.environ.get("BENCH_SLOW_REDIS_URL", "redis://127.0.0.1:6379/9"))
    g.add_argument(
        "--web-cmd", default=".venv/bin/daphne -b 127.0.0.1 -p {port} agentserver.asgi:application", help="our web"
    )
    g.add_argument(
        "--worker-cmd",
        default=".venv/bin/celery -A agentserver worker -l warning",
        help="our worker: WORKER_CONCURRENCY (4) prefork children, as `make run`'s",
    )
    g.add_argument("--ours-env", action="append", default=[], metavar="KEY=VALUE", help="extra settings (repeatable)")
    g.add_argument("--peer-script", default=os.environ.get("BENCH_PEER_SCRIPT", "../shared/bench/peer_a2a_sdk.py"))
    g.add_argument("--peer-python", default=os.environ.get("BENCH_PEER_PYTHON", "bench/.peer-venv/bin/python"))
    g.add_argument("--setup-peer-venv", action="store_true", help="create the peer venv if missing")
    g.add_argument("--peer-port", type=int, default=9150)
    g.add_argument("--peer-workers", type=int, default=2, help="uvicorn processes of the peer")
    g.add_argument(
        "--peer-dsn",
        default=os.environ.get(
            "BENCH_SLOW_PEER_DSN", "postgresql+asyncpg://postgres@127.0.0.1:5432/agentserver_slow_bench_peer"
        ),
    )
    g.add_argument("--peer-args", default="", help="extra arguments for the peer script")
    g.add_argument("--ready-timeout", type=float, default=60.0)
    g.add_argument("--smoke-timeout", type=float, default=60.0)
    a = p.parse_args(argv)
    if a.quick:
        a.runs, a.delay_ms = "20", 1000
        a.noisy_runs, a.noisy_delay_ms, a.noisy_probes, a.probe_every = 20, 2000, 5, 0.5
    # what bench/run.py's starters read
    a.ours_external, a.keep_db, a.api_key, a.ours_agent_path = False, False, None, "/agents/demo/echo/"
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.report:
        print(markdown(json.loads(Path(a.report).read_text())), end="")
        return 0
    ns = [] if a.noisy_only else [int(x) for x in a.runs.split(",") if x.strip()]
    sides = [a.only] if a.only else list(SIDES)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    logdir = RESULTS / "logs" / f"slow-{stamp}"
    logdir.mkdir(parents=True, exist_ok=True)

    def _term(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGHUP, _term)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    doc: dict[str, Any] = {
        "started": _dt.datetime.now().isoformat(timespec="seconds"),
        "host": f"{platform.node()}, {os.cpu_count()} cpu, Python {platform.python_version()}",
        "label": a.label,
        "git_rev": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "loadavg_before": load_before,
        "config": {
            "runs": ns,
            "delay_ms": a.delay_ms,
            "point_timeout_s": a.point_timeout,
            "send_concurrency": a.send_concurrency,
            "poll": {"concurrency": a.poll_concurrency, "interval_s": a.poll_interval, "rate": a.poll_rate},
            "noisy": None
            if a.no_noisy
            else {
                "a_runs": a.noisy_runs,
                "a_delay_ms": a.noisy_delay_ms,
                "b_probes": a.noisy_probes,
                "probe_every_s": a.probe_every,
                "probe_timeout_s": a.probe_timeout,
            },
            "worker_cmd": a.worker_cmd,
            "web_cmd": a.web_cmd,
            "peer_workers": a.peer_workers,
        },
        "sides": {},
        "slow": [],
        "noisy": [],
    }
    dbs = {"ours": run._pg_parts(a.database_url)["db"], "peer": run._pg_parts(a.peer_dsn)["db"]}
    running: dict[str, run.Side] = {}
    rc = 0
    try:
        b_targets: dict[str, load.Target] = {}
        for s in sides:
            side = run.start_ours(a, logdir) if s == "ours" else run.start_peer(a, logdir)
            running[s] = side
            assert side.target is not None
            side.info["smoke"] = run.smoke(side.target, side.procs, a.smoke_timeout)
            doc["sides"][s] = side.info
            b_targets[s] = seed_tenant_b(a, logdir) if s == "ours" else side.target
            run.log(f"{s} ready at {side.target.url}")
        # smallest N first; the sides take turns, the one that goes first flipping point to point
        for i, n in enumerate(ns):
            for s in sides if i % 2 == 0 else list(reversed(sides)):
                run.log(f"{s}: {n} x {a.delay_ms} ms")
                r = measure_slow(running[s], n, a.delay_ms, a, dbs[s])
                doc["slow"].append(r)
                run.log(f"{s}: {json.dumps({k: v for k, v in r.items() if k != 'error_samples'})}")
                time.sleep(a.pause)
        if not a.no_noisy:
            for s in sides:
                run.log(f"{s}: noisy neighbour, A {a.noisy_runs} x {a.noisy_delay_ms} ms")
                doc["noisy"].append(measure_noisy(running[s], b_targets[s], a, dbs[s]))
                time.sleep(a.pause)
    except KeyboardInterrupt:
        run.log("interrupted; stopping")
        rc = 130
    except Exception as exc:  # noqa: BLE001 - report, then stop everything
        run.log(f"ERROR: {exc!r}")
        rc = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for side in running.values():
            side.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    with open("/proc/loadavg") as f:
        doc["loadavg_after"] = f.read().split()[:3]
    doc["finished"] = _dt.datetime.now().isoformat(timespec="seconds")
    doc["complete"] = rc == 0
    if doc["slow"] or doc["noisy"]:
        md = markdown(doc)
        (RESULTS / f"slow-{stamp}.json").write_text(json.dumps(doc, indent=2) + "\n")
        (RESULTS / f"slow-{stamp}.md").write_text(md)
        print(md)
        run.log(f"results: bench/results/slow-{stamp}.json (+ .md); logs: {run.rel(logdir)}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
