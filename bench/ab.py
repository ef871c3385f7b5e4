#!/usr/bin/env python3
"""A/B: the same SendMessage points against two commits of this repository, rounds interleaved.

    python3 bench/ab.py --old 7b48b09                 # that commit against the working tree
    python3 bench/ab.py --old main --new HEAD -c 8,32 --duration 8 --rounds 2

Each side is our whole stack (daphne + Celery worker, as `run.py` starts it) from its own
checkout: `--new .` (the default) is this working tree as it is, uncommitted changes included;
any other ref is checked out as a detached worktree under `bench/.ab/<sha>` (git-ignored, kept
for the next run) with this checkout's `.venv` linked in, so both run on the same packages.
Both stacks are up for the whole run, each on its own port, database and Redis db, and the
points take turns A B A B: every (round, mode, concurrency) runs against both, the side that
goes first flips from point to point, so a busy moment of the machine falls on both alike. The
ceiling (`bench/bare.py`) runs beside them unless `--no-bare`.

The table gives per point the median over rounds of each side's req/s, p99 and server CPU per
request (daphne + worker), new/old, and new/bare; results go to `bench/results/ab-<stamp>.*`.
See bench/README.md, "A/B between two commits".
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import load  # noqa: E402
import run  # noqa: E402

WORKTREES = BENCH_DIR / ".ab"


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=str(cwd), check=True, capture_output=True, text=True).stdout.strip()


def checkout(ref: str) -> tuple[Path, str]:
    """The directory to run ``ref`` from, and what it is (a short sha, or the working tree)."""
    if ref == ".":
        dirty = " + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
        return REPO, f"working tree ({git('rev-parse', '--short', 'HEAD')}{dirty})"
    sha = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    path = WORKTREES / sha[:12]
    if not (path / "manage.py").exists():
        WORKTREES.mkdir(exist_ok=True)
        run.log(f"checking out {ref} ({sha[:12]}) in {run.rel(path)}")
        git("worktree", "add", "--detach", "--force", str(path), sha)
    venv = path / ".venv"
    if not venv.exists():
        venv.symlink_to(REPO / ".venv")
    return path, sha[:12]


def side_args(a: argparse.Namespace, *, port: int, database: str, redis_db: int) -> argparse.Namespace:
    b = argparse.Namespace(**vars(a))
    b.ours_port = port
    b.database_url = f"{a.pg_base.rstrip('/')}/{database}"
    b.redis_url = f"{a.redis_base.rstrip('/')}/{redis_db}"
    return b


def table(results: list[dict], labels: dict[str, str]) -> str:
    groups: dict = {}
    for r in results:
        groups.setdefault((r["mode"], r["concurrency"]), {}).setdefault(r["side"], []).append(r)
    has_bare = any("bare" in d for d in groups.values())
    head = (
        "| mode | conc | old req/s | new req/s | **new/old** | old p99 ms | new p99 ms | **p99 new/old** "
        "| server CPU ms/req old → new | **CPU new/old** |"
    )
    if has_bare:
        head += " bare req/s | **new/bare** |"
    head += " errors old / new |"
    out = [
        f"old = {labels['old']}, new = {labels['new']}; medians of {max(r['round'] for r in results)} round(s).",
        "",
        head,
        "|---|--:|--:|--:|--:|--:|--:|--:|---|--:|" + ("--:|--:|" if has_bare else "") + "--:|",
    ]
    for (mode, c), d in groups.items():

        def m(side: str, k: str, _d: dict = d):
            return run._median([r.get(k) for r in _d.get(side, [])])

        def errs(side: str, _d: dict = d) -> int:
            return sum(r["errors"] for r in _d.get(side, []))

        row = (
            f"| {mode} | {c} | {run._fmt(m('old', 'rps'))} | {run._fmt(m('new', 'rps'))} | "
            f"**{run._ratio(m('new', 'rps'), m('old', 'rps'))}** | {run._fmt(m('old', 'p99_ms'))} | "
            f"{run._fmt(m('new', 'p99_ms'))} | **{run._ratio(m('new', 'p99_ms'), m('old', 'p99_ms'))}** | "
            f"{run._fmt(m('old', 'server_cpu_ms_per_req'), 2)} → {run._fmt(m('new', 'server_cpu_ms_per_req'), 2)} | "
            f"**{run._ratio(m('new', 'server_cpu_ms_per_req'), m('old', 'server_cpu_ms_per_req'))}** |"
        )
        if has_bare:
            row += f" {run._fmt(m('bare', 'rps'))} | **{run._ratio(m('new', 'rps'), m('bare', 'rps'))}** |"
        row += f" {errs('old')} / {errs('new')} |"
        out.append(row)
    out += ["", "Per round:", ""]
    out.append(
        "| side | round | mode | conc | req/s | p50 ms | p99 ms | server CPU ms/req | total CPU ms/req | errors |"
    )
    out.append("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        out.append(
            f"| {r['side']} | {r['round']} | {r['mode']} | {r['concurrency']} | {run._fmt(r['rps'])} | "
            f"{run._fmt(r['p50_ms'])} | {run._fmt(r['p99_ms'])} | {run._fmt(r.get('server_cpu_ms_per_req'), 2)} | "
            f"{run._fmt(r.get('total_cpu_ms_per_req'), 2)} | {r['errors']} |"
        )
    return "\n".join(out)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="A/B: SendMessage against two commits of this repository, interleaved",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--old", required=True, help="git ref of side A (e.g. 7b48b09, main, HEAD~3)")
    p.add_argument("--new", default=".", help="git ref of side B; '.' is this working tree as it is")
    p.add_argument("--modes", default="immediate,blocking")
    p.add_argument("-c", "--concurrency", default="8,32", help="comma list")
    p.add_argument("--duration", type=float, default=8.0, help="measured seconds per point")
    p.add_argument("--warmup", type=float, default=2.0, help="discarded seconds per point")
    p.add_argument("--rounds", type=int, default=2, help="sweeps; the table shows medians")
    p.add_argument("--requests", type=int, default=None)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--drain-timeout", type=float, default=60.0)
    p.add_argument("--pause", type=float, default=1.0)
    p.add_argument("--no-bare", action="store_true", help="do not run the ceiling beside them")
    p.add_argument("--ports", default="8010,8011,8012", help="old, new, bare")
    p.add_argument("--pg-base", default=os.environ.get("BENCH_PG_BASE", "postgres://postgres@127.0.0.1:5432"))
    p.add_argument("--redis-base", default=os.environ.get("BENCH_REDIS_BASE", "redis://127.0.0.1:6379"))
    p.add_argument("--redis-dbs", default="3,4", help="old, new (each FLUSHDB'd at start)")
    p.add_argument("--web-cmd", default=".venv/bin/daphne -b 127.0.0.1 -p {port} agentserver.asgi:application")
    p.add_argument("--worker-cmd", default=".venv/bin/celery -A agentserver worker -l warning")
    p.add_argument("--ours-env", action="append", default=[], metavar="KEY=VALUE", help="for both sides")
    p.add_argument("--ready-timeout", type=float, default=60.0)
    p.add_argument("--smoke-timeout", type=float, default=60.0)
    p.add_argument("--results-dir", default=str(BENCH_DIR / "results"))
    a = p.parse_args(argv)
    # what run.start_ours reads
    a.keep_db = False
    a.ours_external = False
    a.api_key = None
    a.ours_agent_path = "/agents/demo/echo/"
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    conc = [int(x) for x in a.concurrency.split(",") if x.strip()]
    port_old, port_new, port_bare = (int(x) for x in a.ports.split(","))
    db_old, db_new = (int(x) for x in a.redis_dbs.split(","))
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    results_dir = Path(a.results_dir)
    logdir = results_dir / "logs" / f"ab-{stamp}"
    logdir.mkdir(parents=True, exist_ok=True)

    def _term(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    (dir_old, label_old), (dir_new, label_new) = checkout(a.old), checkout(a.new)
    labels = {"old": f"{a.old} ({label_old})", "new": f"{a.new} ({label_new})" if a.new != "." else label_new}
    args = {
        "old": side_args(a, port=port_old, database="agentserver_bench_ab_old", redis_db=db_old),
        "new": side_args(a, port=port_new, database="agentserver_bench_ab_new", redis_db=db_new),
    }
    running: dict[str, run.Side] = {}
    results: list[dict] = []
    rc = 0
    try:
        running["old"] = run.start_ours(args["old"], logdir, repo=dir_old, name="old")
        running["new"] = run.start_ours(args["new"], logdir, repo=dir_new, name="new")
        if not a.no_bare:
            a.bare_port = port_bare
            running["bare"] = run.start_bare(a, logdir)
        for name, side in running.items():
            side.info["smoke"] = run.smoke(side.target, side.procs, a.smoke_timeout)
            run.log(f"{name} ready at {side.target.url}")
        sessions = {p.name: p.pid for side in running.values() for p in side.procs}
        db_urls = {"old": args["old"].database_url, "new": args["new"].database_url}
        order = list(running)
        point = 0
        for rnd in range(1, a.rounds + 1):
            for mode in modes:
                for c in conc:
                    for name in order if point % 2 == 0 else list(reversed(order)):
                        r = run.measure(running[name], mode, c, a, sessions, db_urls.get(name))
                        r.update({"round": rnd, "point": point})
                        results.append(r)
                        run.log(f"{name:<4} " + load.format_line(r))
                        time.sleep(a.pause)
                    point += 1
    except KeyboardInterrupt:
        run.log("interrupted; stopping")
        rc = 130
    except Exception as exc:  # noqa: BLE001 - report, then stop everything
        run.log(f"ERROR: {exc}")
        rc = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for side in running.values():
            side.stop()
    if not results:
        return rc or 1
    md = table(results, labels)
    base = results_dir / f"ab-{stamp}"
    doc = {"labels": labels, "args": {k: v for k, v in vars(a).items()}, "results": results, "complete": rc == 0}
    base.with_suffix(".json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    base.with_suffix(".md").write_text(f"# A/B {stamp}\n\n{md}\n")
    print(md)
    run.log(f"results: {run.rel(base.with_suffix('.md'))} (+ .json); logs: {run.rel(logdir)}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
