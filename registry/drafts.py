"""Unproven drafts' lifetime: a remote agent submitted whose domain nobody proves within
REGISTRY_DRAFT_LIFETIME expires (the beat job, registry.tasks), and an expired entry is dropped
as long after that. While unproven, a draft is never fetched or probed (services.entries_due)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .models import Entry, Kind, State
from .services import _decide


def draft_expires_at(entry: Entry) -> datetime | None:
    """When an unproven draft expires (None for any other entry)."""
    if entry.state != State.DRAFT or entry.domain_verified_at is not None or entry.kind != Kind.REMOTE:
        return None
    return entry.created_at + timedelta(seconds=settings.REGISTRY_DRAFT_LIFETIME)


def drafts_expire(*, now: datetime | None = None, limit: int = 500) -> tuple[int, int]:
    """Expire the unproven drafts older than REGISTRY_DRAFT_LIFETIME, and drop the entries that
    expired longer ago than that. (expired, dropped)."""
    now = now or timezone.now()
    lifetime = timedelta(seconds=settings.REGISTRY_DRAFT_LIFETIME)
    lapsed = list(
        Entry.objects.filter(
            kind=Kind.REMOTE, state=State.DRAFT, domain_verified_at__isnull=True, created_at__lt=now - lifetime
        ).values_list("pk", flat=True)[:limit]
    )
    expired = 0
    days = lifetime.total_seconds() / 86400
    for entry_id in lapsed:
        with transaction.atomic():
            locked = Entry.objects.select_for_update().filter(pk=entry_id, state=State.DRAFT).first()
            if locked is None or locked.domain_verified_at is not None:
                continue
            reason = f"the domain was not proven within {days:g} days of the submission"
            _decide(locked, to=State.EXPIRED, actor=None, reason=reason, version=locked.current_version, at=now)
            expired += 1
    gone = Entry.objects.filter(kind=Kind.REMOTE, state=State.EXPIRED, state_changed_at__lt=now - lifetime)
    ids = list(gone.values_list("pk", flat=True)[:limit])
    with transaction.atomic():
        # The entry's own pointers to its versions protect them: let go first, then all goes.
        Entry.objects.filter(pk__in=ids).update(current_version=None, approved_version=None)
        Entry.objects.filter(pk__in=ids).delete()
    return expired, len(ids)
