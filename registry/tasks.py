"""Celery tasks of the directory: thin, id-taking, safe to run twice."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from tasks_app.leases import one_at_a_time

from . import drafts, services

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
@one_at_a_time("registry-check-entries")
def check_due_entries() -> dict[str, int]:
    """Beat: hand out the entries whose liveness check is due, one job each; make sure every
    hosted agent has its entry; drop checks older than REGISTRY_CHECKS_KEPT_DAYS; expire the
    drafts nobody proved within REGISTRY_DRAFT_LIFETIME."""
    synced = services.hosted_entries_sync()
    expired, dropped = drafts.drafts_expire()
    due = services.entries_due()
    for entry_id in due:
        check_entry.delay(entry_id)
    pruned = services.checks_prune(older_than=timedelta(days=settings.REGISTRY_CHECKS_KEPT_DAYS))
    if due or synced or expired or dropped:
        log.info(
            "registry: %d checks due, %d hosted entries made, %d old checks dropped, %d drafts expired, %d dropped",
            len(due),
            synced,
            pruned,
            expired,
            dropped,
        )
    return {"due": len(due), "hosted": synced, "pruned": pruned, "expired": expired, "dropped": dropped}


@shared_task(ignore_result=True)
def check_entry(entry_id: int) -> bool:
    return services.entry_check(entry_id=entry_id) is not None


@shared_task(ignore_result=True)
def sync_hosted_entry(agent_id: int) -> bool:
    return services.hosted_entry_sync(agent_id=agent_id) is not None
