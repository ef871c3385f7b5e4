"""A deployment that turned metrics on without a token is told so when it starts (the system
checks of `manage.py migrate`, which every shipped deployment runs first), not only by the 403
its scrapes get."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security, deploy=False)
def metrics_without_token(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    if settings.METRICS_ENABLED and not settings.METRICS_TOKEN and not (settings.DEBUG or settings.METRICS_PUBLIC):
        return [
            checks.Warning(
                "METRICS_ENABLED is on without METRICS_TOKEN: /metrics refuses every request (403)",
                hint="set METRICS_TOKEN and scrape with Authorization: Bearer <token>, or METRICS_PUBLIC=1 where "
                "the network alone keeps the port private (docs/operations.md)",
                id="ops.W001",
            )
        ]
    return []
