"""The Prometheus exposition: what the apps count (protocols.metrics, tasks_app.metrics,
push.metrics), summed over every process in multiprocess mode, and what the store says at
scrape time (tasks by state, the run queue), read at most every METRICS_STORE_EVERY seconds."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import REGISTRY, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tasks_app import selectors


class StoreCollector(Collector):
    """Gauges read from the store when scraped (each scrape of each process would otherwise
    count a million tasks: the reading is kept METRICS_STORE_EVERY seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._metrics: list[Metric] = []

    def describe(self) -> Iterator[Metric]:
        # Registering asks a collector for its names: none here, or it would read the store
        # while the apps load.
        return iter(())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if time.monotonic() - self._read_at >= settings.METRICS_STORE_EVERY:
                self._metrics = self._read()
                self._read_at = time.monotonic()
            yield from self._metrics

    def _read(self) -> list[Metric]:
        try:
            by_state = selectors.task_counts_by_state()
            queue = selectors.run_queue()
        except DatabaseError:
            return []  # the store is away: /readyz says so; the counters still go out
        tasks = GaugeMetricFamily("agentserver_tasks", "Tasks in the store, by state.", labels=["state"])
        for state, count in sorted(by_state.items()):
            tasks.add_metric([state], count)
        depth = GaugeMetricFamily("agentserver_run_queue_depth", "Runs asked for that no worker has taken yet.")
        depth.add_metric([], queue.depth)
        age = GaugeMetricFamily(
            "agentserver_run_queue_oldest_seconds", "How long the oldest run no worker has taken has waited."
        )
        oldest = queue.oldest_requested_at
        age.add_metric([], (timezone.now() - oldest).total_seconds() if oldest else 0.0)
        return [tasks, depth, age]


_store = StoreCollector()


def install() -> None:
    """Register the store's gauges with the process's registry (once)."""
    if _store not in REGISTRY._collector_to_names:  # noqa: SLF001 - prometheus_client has no public test
        REGISTRY.register(_store)


def exposition() -> bytes:
    """The metrics text, of every process when PROMETHEUS_MULTIPROC_DIR is set (each writes
    its own files there), else of this one."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(_store)
        return generate_latest(registry)
    return generate_latest(REGISTRY)
