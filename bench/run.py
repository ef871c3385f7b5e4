#!/usr/bin/env python3
"""Side-by-side A2A ``SendMessage`` benchmark: OUR server vs. the a2a-sdk peer.

Starts both servers on this machine (loopback only), waits until they answer,
checks that one blocking echo completes on each, then runs every
(mode, concurrency) point against both servers alternately (the server that
goes first flips from one point to the next), stops everything it started
(always: normal end, error, Ctrl-C or SIGTERM), prints a markdown table with
both servers' figures and the ratios ours/peer, and writes JSON + markdown to
bench/results/.

Standard library only; run it with any Python >= 3.9 from anywhere:

    python3 bench/run.py                       # full run, both servers
    python3 bench/run.py --only peer           # just the peer
    python3 bench/run.py --only ours --duration 5 --warmup 1 -c 8,32

See bench/README.md for what is measured and what the numbers mean.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import load  # noqa: E402  (bench/load.py)

SIDES = ("ours", "peer")  # what --only picks from; "bare" (the ceiling) runs beside them
CLK_TCK = os.sysconf("SC_CLK_TCK")


def rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- #
# CPU accounting from /proc (Linux); figures are CPU seconds
# --------------------------------------------------------------------------- #
def _proc_stats():
    """Yield (pid, comm, session, cpu_seconds) for every readable process."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read().decode("latin-1")
        except OSError:
            continue
        lpar, rpar = data.find("("), data.rfind(")")
        comm = data[lpar + 1 : rpar]
        rest = data[rpar + 2 :].split()
        try:
            session = int(rest[3])
            # utime + stime + cutime + cstime: a child that has exited and been
            # reaped (SQLAlchemy overflow connections' backends, recycled pool
            # processes) is still counted, in its parent's cutime/cstime
            cpu = (int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])) / CLK_TCK
        except (IndexError, ValueError):
            continue
        yield int(name), comm, session, cpu


