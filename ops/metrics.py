"""The Prometheus exposition: what the apps count (protocols.metrics, tasks_app.metrics,
push.metrics), summed over every process in multiprocess mode, and what the store says at
scrape time (tasks by state, the run queue), read at most every METRICS_STORE_EVERY seconds.
Served by the web processes' /metrics (views.py), on WORKER_METRICS_PORT by a Celery worker's
main process for its prefork children (serve_worker), and on GRPC_METRICS_PORT by serve_grpc."""

from __future__ import annotations

import hmac
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app, multiprocess
from prometheus_client.core import REGISTRY, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tasks_app import selectors

log = logging.getLogger(__name__)


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


class _ThisProcess(Collector):
    """This process's own counts (prometheus_client's default registry), in a registry of ours."""

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def registry(*, store: bool) -> CollectorRegistry:
    """What a scrape reads: the counts of every process when PROMETHEUS_MULTIPROC_DIR is set
    (each writes its own files there), else of this one; and the store's gauges if `store`."""
    built = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(built)
    else:
        built.register(_ThisProcess())
    if store:
        built.register(_store)
    return built


def exposition() -> bytes:
    """The metrics text of the web processes' /metrics."""
    return generate_latest(registry(store=True))


def refusal(header: str) -> tuple[int, bytes] | None:
    """Why a request with this Authorization header does not get the metrics (status, text),
    or None when it does: only a bearer of METRICS_TOKEN (the metrics name every tenant's
    agents). Without a token, no one, unless DEBUG or METRICS_PUBLIC says the network alone
    keeps them private: a deployment that forgot the token fails closed."""
    token = settings.METRICS_TOKEN
    if not token:
        if settings.DEBUG or settings.METRICS_PUBLIC:
            return None
        return 403, NO_TOKEN
    if hmac.compare_digest(header.removeprefix("Bearer ").strip().encode(), token.encode()):
        return None
    return 401, REFUSAL


REFUSAL = b"send Authorization: Bearer <METRICS_TOKEN>\n"
NO_TOKEN = b"metrics are served only with METRICS_TOKEN set (or METRICS_PUBLIC=1; docs/operations.md)\n"

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _guarded(app: Wsgi) -> Wsgi:
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        refused = refusal(environ.get("HTTP_AUTHORIZATION", ""))
        if refused is not None:
            status, text = refused
            headers = [("Content-Type", "text/plain")]
            if status == 401:
                headers.append(("WWW-Authenticate", 'Bearer realm="metrics"'))
            start_response("401 Unauthorized" if status == 401 else "403 Forbidden", headers)
            return [text]
        return app(environ, start_response)

    return guarded


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in flight never holds up the worker's exit


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a line per scrape would drown the worker's log


def serve(*, port: int, addr: str, registry: CollectorRegistry) -> WSGIServer:
    """The exposition of `registry` at http://addr:port/, from a daemon thread, for a bearer
    of METRICS_TOKEN (`refusal`). prometheus_client's own start_http_server would do,
    but its application cannot be wrapped before it starts answering."""
    server_class = _Server6 if ":" in addr else _Server
    server = make_server(addr, port, _guarded(make_wsgi_app(registry)), server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True).start()
    return server


def serve_worker() -> WSGIServer | None:
    """In a Celery worker's main process, with WORKER_METRICS_PORT set: the counts of its
    prefork children, summed from PROMETHEUS_MULTIPROC_DIR, for Prometheus to scrape from the
    pod itself. Not the store's gauges: every web process serves those already, and a worker
    pod's copy would count each task twice in a sum over pods."""
    port = settings.WORKER_METRICS_PORT
    if not port:
        return None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        log.error(
            "WORKER_METRICS_PORT is set but PROMETHEUS_MULTIPROC_DIR is not: the worker's children count in "
            "their own memory, out of the main process's reach; no metrics served"
        )
        return None
    return _serve_own(port=port, addr=settings.WORKER_METRICS_ADDR, who="worker")


def serve_grpc() -> WSGIServer | None:
    """In serve_grpc's process, with GRPC_METRICS_PORT set: its counts (in multiprocess mode,
    all of its pod's directory holds), for Prometheus to scrape from a gRPC pod. Not the
    store's gauges, for the reason serve_worker gives."""
    port = settings.GRPC_METRICS_PORT
    if not port:
        return None
    return _serve_own(port=port, addr=settings.GRPC_METRICS_ADDR, who="gRPC")


def _serve_own(*, port: int, addr: str, who: str) -> WSGIServer | None:
    try:
        server = serve(port=port, addr=addr, registry=registry(store=False))
    except OSError as exc:
        log.error("%s metrics not served on %s:%d: %s", who, addr, port, exc)
        return None
    log.info("%s metrics on http://%s:%d/metrics", who, addr, port)
    if not settings.METRICS_TOKEN and not (settings.DEBUG or settings.METRICS_PUBLIC):
        log.warning("%s metrics are refused to every scrape: set METRICS_TOKEN (docs/operations.md)", who)
    return server
