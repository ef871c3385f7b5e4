"""Celery tasks of the directory: thin, id-taking, safe to run twice."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from tasks_app.leases import one_at_a_time

from . import conformance, drafts, freshness, services

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
@one_at_a_time("registry-check-entries")
def check_due_entries() -> dict[str, int]:
    """Beat: hand out the entries whose liveness check is due, one job each; make sure every
    hosted agent has its entry; drop checks older than REGISTRY_CHECKS_KEPT_DAYS; expire the
    drafts nobody proved within REGISTRY_DRAFT_LIFETIME; hand out the conformance runs and the
    domain proofs' re-checks that are due."""
    synced = services.hosted_entries_sync()
    expired, dropped = drafts.drafts_expire()
    # Every lease is taken before any job is handed out. Each *_due skips the rows locked
    # elsewhere (a row a job of this very beat locks to record its check, had it started), and
    # commits its lease before returning: a job never starts on an uncommitted one.
    due = services.entries_due()
    conforming = conformance.conformance_due()
    proving = freshness.proofs_due()
    for entry_id in due:
        check_entry.delay(entry_id)
    for entry_id in conforming:
        check_conformance.delay(entry_id)
    for entry_id in proving:
        recheck_proof.delay(entry_id)
    pruned = services.checks_prune(older_than=timedelta(days=settings.REGISTRY_CHECKS_KEPT_DAYS))
    if due or synced or expired or dropped or conforming or proving:
        log.info(
            "registry: %d checks due, %d conformance runs, %d proofs re-checked, %d hosted entries made, "
            "%d old checks dropped, %d drafts expired, %d dropped",
            len(due),
            len(conforming),
            len(proving),
            synced,
            pruned,
            expired,
            dropped,
        )
    return {
        "due": len(due),
        "conformance": len(conforming),
        "proofs": len(proving),
        "hosted": synced,
        "pruned": pruned,
        "expired": expired,
        "dropped": dropped,
    }


@shared_task(ignore_result=True)
def check_entry(entry_id: int) -> bool:
    return services.entry_check(entry_id=entry_id) is not None


@shared_task(ignore_result=True)
def sync_hosted_entry(agent_id: int) -> bool:
    return services.hosted_entry_sync(agent_id=agent_id) is not None


@shared_task(ignore_result=True)
def check_conformance(entry_id: int) -> bool:
    return conformance.entry_conformance_run(entry_id=entry_id) is not None


@shared_task(ignore_result=True)
def recheck_proof(entry_id: int) -> bool:
    return freshness.entry_recheck_proof(entry_id=entry_id) is not None
