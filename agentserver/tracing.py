"""OpenTelemetry traces (docs/operations.md), off unless TRACING_EXPORTER is set:

- "otlp": to an OpenTelemetry collector, as the SDK's OTEL_EXPORTER_OTLP_* variables say;
- "console": each span on stdout;
- "file:<path>": each span as a line of JSON appended to <path> (what the tests read, from
  every process).

A trace runs from the HTTP request (the ASGI instrumentation's server span, around every
request daphne serves; the Django instrumentation's below it for the admin and the directory)
through the agent request (`protocols.endpoint`'s span), the Celery publish and the worker's run
of the agent (the Celery instrumentation carries the context in the message's headers) to each
push delivery the run's events cause and its POST (the httpx instrumentation, which also sends
`traceparent` to the receiver), with Postgres and Redis calls as child spans. Over gRPC the
trace starts at the gRPC instrumentation's server span around each call (`serve_grpc` asks for
it through GRPC_SERVER_SETUP: `grpc_interceptors` below). Each process configures itself once:
daphne before its ASGI application loads (Django's instrumentation adds a middleware, so it must
come first), serve_grpc before its servers start, each worker child when it is forked.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

_lock = threading.Lock()
_provider: TracerProvider | None = None


class FileSpanExporter(SpanExporter):
    """Spans as JSON lines appended to a file (one short write per span: lines from several
    processes do not interleave)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            context, parent = span.get_span_context(), span.parent
            lines.append(
                json.dumps(
                    {
                        "name": span.name,
                        "trace_id": f"{context.trace_id:032x}" if context else "",
                        "span_id": f"{context.span_id:016x}" if context else "",
                        "parent_id": f"{parent.span_id:016x}" if parent else "",
                        "service": span.resource.attributes.get("service.name", ""),
                        "kind": span.kind.name,
                        "attributes": {k: str(v) for k, v in (span.attributes or {}).items()},
                    }
                )
            )
        with open(self.path, "a", encoding="utf-8") as out:
            for line in lines:
                out.write(line + "\n")
        return SpanExportResult.SUCCESS


def _exporter(kind: str) -> tuple[SpanExporter, bool]:
    """The exporter TRACING_EXPORTER names, and whether it should be fed span by span."""
    if kind == "otlp":
        return OTLPSpanExporter(), False
    if kind == "console":
        return ConsoleSpanExporter(), True
    if kind.startswith("file:"):
        return FileSpanExporter(kind.removeprefix("file:")), True
    raise ValueError(f"TRACING_EXPORTER must be otlp, console or file:<path>, not {kind!r}")


def configure(*, service: str, exporter: SpanExporter | None = None) -> bool:
    """Trace this process if TRACING_EXPORTER says so (or to `exporter`, in tests); whether it
    now is. Idempotent."""
    global _provider
    kind = settings.TRACING_EXPORTER
    if exporter is None and not kind:
        return False
    with _lock:
        if _provider is not None:
            return True
        given, simple = (exporter, True) if exporter is not None else _exporter(kind)
        provider = TracerProvider(resource=Resource.create({"service.name": service, "process.pid": os.getpid()}))
        provider.add_span_processor(SimpleSpanProcessor(given) if simple else BatchSpanProcessor(given))
        trace.set_tracer_provider(provider)
        CeleryInstrumentor().instrument(tracer_provider=provider)
        PsycopgInstrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
        RedisInstrumentor().instrument(tracer_provider=provider)
        HTTPXClientInstrumentor().instrument(tracer_provider=provider)
        DjangoInstrumentor().instrument(tracer_provider=provider)
        _provider = provider
    return True


def grpc_interceptors() -> list[Any]:
    """serve_grpc's process (agentserver.grpc_process): traced as TRACING_EXPORTER says, and
    the interceptors its servers add: a server span around each call (continuing a caller's
    `traceparent`), health checks left out, as an orchestrator asks them every few seconds."""
    if not configure(service="agentserver-grpc"):
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters

    return [aio_server_interceptor(tracer_provider=_provider, filter_=filters.negate(filters.health_check()))]


def uninstrument() -> None:
    """Undo `configure`'s instrumentations (the tests trace one process, then stop)."""
    global _provider
    for instrumentor in (
        CeleryInstrumentor(),
        PsycopgInstrumentor(),
        RedisInstrumentor(),
        HTTPXClientInstrumentor(),
        DjangoInstrumentor(),
    ):
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    _provider = None


def asgi(app: Any) -> Any:
    """`app` with a server span around each HTTP request, when this process is traced. The
    spans of each message received and sent are left out: a stream would make one per event."""
    if _provider is None:
        return app
    return OpenTelemetryMiddleware(app, tracer_provider=_provider, exclude_spans=["receive", "send"])


def shutdown() -> None:
    """Flush what is buffered (a worker child before it exits)."""
    if _provider is not None:
        _provider.shutdown()
