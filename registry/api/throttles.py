"""Writes to the directory make the server fetch cards and proofs from addresses others name,
and the token endpoint checks passwords: both are rationed per caller (a user, else an
address) to REGISTRY_WRITE_RATE, e.g. "60/min". Reads are not throttled here."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class WriteThrottle(SimpleRateThrottle):
    scope = "registry-write"

    def get_rate(self) -> str | None:
        return settings.REGISTRY_WRITE_RATE or None

    def allow_request(self, request: Any, view: Any) -> bool:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return super().allow_request(request, view)

    def get_cache_key(self, request: Any, view: Any) -> str:
        user = request.user
        who = f"user-{user.pk}" if user and user.is_authenticated else f"address-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": who}