def cpu_snapshot(sessions: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each started server (its whole session) and by
    the shared Postgres / Redis servers, plus machine-wide busy/steal/idle."""
    out = {k: 0.0 for k in sessions}
    out["postgres"] = 0.0
    out["redis"] = 0.0
    by_sid = {sid: k for k, sid in sessions.items()}
    for _pid, comm, sid, cpu in _proc_stats():
        if sid in by_sid:
            out[by_sid[sid]] += cpu
        elif comm == "postgres" or comm.startswith("postgres:"):
            out["postgres"] += cpu
        elif comm.startswith("redis-server"):
            out["redis"] += cpu
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
        out["_busy"] = (user + nice + system + irq + softirq) / CLK_TCK
        out["_idle"] = (idle + iowait) / CLK_TCK
        out["_steal"] = steal / CLK_TCK
    except (OSError, ValueError):
        pass
    return out


def cpu_delta(a: dict, b: dict) -> dict:
    return {k: round(b.get(k, 0.0) - a.get(k, 0.0), 3) for k in b}


# --------------------------------------------------------------------------- #
# Processes
# --------------------------------------------------------------------------- #
class Proc:
    """A child started in its own session, so it and all its children (uvicorn
    workers, celery pool processes) can be stopped together by process group."""

    def __init__(self, name: str, argv: list[str], logfile: Path, env: dict | None = None, cwd: Path = REPO) -> None:
        self.name = name
        self.argv = argv
        self.logfile = logfile
        self._log = open(logfile, "ab")
        log(f"starting {name}: {shlex.join(argv)}  (log {rel(logfile)})")
        self.p = subprocess.Popen(
            argv,
            cwd=str(cwd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.p.pid  # == its process group id and session id

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(grace)
            except subprocess.TimeoutExpired:
                log(f"{self.name} did not stop in {grace}s, killing")
        # leftovers in the group (pool children) and a stubborn leader
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
        log(f"stopped {self.name} (pid {self.pid}, exit {self.p.returncode})")

    def tail(self, n: int = 30) -> str:
        try:
            lines = self.logfile.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


def run_checked(
    argv: list[str], logfile: Path, env: dict | None = None, timeout: float = 300.0, cwd: Path = REPO
) -> str:
    """Run a setup command to completion; return its stdout; raise with the log tail on failure."""
    log(f"running: {shlex.join(argv)}")
    r = subprocess.run(
        argv, cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )
    with open(logfile, "a") as f:
        f.write(f"$ {shlex.join(argv)}\n{r.stdout}{r.stderr}\n")
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed (exit {r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    return r.stdout


# --------------------------------------------------------------------------- #
# Postgres / Redis helpers (benchmark databases only)
# --------------------------------------------------------------------------- #
def _pg_parts(url: str) -> dict:
    u = urlsplit(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    return {
        "host": u.hostname or "127.0.0.1",
        "port": str(u.port or 5432),
        "user": unquote(u.username or "postgres"),
        "db": unquote(u.path.lstrip("/")),
    }


def _psql(parts: dict, sql: str) -> str:
    psql = shutil.which("psql")
    if not psql:
        raise RuntimeError("psql is needed to create the benchmark databases (apt-get install postgresql-client)")
    env = dict(os.environ)
    if parts.get("password"):
        env["PGPASSWORD"] = parts["password"]
    r = subprocess.run(
        [
            psql,
            "-h",
            parts["host"],
            "-p",
            parts["port"],
            "-U",
            parts["user"],
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-tAc",
            sql,
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=60,
    )
    if r.returncode != 0:
        raise RuntimeError(f"psql failed: {r.stderr.strip()}")
    return r.stdout.strip()


PG_STAT_COLS = (
    "sessions",
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
)


def pg_stats(urls: dict[str, str]) -> dict[str, dict[str, int]]:
    """pg_stat_database counters of each side's database ({} when unavailable).
    Counters are published by backends with a small delay (stats_fetch / at
    session end), so treat per-request figures as approximate."""
    out: dict[str, dict[str, int]] = {}
    for side, url in urls.items():
        parts = _pg_parts(url)
        try:
            row = _psql(
                parts,
                "SELECT pg_stat_clear_snapshot(); SELECT "
                + ", ".join(PG_STAT_COLS)
                + f" FROM pg_stat_database WHERE datname = '{parts['db']}'",
            )
        except Exception:  # noqa: BLE001 - diagnostics only
            continue
        vals = row.strip().splitlines()[-1].split("|") if row.strip() else []
        if len(vals) == len(PG_STAT_COLS):
            out[side] = {k: int(v or 0) for k, v in zip(PG_STAT_COLS, vals, strict=True)}
    return out


def ensure_database(url: str, fresh: bool) -> None:
    parts = _pg_parts(url)
    db = parts["db"]
    if not db or not db.replace("_", "").isalnum():
        raise RuntimeError(f"unexpected database name {db!r} in {url}")
    if fresh:
        if "bench" not in db:
            raise RuntimeError(
                f"refusing to drop {db!r}: only databases whose name contains 'bench' are recreated (use --keep-db)"
            )
        log(f"recreating database {db}")
        _psql(parts, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        _psql(parts, f'CREATE DATABASE "{db}"')
    elif _psql(parts, f"SELECT 1 FROM pg_database WHERE datname = '{db}'") != "1":
        log(f"creating database {db}")
        _psql(parts, f'CREATE DATABASE "{db}"')


def flush_redis(url: str) -> None:
    u = urlsplit(url)
    db = (u.path or "/0").lstrip("/") or "0"
    if db == "0":
        log(f"not flushing {url}: refusing to flush Redis db 0")
        return
    cli = shutil.which("redis-cli")
    if not cli:
        log("redis-cli not found; not flushing the benchmark Redis db")
        return
    subprocess.run([cli, "-u", url, "flushdb"], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    log(f"flushed {url}")


def port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def require_free_port(port: int, what: str, flag: str) -> None:
    if not port_free(port):
        raise RuntimeError(
            f"127.0.0.1:{port} is already in use (another {what}?); stop it or pick another port with {flag}"
        )


# --------------------------------------------------------------------------- #
# Readiness
# --------------------------------------------------------------------------- #
def wait_ready(target: load.Target, card_paths: list[str], procs: list[Proc], limit: float) -> str:
    """Poll GET <card path> until 200; bounded by ``limit`` seconds."""
    deadline = time.monotonic() + limit
    last = "no answer"
    while time.monotonic() < deadline:
        for p in procs:
            if not p.alive():
                raise RuntimeError(
                    f"{p.name} exited (code {p.p.returncode}) before it was ready; last log lines:\n{p.tail()}"
                )
        for path in card_paths:
            try:
                status, _ = asyncio.run(load.http_get(target, path, timeout=3.0))
            except Exception as exc:  # noqa: BLE001 - not listening yet
                last = repr(exc)
                continue
            if status == 200:
                return path
            last = f"HTTP {status} for {path}"
        time.sleep(0.3)
    raise RuntimeError(f"{target.url} not ready after {limit}s ({last})")


def smoke(target: load.Target, procs: list[Proc], limit: float) -> dict:
    """One blocking SendMessage must come back TASK_STATE_COMPLETED (retried while the
    agent worker is still starting; bounded by ``limit`` seconds)."""
    deadline = time.monotonic() + limit
    last = None
    while time.monotonic() < deadline:
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited (code {p.p.returncode}); last log lines:\n{p.tail()}")
        conn = load.Conn(target)
        try:
            t0 = time.perf_counter()
            status, body = asyncio.run(
                asyncio.wait_for(
                    conn.request(target.post(load.send_message_body(0, "blocking"))),
                    max(1.0, deadline - time.monotonic()),
                )
            )
            dt = time.perf_counter() - t0
            kind, task_id = load.check_send_response(status, body, "blocking")
            if kind is None:
                return {"ok": True, "ms": round(dt * 1000, 1), "task_id": task_id}
            last = f"{kind}: {body[:500].decode('utf-8', 'replace')}"
        except Exception as exc:  # noqa: BLE001
            last = repr(exc)
        finally:
            conn.close()
        time.sleep(1.0)
    raise RuntimeError(f"smoke SendMessage to {target.url} did not complete in {limit}s: {last}")


# --------------------------------------------------------------------------- #
# Servers
# --------------------------------------------------------------------------- #
class Side:
    def __init__(self, name: str) -> None:
        self.name = name
        self.procs: list[Proc] = []
        self.target: load.Target | None = None
        self.info: dict = {}

    def stop(self) -> None:
        # the web front first, then the worker, in reverse start order
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception as exc:  # noqa: BLE001 - keep stopping the rest
                log(f"error stopping {p.name}: {exc!r}")
        self.procs = []


def ensure_peer_venv(python: Path, a) -> None:
    if python.exists():
        return
    if not a.setup_peer_venv:
        raise RuntimeError(f"{python} not found; create it (see bench/README.md) or pass --setup-peer-venv")
    venv = python.parent.parent
    log(f"creating the peer venv {venv} (a2a-sdk from PyPI)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-r", str(BENCH_DIR / "peer-requirements.txt")], check=True
    )


def start_peer(a, logdir: Path) -> Side:
    side = Side("peer")
    script = Path(a.peer_script)
    if not script.is_absolute():
        script = (REPO / script).resolve()
    if not script.exists():
        raise RuntimeError(f"peer script not found: {script} (--peer-script / BENCH_PEER_SCRIPT)")
    python = Path(a.peer_python)
    if not python.is_absolute():
        python = REPO / python
    require_free_port(a.peer_port, "peer", "--peer-port")
    ensure_peer_venv(python, a)
    ensure_database(a.peer_dsn, fresh=False)  # the peer truncates its own table
    argv = [
        str(python),
        str(script),
        "--store",
        "db",
        "--dsn",
        a.peer_dsn,
        "--truncate",
        "--host",
        "127.0.0.1",
        "--port",
        str(a.peer_port),
        "--workers",
        str(a.peer_workers),
    ]
    argv += shlex.split(a.peer_args)
    side.procs.append(Proc("peer", argv, logdir / "peer.log"))
    url = f"http://127.0.0.1:{a.peer_port}/"
    side.target = load.Target(url)
    side.info = {"url": url, "argv": argv, "script": str(script)}
    wait_ready(side.target, ["/.well-known/agent-card.json"], side.procs, a.ready_timeout)
    try:
        ver = subprocess.run(
            [str(python), "-c", "from importlib.metadata import version as v;print(v('a2a-sdk'))"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        side.info["a2a_sdk"] = ver.stdout.strip()
    except Exception:  # noqa: BLE001
        pass
    return side


def ours_env(a) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": a.database_url,
            "REDIS_URL": a.redis_url,
            "DJANGO_SETTINGS_MODULE": "agentserver.settings",
            "DJANGO_DEBUG": "0",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            # One key sends thousands of requests a second, and returnImmediately piles up
            # queued tasks: the limits stay on (their checks cost what they cost) but so high
            # that they never refuse, since the peer has none.
            "RATE_LIMIT_PER_MINUTE": "1000000000",
            "TENANT_MAX_ACTIVE_TASKS": "1000000000",
            "TENANT_MAX_ACTIVE_ANONYMOUS_TASKS": "1000000000",
            # bench/stream.py holds thousands of streams open with one key.
            "STREAM_MAX_PER_CALLER": "1000000000",
        }
    )
    env.pop("AGENTSERVER_EMBEDDED", None)
    for kv in a.ours_env:
        k, sep, v = kv.partition("=")
        if not sep:
            raise SystemExit(f"--ours-env needs KEY=VALUE, got {kv!r}")
        env[k] = v
    return env


def start_ours(a, logdir: Path, *, repo: Path = REPO, name: str = "ours") -> Side:
    """Our daphne and Celery worker from the checkout ``repo`` (bench/ab.py passes a worktree of
    another commit, with the same venv), on ``a``'s port, database and Redis db."""
    side = Side(name)
    py = repo / ".venv" / "bin" / "python"
    if not (repo / "manage.py").exists():
        raise RuntimeError(f"manage.py not found in {repo}: our server is not there yet")
    env = ours_env(a)
    if a.ours_external:
        if not a.api_key:
            raise RuntimeError("--ours-external needs --api-key (or BENCH_API_KEY)")
        seed = {"api_key": a.api_key, "api_key_header": "X-API-Key", "agents": {"echo": a.ours_agent_path}}
    else:
        require_free_port(a.ours_port, "server, e.g. a dev `make run`", "--ours-port")
        ensure_database(a.database_url, fresh=not a.keep_db)
        flush_redis(a.redis_url)
        setup_log = logdir / f"{name}-setup.log"
        run_checked([str(py), "manage.py", "migrate", "--noinput"], setup_log, env, cwd=repo)
        out = run_checked([str(py), "manage.py", "seed_demo", "--json"], setup_log, env, cwd=repo)
        seed = None
        for line in reversed(out.strip().splitlines()):
            line = line.strip()
            if line.startswith("{"):
                seed = json.loads(line)
                break
        if seed is None:
            raise RuntimeError(f"seed_demo --json printed no JSON object:\n{out[-2000:]}")
        worker = shlex.split(a.worker_cmd)
        web = shlex.split(a.web_cmd.format(port=a.ours_port))
        side.procs.append(Proc(f"{name}-worker", worker, logdir / f"{name}-worker.log", env, cwd=repo))
        side.procs.append(Proc(f"{name}-web", web, logdir / f"{name}-web.log", env, cwd=repo))
    path = seed.get("agents", {}).get("echo") or a.ours_agent_path
    url = f"http://127.0.0.1:{a.ours_port}{path}"
    side.target = load.Target(url, seed.get("api_key"), seed.get("api_key_header") or "X-API-Key")
    side.info = {
        "url": url,
        "worker_cmd": a.worker_cmd,
        "web_cmd": a.web_cmd,
        "env": {k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "DJANGO_DEBUG", "LOG_LEVEL")},
        "extra_env": a.ours_env,
    }
    card = path.rstrip("/") + "/.well-known/agent-card.json"
    side.info["card"] = wait_ready(side.target, [card, "/.well-known/agent-card.json"], side.procs, a.ready_timeout)
    return side


