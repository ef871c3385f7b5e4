"""What the in-process benchmarks share (admin_bench.py, registry_bench.py): one page timed
with Django's test Client (server time only), its percentiles, its queries, and the results
file."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def measure(client: Any, url: str, runs: int, before: Callable[[], None] | None = None) -> tuple[dict[str, Any], Any]:
    """Two warm-ups, then `runs` timed GETs of `url` (`before` runs ahead of each, untimed),
    then one with its queries captured: the figures, and that last response."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(2):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
    times = []
    for _ in range(runs):
        if before:
            before()
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    if before:
        before()
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    times.sort()
    figures = {
        "url": url,
        "runs": runs,
        "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[min(len(times) - 1, int(round(0.95 * len(times))) - 1)], 1),
        "min_ms": round(times[0], 1),
        "queries": len(queries),
        "query_ms": round(sum(float(q["time"]) for q in queries.captured_queries) * 1000, 1),
    }
    return figures, response


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """`results/<name>-<stamp>.json` (git-ignored), with the stamp in `payload["at"]`."""
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"{name}-{stamp}.json"
    out.write_text(json.dumps({"at": stamp, **payload}, indent=2))
    return out
