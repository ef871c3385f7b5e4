#!/usr/bin/env python3
"""The long chaos run (issue 25): each fault under load, and what it cost.

For each fault a fresh private stack (tests/chaos.py: its own Postgres, Redis, daphne and
Celery worker with beat; the machine's shared services are never touched), `--tasks`
returnImmediately tasks (echo, writer, two-turn writer in turn; every 4th with a push
config to a receiver on 127.0.0.1) sent over `--spread` seconds, streams open across the
fault, and the settings the issue measured: sweeps every 5 s, a run's hard limit 30 s.
Prints one markdown table per fault and saves them to bench/results/chaos-<stamp>.md
(git-ignored). tests/test_chaos.py is the short version. From the repo root:

    .venv/bin/python bench/chaos.py                        # every fault, 160 tasks each
    .venv/bin/python bench/chaos.py --faults redis-restart --tasks 40
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.chaos import FAULTS, Knobs, Plan, Report, Stack, counts, run, seconds, table  # noqa: E402

KNOBS = Knobs(
    sweep_every=5,
    unclaimed_after=10,
    soft_limit=15,
    hard_limit=30,
    lost_grace=5,
    push_sweep_every=5,
    push_timeout=5,
    push_backoff_base=0.5,
    sse_heartbeat=5,
    concurrency=4,
)
# (SendMessage answers again, a new task is done) within these many seconds of the return,
# as tests/test_chaos.py asks. A new task queues behind the backlog the fault left; after
# Redis it waits for the worker to reconnect (kombu backs off 2, 4, 6 ... s).
BOUNDS = {
    "worker-kill": (2, 10),
    "redis-restart": (5, 15),
    "postgres-restart": (5, 10),
    "daphne-kill": (2, 5),
    "postgres-cut": (2, 10),
    "postgres-slow": (2, 10),
    "redis-full": (2, 10),
    "redis-gone": (2, 25),
    "push-slow": (2, 10),
}


def figures(report: Report) -> str:
    """One fault's table: each figure on a line of its own."""
    recovery, served = BOUNDS[report.fault]
    lines = [
        ("accepted", str(report.accepted)),
        ("orphans (stored, the client never learnt the id) by state", counts(report.orphans)),
        ("settled by state", counts(report.settled)),
        ("stuck / lost", f"{len(report.stuck)} / {len(report.lost)}"),
        ("event logs with a gap / a duplicate seq", f"{len(report.log_gaps)} / {len(report.log_dups)}"),
        ("runs given again after their worker was lost", str(report.reruns)),
        (
            "streams complete / resumed with Last-Event-ID",
            f"{report.streams - len(report.streams_incomplete)} of {report.streams} / {report.stream_resumes}",
        ),
        ("stream breaks", counts(report.stream_breaks)),
        (
            "push configs served every event",
            f"{report.pushed_tasks - len(report.push_missing)} of {report.pushed_tasks}",
        ),
        ("outage (fault to dependency back) s", f"{report.window.back_at - report.window.fault_at:.1f}"),
        ("requests during the outage", counts(report.outage)),
        ("slowest answer during the outage s", f"{report.slowest_s:.1f}"),
        ("other requests not ok", counts(report.elsewhere)),
        ("anomalies (500, timeout, 503 without Retry-After, dropped, stalled stream)", str(len(report.anomalies))),
        ("runs given again: the longest from a kill to the run's next event s", seconds(report.resumed_s)),
        (f"recovery s: SendMessage answers again (bound {recovery})", seconds(report.recovery_s)),
        (f"a task sent after the return is done s (bound {served})", seconds(report.served_s)),
        ("every task settled s", seconds(report.settled_s)),
        ("every push delivered s", seconds(report.pushed_s)),
    ]
    text = [f"### {report.fault}: {FAULTS[report.fault][0]}", "", "| figure | value |", "|---|--:|"]
    text += [f"| {name} | {value} |" for name, value in lines]
    broken = report.violations(recovery_within=recovery, served_within=served)
    text += ["", "Invariants: " + ("all hold." if not broken else "BROKEN:")]
    text += [f"- {b}" for b in broken]
    if report.anomalies:
        text += ["", "Anomalies (first 10): " + "; ".join(report.anomalies[:10])]
    return "\n".join(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=160, help="tasks per fault")
    parser.add_argument("--streams", type=int, default=12, help="streams open across each fault")
    parser.add_argument("--spread", type=float, default=30.0, help="seconds over which the tasks are sent")
    parser.add_argument("--faults", nargs="+", choices=list(FAULTS), default=list(FAULTS))
    parser.add_argument("--kills", type=int, default=5, help="worker-kill: rounds of SIGKILL, 3 s apart")
    parser.add_argument("--redis-down", type=float, default=10.0, help="seconds Redis stays down")
    parser.add_argument("--postgres-down", type=float, default=2.0, help="seconds Postgres stays down")
    parser.add_argument("--postgres-slow", type=float, default=20.0, help="seconds every write waits 200 ms")
    parser.add_argument("--redis-full", type=float, default=10.0, help="seconds Redis refuses writes")
    parser.add_argument("--broker-gone", type=float, default=60.0, help="seconds the broker (Redis) is away")
    parser.add_argument("--push-slow", type=float, default=20.0, help="seconds the receiver answers 1 byte/s")
    args = parser.parse_args()

    plan = Plan(
        tasks=args.tasks,
        streams=args.streams,
        push_every=4,
        spread=args.spread,
        fault_after=args.spread / 3,
        kills=args.kills,
        kill_every=3.0,
        redis_down=args.redis_down,
        postgres_down=args.postgres_down,
        postgres_slow=args.postgres_slow,
        redis_full=args.redis_full,
        broker_gone=args.broker_gone,
        push_slow=args.push_slow,
        push_drip=1.0,
        web_down=1.0,
        client_timeout=5.0,
        settle_within=120.0,
        push_within=30.0,
    )
    started = dt.datetime.now(dt.UTC)
    header = [
        f"# Chaos run {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"Machine: {os.cpu_count()} vCPUs, {platform.platform()}; "
        "Postgres 15 and Redis 7 of our own on the same machine.",
        f"Server settings: {KNOBS}.",
        f"Load per fault: {plan}.",
        "",
        "Seconds are counted from the moment the dependency was back (Redis answers PING, Postgres accepts "
        "connections, daphne answers /healthz; for worker-kill the last kill). A client timeout is "
        f"{plan.client_timeout:.0f} s.",
        "",
    ]
    print("\n".join(header), flush=True)
    sections, reports = [], []
    for fault in args.faults:
        began = time.monotonic()
        with Stack(KNOBS) as stack:
            report = run(stack, fault, plan)
        reports.append(report)
        sections.append(figures(report) + f"\n\n(took {time.monotonic() - began:.0f} s with start-up)")
        print(sections[-1] + "\n", flush=True)
    text = (
        "\n".join(header) + "\n## Summary\n\n" + table(reports) + "\n\n## Per fault\n\n" + "\n\n".join(sections) + "\n"
    )
    out = ROOT / "bench" / "results" / f"chaos-{started:%Y%m%d-%H%M%S}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print("## Summary\n\n" + table(reports) + f"\n\nsaved to {out.relative_to(ROOT)}")
    return (
        0
        if all(not r.violations(recovery_within=BOUNDS[r.fault][0], served_within=BOUNDS[r.fault][1]) for r in reports)
        else 1
    )


if __name__ == "__main__":
    sys.exit(main())