def start_bare(a, logdir: Path) -> Side:
    """The ceiling: bench/bare.py (a Django async view, no middleware, no database) on one
    daphne process, from our venv."""
    side = Side("bare")
    require_free_port(a.bare_port, "bare view", "--bare-port")
    daphne = REPO / ".venv" / "bin" / "daphne"
    argv = [str(daphne), "-v", "0", "-b", "127.0.0.1", "-p", str(a.bare_port), "bare:application"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    side.procs.append(Proc("bare", argv, logdir / "bare.log", env, cwd=BENCH_DIR))
    url = f"http://127.0.0.1:{a.bare_port}/"
    side.target = load.Target(url)
    side.info = {"url": url, "argv": argv}
    wait_ready(side.target, ["/.well-known/agent-card.json"], side.procs, a.ready_timeout)
    return side


def measure(side: Side, mode: str, c: int, a, all_sessions: dict[str, int], db_url: str | None) -> dict:
    """One point against one running server: the load, the drain of an immediate point, and the
    CPU of the server's processes, Postgres and Redis over it, per request."""
    s = side.name
    for p in side.procs:
        if not p.alive():
            raise RuntimeError(f"{p.name} died (exit {p.p.returncode}):\n{p.tail()}")
    pg_before = pg_stats({s: db_url}) if db_url else {}
    before = cpu_snapshot(all_sessions)
    r = asyncio.run(load.run_load(side.target, mode, c, a.duration, a.warmup, a.requests, a.timeout))
    if mode == "immediate" and r.get("last_task_id"):
        # the accepted tasks still run after the window: wait until the last one
        # is done (bounded), so their cost is counted and does not leak into the
        # next point
        waited, st = asyncio.run(load.wait_task_terminal(side.target, r["last_task_id"], a.drain_timeout))
        r["drain_s"] = round(waited, 2)
        r["drain_last_state"] = st
        if st not in load.TERMINAL_STATES:
            log(
                f"{s}: the last accepted task is still {st} after {waited:.0f}s "
                "(--drain-timeout); the next point starts with a backlog"
            )
    drain_unfinished = mode == "immediate" and r.get("drain_last_state") not in load.TERMINAL_STATES
    after = cpu_snapshot(all_sessions)
    d = cpu_delta(before, after)
    pg_after = pg_stats({s: db_url}) if db_url else {}
    if s in pg_before and s in pg_after:
        # the psql probe itself is one session and one or two transactions
        r["pg_per_request"] = {
            k: round((pg_after[s][k] - pg_before[s][k]) / max(1, r["all_successes"]), 2) for k in PG_STAT_COLS
        }
    names = [p.name for p in side.procs]
    server_cpu = sum(d.get(n, 0.0) for n in names)
    total = d.get("_busy", 0) + d.get("_idle", 0) + d.get("_steal", 0)
    # CPU from the start of warm-up to the end (incl. drain), divided by every
    # success in that time (warm-up and window)
    n_est = max(1, r["all_successes"])
    r.update(
        {
            "side": s,
            "server_cpu_s": round(server_cpu, 3),
            "server_cpu_by_process_s": {n: d.get(n) for n in names},
            "server_cpu_ms_per_req": round(1000 * server_cpu / n_est, 3),
            "postgres_cpu_s": d.get("postgres"),
            "postgres_cpu_ms_per_req": round(1000 * d.get("postgres", 0) / n_est, 3),
            "redis_cpu_s": d.get("redis"),
            "total_cpu_ms_per_req": round(1000 * (server_cpu + d.get("postgres", 0) + d.get("redis", 0)) / n_est, 3),
            # tasks finished per second, start of warm-up to end of drain: for the
            # immediate mode the rate the server can sustain, not just accept
            "done_per_s": None
            if drain_unfinished
            else round(r["all_successes"] / max(1e-9, r["wall_s"] + r.get("drain_s", 0.0)), 2),
            "machine_busy_pct": round(100 * d.get("_busy", 0) / total, 1) if total else None,
            "steal_pct": round(100 * d.get("_steal", 0) / total, 1) if total else None,
        }
    )
    r.pop("url", None)
    return r


# --------------------------------------------------------------------------- #
# Report
# --------------------------------------------------------------------------- #
def _fmt(v, nd=1) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def _ratio(a, b) -> str:
    if a is None or b is None or not b:
        return "–"
    return f"{a / b:.2f}"


def _median(vals):
    vals = sorted(v for v in vals if v is not None)
    if not vals:
        return None
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2


SUMMARY_KEYS = ("rps", "done_per_s", "p50_ms", "p90_ms", "p99_ms", "max_ms", "total_cpu_ms_per_req")


def summarize(results: list[dict]) -> list[dict]:
    """One row per (mode, concurrency, side): the median over rounds of each figure,
    errors and requests summed."""
    groups: dict = {}
    for r in results:
        groups.setdefault((r["mode"], r["concurrency"], r["side"]), []).append(r)
    rows = []
    for (mode, c, side), rs in groups.items():
        row = {
            "mode": mode,
            "concurrency": c,
            "side": side,
            "rounds": len(rs),
            "requests": sum(r["requests"] for r in rs),
            "errors": sum(r["errors"] for r in rs),
        }
        for k in SUMMARY_KEYS:
            row[k] = _median([r.get(k) for r in rs])
        rows.append(row)
    return rows


def _summary_table(pts: dict, sides: list[str]) -> list[str]:
    """Per point: each server's req/s and p99, then ours/peer and ours/bare where both ran."""
    ratios = [(o, b) for o, b in (("ours", "peer"), ("ours", "bare")) if o in sides and b in sides]
    head = ["mode", "conc"]
    for s in sides:
        head += [f"{s} req/s", f"{s} p99 ms", f"{s} CPU ms/req"]
    for o, b in ratios:
        head += [f"**req/s {o}/{b}**", f"**p99 {o}/{b}**", f"**CPU/req {o}/{b}**"]
        if b == "peer":
            head.append(f"**done/s {o}/{b}**")
    head += [f"errors {s}" for s in sides]
    out = ["| " + " | ".join(head) + " |", "|---|" + "--:|" * (len(head) - 1)]
    for (mode, c), d in pts.items():

        def g(side, k, _d=d):
            row = _d.get(side)
            return None if row is None else row.get(k)

        cells = [mode, str(c)]
        for s in sides:
            cells += [_fmt(g(s, "rps")), _fmt(g(s, "p99_ms")), _fmt(g(s, "total_cpu_ms_per_req"), 2)]
        for o, b in ratios:
            cells += [
                f"**{_ratio(g(o, 'rps'), g(b, 'rps'))}**",
                f"**{_ratio(g(o, 'p99_ms'), g(b, 'p99_ms'))}**",
                f"**{_ratio(g(o, 'total_cpu_ms_per_req'), g(b, 'total_cpu_ms_per_req'))}**",
            ]
            if b == "peer":
                cells.append(f"**{_ratio(g(o, 'done_per_s'), g(b, 'done_per_s'))}**")
        cells += [_fmt(g(s, "errors"), 0) for s in sides]
        out.append("| " + " | ".join(cells) + " |")
    return out


def markdown(results: list[dict], sides: list[str]) -> str:
    summary = summarize(results)
    rounds = max((row["rounds"] for row in summary), default=1)
    pts: dict = {}
    for row in summary:
        pts.setdefault((row["mode"], row["concurrency"]), {})[row["side"]] = row
    out = []
    if rounds > 1:
        out.append(f"Figures below the first table are per round; the first table shows the median of {rounds} rounds.")
        out.append("")
    out.extend(_summary_table(pts, sides))
    out.append("")
    out.append(
        "| server | round | mode | conc | requests | errors | req/s | p50 ms | p90 ms "
        "| p99 ms | max ms | server CPU ms/req | postgres CPU ms/req | total CPU ms/req "
        "| PG sessions/req | PG xacts/req | drain s | done/s | client CPU % | steal % |"
    )
    out.append("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        out.append(
            f"| {r['side']} | {r.get('round', 1)} | {r['mode']} | {r['concurrency']} | "
            f"{r['requests']} | {r['errors']} | {_fmt(r['rps'])} | "
            f"{_fmt(r['p50_ms'])} | {_fmt(r['p90_ms'])} | {_fmt(r['p99_ms'])} | "
            f"{_fmt(r['max_ms'])} | {_fmt(r.get('server_cpu_ms_per_req'), 2)} | "
            f"{_fmt(r.get('postgres_cpu_ms_per_req'), 2)} | "
            f"{_fmt(r.get('total_cpu_ms_per_req'), 2)} | "
            f"{_fmt((r.get('pg_per_request') or {}).get('sessions'), 2)} | "
            f"{_fmt((r.get('pg_per_request') or {}).get('xact_commit'), 1)} | "
            f"{_fmt(r.get('drain_s'), 1)} | {_fmt(r.get('done_per_s'))} | "
            f"{_fmt(r.get('client_cpu_pct'), 0)} | {_fmt(r.get('steal_pct'), 0)} |"
        )
    errs = [r for r in results if r["errors"]]
    if errs:
        out.append("")
        out.append("Errors (counted, never in req/s or latencies):")
        for r in errs:
            out.append(
                f"- {r['side']} {r['mode']} c={r['concurrency']}: {r['error_kinds']}; e.g. {r['error_samples'][:1]}"
            )
    return "\n".join(out)


# --------------------------------------------------------------------------- #
# Main
# --------------------------------------------------------------------------- #
def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Side-by-side A2A SendMessage benchmark (ours vs. a2a-sdk peer)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("what to run")
    g.add_argument("--only", choices=SIDES, help="benchmark one server only (and the bare view, unless --no-bare)")
    g.add_argument("--no-bare", action="store_true", help="do not run the ceiling (bench/bare.py) beside the servers")
    g.add_argument("--bare-port", type=int, default=8012, help="where the bare view listens")
    g.add_argument(
        "--modes", default="immediate,blocking", help="comma list of immediate (returnImmediately:true) and blocking"
    )
    g.add_argument("-c", "--concurrency", default="1,8,32,64", help="comma list")
    g.add_argument("--duration", type=float, default=10.0, help="measured seconds per point")
    g.add_argument("--warmup", type=float, default=2.0, help="discarded seconds per point")
    g.add_argument("--requests", type=int, default=None, help="also end a point after this many measured successes")
    g.add_argument("--timeout", type=float, default=30.0, help="per-request timeout, s")
    g.add_argument(
        "--rounds", type=int, default=1, help="repeat the whole sweep; the summary shows the median per point"
    )
    g.add_argument("--pause", type=float, default=1.0, help="idle seconds between points")
    g.add_argument(
        "--drain-timeout",
        type=float,
        default=60.0,
        help="after an immediate point, wait at most this long for the last "
        "accepted task to finish (GetTask) before the next point",
    )
    g.add_argument("--uvloop", action="store_true", help="client on uvloop if importable")
    g.add_argument("--label", default="", help="free text stored with the results")
    g.add_argument("--results-dir", default=str(BENCH_DIR / "results"))

    g = p.add_argument_group("peer (a2a-sdk)")
    g.add_argument(
        "--peer-script",
        default=os.environ.get("BENCH_PEER_SCRIPT", "../shared/bench/peer_a2a_sdk.py"),
        help="path to peer_a2a_sdk.py, relative to the repo root (env BENCH_PEER_SCRIPT)",
    )
    g.add_argument(
        "--peer-python",
        default=os.environ.get("BENCH_PEER_PYTHON", "bench/.peer-venv/bin/python"),
        help="python of the peer venv (env BENCH_PEER_PYTHON)",
    )
    g.add_argument(
        "--setup-peer-venv",
        action="store_true",
        help="create the peer venv from bench/peer-requirements.txt if missing",
    )
    g.add_argument("--peer-port", type=int, default=9100)
    g.add_argument(
        "--peer-workers", type=int, default=2, help="uvicorn worker processes of the peer (2 = the machine's cores)"
    )
    g.add_argument(
        "--peer-dsn",
        default=os.environ.get("BENCH_PEER_DSN", "postgresql+asyncpg://postgres@127.0.0.1:5432/bench_peer"),
    )
    g.add_argument("--peer-args", default="", help="extra arguments for the peer script")

    g = p.add_argument_group("ours (Django + Celery)")
    g.add_argument("--ours-port", type=int, default=8000)
    g.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agentserver_bench"),
    )
    g.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/3"))
    g.add_argument(
        "--web-cmd",
        default=os.environ.get("BENCH_WEB_CMD", ".venv/bin/daphne -b 127.0.0.1 -p {port} agentserver.asgi:application"),
        help="web server command line ({port} is replaced; env BENCH_WEB_CMD)",
    )
    g.add_argument(
        "--worker-cmd",
        default=os.environ.get("BENCH_WORKER_CMD", ".venv/bin/celery -A agentserver worker -l warning"),
        help="Celery worker command line (env BENCH_WORKER_CMD)",
    )
    g.add_argument(
        "--ours-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for migrate/seed/web/worker (repeatable)",
    )
    g.add_argument("--keep-db", action="store_true", help="do not drop/recreate the benchmark database before the run")
    g.add_argument(
        "--ours-external", action="store_true", help="do not start our server; benchmark the one on --ours-port"
    )
    g.add_argument("--api-key", default=os.environ.get("BENCH_API_KEY"), help="API key for --ours-external")
    g.add_argument("--ours-agent-path", default="/agents/demo/echo/")
    g.add_argument("--ready-timeout", type=float, default=60.0)
    g.add_argument("--smoke-timeout", type=float, default=60.0)
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in modes:
        if m not in load.MODES:
            raise SystemExit(f"unknown mode {m!r}; use {load.MODES}")
    conc = [int(x) for x in a.concurrency.split(",") if x.strip()]
    sides = [a.only] if a.only else list(SIDES)
    if not a.no_bare:
        sides.append("bare")
    if a.uvloop and not load.install_uvloop():
        log("uvloop not importable; client stays on asyncio")
        a.uvloop = False

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    results_dir = Path(a.results_dir)
    logdir = results_dir / "logs" / stamp
    logdir.mkdir(parents=True, exist_ok=True)

    # SIGTERM/SIGHUP/SIGINT -> KeyboardInterrupt so the finally below stops what we started
    stop_signal = {}

    def _term(signum, _frame):
        # KeyboardInterrupt, not SystemExit: asyncio.run() unwinds it cleanly
        stop_signal["n"] = signum
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGHUP, _term)
    # Ctrl-C -> KeyboardInterrupt even when started with SIGINT ignored (`cmd &` in a script)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    running: dict[str, Side] = {}
    results: list[dict] = []
    meta = {
        "started": _dt.datetime.now().isoformat(timespec="seconds"),
        "label": a.label,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "client": {"loop": "uvloop" if a.uvloop else "asyncio", "file": "bench/load.py"},
        "config": {
            "modes": modes,
            "concurrency": conc,
            "duration_s": a.duration,
            "warmup_s": a.warmup,
            "max_requests": a.requests,
            "timeout_s": a.timeout,
            "rounds": a.rounds,
            "peer_workers": a.peer_workers,
        },
        "sides": {},
    }
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        meta["git_rev"] = rev.stdout.strip() or None
    except Exception:  # noqa: BLE001
        meta["git_rev"] = None

    rc = 0
    try:
        for s in sides:
            starter = {"peer": start_peer, "ours": start_ours, "bare": start_bare}[s]
            side = starter(a, logdir)
            running[s] = side
        for s in sides:
            side = running[s]
            side.info["smoke"] = smoke(side.target, side.procs, a.smoke_timeout)
            log(f"{s} ready at {side.target.url} (smoke blocking echo {side.info['smoke']['ms']} ms)")
            meta["sides"][s] = side.info

        # CPU is accounted per started process tree (each runs in its own session)
        all_sessions = {p.name: p.pid for s in sides for p in running[s].procs}

        db_urls = {"peer": a.peer_dsn, "ours": a.database_url}
        point = 0
        plan = [(rnd, mode, c) for rnd in range(1, a.rounds + 1) for mode in modes for c in conc]
        for rnd, mode, c in plan:
            order = sides if point % 2 == 0 else list(reversed(sides))
            point += 1
            for s in order:
                r = measure(running[s], mode, c, a, all_sessions, db_urls.get(s))
                r.update({"point": point, "round": rnd})
                results.append(r)
                log(f"{s:<4} " + load.format_line(r) + (f" drain={r['drain_s']}s" if "drain_s" in r else ""))
                time.sleep(a.pause)
    except KeyboardInterrupt:
        signum = stop_signal.get("n", signal.SIGINT)
        log(f"interrupted by {signal.Signals(signum).name}; stopping")
        rc = 128 + signum
    except Exception as exc:  # noqa: BLE001 - report, then stop everything
        log(f"ERROR: {exc}")
        rc = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip cleanup
        for s in list(running):
            running[s].stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    meta["finished"] = _dt.datetime.now().isoformat(timespec="seconds")
    if results:
        table = markdown(results, sides)
        results_dir.mkdir(parents=True, exist_ok=True)
        base = results_dir / f"{stamp}{'-' + a.only if a.only else ''}"
        doc = {"meta": meta, "summary": summarize(results), "results": results, "complete": rc == 0}
        base.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
        base.with_suffix(".md").write_text(f"# SendMessage benchmark {meta['started']}\n\n{table}\n")
        print(table)
        log(f"results: {rel(base.with_suffix('.json'))} (+ .md); server logs: {rel(logdir)}")
    else:
        log(f"no results; server logs in {rel(logdir)}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
