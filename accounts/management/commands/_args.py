"""What the accounts commands share: finding a tenant, reading a time, printing JSON."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import Tenant

_DURATION = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def tenant_or_error(slug: str) -> Tenant:
    found = Tenant.objects.filter(slug=slug).first()
    if found is None:
        raise CommandError(f"no tenant {slug!r} (create_tenant makes one)")
    return found


def when(value: str) -> datetime:
    """A time from now ("30d", "12h", "90m") or an ISO 8601 date-time (with an offset)."""
    match = _DURATION.fullmatch(value.strip())
    if match:
        return timezone.now() + timedelta(**{_UNITS[match[2]]: int(match[1])})
    parsed = parse_datetime(value)
    if parsed is None or timezone.is_naive(parsed):
        raise CommandError(f"{value!r} is neither a duration (30d, 12h, 90m) nor an ISO 8601 time with an offset")
    return parsed


def dumps(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)
