"""/readyz and /metrics. /healthz (liveness: the process answers) is protocols.views.healthz."""

from __future__ import annotations

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST

from . import health, metrics


async def readyz(request: HttpRequest) -> HttpResponse:
    """200 when Postgres, Redis and the worker queue answer in time, else 503; each check's
    outcome in the body either way (what a load balancer and an operator both read)."""
    checks = await sync_to_async(health.readiness, thread_sensitive=False)()
    ready = all(c.ok for c in checks)
    body = {
        "ready": ready,
        "checks": {c.name: {"ok": c.ok, "detail": c.detail, "seconds": c.seconds} for c in checks},
    }
    response = HttpResponse(orjson.dumps(body), status=200 if ready else 503, content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response


async def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format, when METRICS_ENABLED; with METRICS_TOKEN, only for a bearer
    of it (the metrics name tenants and agents)."""
    if not settings.METRICS_ENABLED:
        return HttpResponse(b"metrics are off (METRICS_ENABLED)\n", status=404, content_type="text/plain")
    if not metrics.authorized(request.headers.get("Authorization", "")):
        response = HttpResponse(metrics.REFUSAL, status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body = await sync_to_async(metrics.exposition, thread_sensitive=False)()
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
