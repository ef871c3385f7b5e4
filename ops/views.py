"""/readyz and /metrics. /healthz (liveness: the process answers) is protocols.views.healthz."""

from __future__ import annotations

import logging

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST

from . import health, metrics

log = logging.getLogger(__name__)


async def readyz(request: HttpRequest) -> HttpResponse:
    """200 when Postgres, Redis and the worker queue answer in time, else 503; each check's
    name and whether it passed in the body. Why one failed is logged, never answered: the
    probe is anyone's to read, and a backend's error names hosts, ports and users."""
    checks = await sync_to_async(health.readiness, thread_sensitive=False)()
    ready = all(c.ok for c in checks)
    for check in checks:
        if not check.ok:
            log.warning("readiness: %s failed after %.3f s: %s", check.name, check.seconds, check.detail)
    body = {"ready": ready, "checks": {c.name: {"ok": c.ok} for c in checks}}
    response = HttpResponse(orjson.dumps(body), status=200 if ready else 503, content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response


async def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format, when METRICS_ENABLED, for a bearer of METRICS_TOKEN (the
    metrics name tenants and agents); without a token only where DEBUG or METRICS_PUBLIC."""
    if not settings.METRICS_ENABLED:
        return HttpResponse(b"metrics are off (METRICS_ENABLED)\n", status=404, content_type="text/plain")
    refused = metrics.refusal(request.headers.get("Authorization", ""))
    if refused is not None:
        status, text = refused
        response = HttpResponse(text, status=status, content_type="text/plain")
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body = await sync_to_async(metrics.exposition, thread_sensitive=False)()
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
