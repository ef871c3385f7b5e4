"""A server that answers any Host (a wildcard in ALLOWED_HOSTS) and has no PUBLIC_BASE_URL
would name a client's Host on its cards: it refuses to start, with the settings named
(docs/configuration.md). Cards at a host the server does not know are never signed either way
(protocols.hosts.known_host); this makes such a deployment say so before it serves anything."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security)
def wildcard_hosts_without_public_url(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    wildcards = [entry for entry in settings.ALLOWED_HOSTS if entry == "*" or entry.startswith(".")]
    if settings.DEBUG or settings.PUBLIC_BASE_URL or not wildcards:
        return []
    return [
        checks.Error(
            f"DJANGO_ALLOWED_HOSTS has {', '.join(wildcards)} and PUBLIC_BASE_URL is not set: agent cards would "
            "name whatever Host a client sends",
            hint="set PUBLIC_BASE_URL to the server's public address (https://agents.example.com), or list "
            "DJANGO_ALLOWED_HOSTS by name (docs/configuration.md)",
            id="protocols.E001",
        )
    ]
