"""What the task store and the agents' runs count, for Prometheus (docs/operations.md). The
objects live where they are counted; `ops` only exposes them. In multiprocess mode
(PROMETHEUS_MULTIPROC_DIR set before the process starts) every process, the worker's children
too, writes its own file, and a scrape sums them."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RUNS = Counter("agentserver_runs", "Agent runs that ended, by how (runner.run's outcome).", ["outcome"])
RUN_SECONDS = Histogram(
    "agentserver_run_seconds",
    "How long an agent's run took, from its claim to its end, by agent (tenant/agent).",
    ["agent"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
OPEN_STREAMS = Gauge(
    "agentserver_open_streams", "Followers of task event logs (SSE streams) open now.", multiprocess_mode="livesum"
)
SWEEPS = Counter(
    "agentserver_sweeper_actions",
    "What the sweepers did: runs sent again, lost runs failed, waits timed out, push configs resumed.",
    ["action"],
)
SWEEPS_SKIPPED = Counter(
    "agentserver_sweeps_skipped",
    "Periodic jobs not run because another process held their lease (tasks_app.leases), by beat entry.",
    ["sweep"],
)
