"""Writes through the tenant API are rationed per caller (a key, or an issuer's subject) to
TENANT_API_WRITE_RATE, e.g. "120/min", as the registry's API rations its writes. Reads are not
throttled here."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class WriteThrottle(SimpleRateThrottle):
    scope = "tenant-api-write"

    def get_rate(self) -> str | None:
        return settings.TENANT_API_WRITE_RATE or None

    def allow_request(self, request: Any, view: Any) -> bool:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return super().allow_request(request, view)

    def get_cache_key(self, request: Any, view: Any) -> str:
        identity = getattr(request.user, "identity", None) or f"address-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": identity}
