"""What serve_grpc's process sets up before its servers start (GRPC_SERVER_SETUP): the
protocol layer serves gRPC but cannot import this package, so it asks for this by name."""

from __future__ import annotations

from typing import Any

from ops import metrics

from . import tracing


def setup() -> list[Any]:
    """Its counts on GRPC_METRICS_PORT when set, its traces when TRACING_EXPORTER is set; the
    interceptors its servers add."""
    metrics.serve_grpc()
    return tracing.grpc_interceptors()
