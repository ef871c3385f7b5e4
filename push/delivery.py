"""The delivery loop: one job per config drains the events the config is owed, in seq order.

    lease the config (compare-and-set; no lock is held) ─┐
    ┌─> the next event after the cursor (short reads)    │ a job that finds the config
    │   check the URL again, sign, POST (no transaction) │ leased, dead, deleted or in
    │   record the attempt, advance the cursor (CAS)     │ backoff returns at once
    └── while events remain (up to BATCH) ───────────────┘
    release the lease; on a failure, enqueue self after the backoff

Ordering holds because only the lease holder sends, and it sends the event after the
cursor; the cursor moves only on a 2xx. A failed event blocks later ones until it is
delivered or dead (then the config is dead: see push.models.ConfigStatus).
"""

from __future__ import annotations

import logging
import uuid
from http import HTTPStatus

import orjson
from django.conf import settings
from django.utils import timezone
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from accounts.sealing import Unsealable, unseal
from outbound import client, ssrf
from tasks_app import encoders

from . import dispatch, metrics, selectors, services, signing

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

BATCH = 50  # events per job, then the job hands over (fairness between configs on busy workers)
SIGNATURE_HEADER = "A2A-Push-Signature"
EVENT_ID_HEADER = "A2A-Push-Event-Id"
ATTEMPT_HEADER = "A2A-Push-Attempt"


def run(*, config_pk: int) -> str:
    """Deliver what `config_pk` is owed. Safe to run any number of times at once."""
    token = services.lease_take(config_pk=config_pk)
    if token is None:
        return "skipped"
    verdict = services.Verdict("idle")
    try:
        for _ in range(BATCH):
            due = services.delivery_next(config_pk=config_pk, lease_token=token)
            if due is None:
                verdict = services.Verdict("idle")
                break
            verdict = attempt(due, lease_token=token)
            log.info("push %s to config %s, attempt %d: %s", due.event_id, config_pk, due.attempt, verdict.outcome)
            if verdict.outcome != "delivered":
                break
    finally:
        services.lease_release(config_pk=config_pk, lease_token=token)
    if verdict.outcome == "retry":
        # A hair over the backoff, so the job never arrives before next_attempt_at.
        dispatch.enqueue_delivery(config_pk=config_pk, countdown=verdict.delay + 0.02)
    elif verdict.outcome in ("idle", "delivered") and selectors.config_owed(config_pk):
        # An event committed while we held the lease: its own job found the config leased and
        # left. Or the batch ran out. Either way someone must go on.
        dispatch.enqueue_delivery(config_pk=config_pk)
    return verdict.outcome


def headers_for(due: services.Due, *, body: bytes, signature: str) -> dict[str, str]:
    # The body's type and the token's header are the task's dialect's (AIP: application/json,
    # X-ACPS-AIP-Notification-Token); the signature and event headers are the same for all.
    labels = encoders.push_headers(due.dialect)
    headers = {
        "Content-Type": labels.content_type,
        "User-Agent": "agentserver-push/1",
        SIGNATURE_HEADER: signature,
        EVENT_ID_HEADER: due.event_id,
        ATTEMPT_HEADER: str(due.attempt),
    }
    if due.auth_scheme:
        headers["Authorization"] = f"{due.auth_scheme} {unseal(due.credentials_sealed)}".rstrip()
    token = unseal(due.token_sealed)
    if token:
        headers[labels.token_header] = token
    return headers


def attempt(due: services.Due, *, lease_token: uuid.UUID) -> services.Verdict:
    """One attempt at one event: build, check, sign, POST, record."""
    with tracer.start_as_current_span("push deliver", kind=SpanKind.CLIENT) as span:
        verdict = _attempt(due, lease_token=lease_token)
        span.set_attributes(
            {
                "agentserver.task": due.task_key,
                "agentserver.event": due.event_id,
                "agentserver.outcome": verdict.outcome,
            }
        )
    return verdict


def _attempt(due: services.Due, *, lease_token: uuid.UUID) -> services.Verdict:
    started_at = timezone.now()

    def record(**outcome) -> services.Verdict:
        verdict = services.attempt_record(due=due, lease_token=lease_token, started_at=started_at, **outcome)
        metrics.DELIVERIES.labels(verdict.outcome).inc()
        if outcome.get("latency_ms"):
            metrics.DELIVERY_SECONDS.observe(outcome["latency_ms"] / 1000)
        return verdict

    try:
        body = orjson.dumps(
            encoders.encode_push(due.dialect, due.task_id, due.context_id, due.kind, due.payload, key=due.task_key)
        )
    except (LookupError, TypeError, ValueError) as exc:
        return record(status_code=None, latency_ms=0, error=f"the event could not be encoded: {exc}", permanent=True)
    try:
        # Checked again at every attempt: the allow-list or the name's addresses may have changed.
        destination = ssrf.check(due.url)
        assert destination is not None  # without unresolvable_ok a name that does not resolve raises
    except ssrf.Refused as exc:
        return record(status_code=None, latency_ms=0, error=f"refused: {exc}", permanent=True)
    except ssrf.Unresolved as exc:  # DNS fails for a while as connections do: retried alike
        return record(status_code=None, latency_ms=0, error=str(exc))
    claims = signing.notification_claims(body=body, task_id=due.task_id, event_id=due.event_id, audience=due.url)
    try:
        headers = headers_for(due, body=body, signature=signing.sign(claims))
    except Unsealable:
        return record(
            status_code=None,
            latency_ms=0,
            permanent=True,
            error="the config's secrets cannot be decrypted (was PUSH_CREDENTIALS_KEY changed?)",
        )
    try:
        response = client.post(
            destination,
            body=body,
            headers=headers,
            timeout=settings.PUSH_TIMEOUT,
            max_body=settings.PUSH_RESPONSE_MAX_BYTES,
        )
    except client.SendError as exc:
        return record(status_code=None, latency_ms=exc.latency_ms, error=str(exc), jti=claims["jti"])
    error = ""
    retry_after = None
    if not 200 <= response.status < 300:
        excerpt = response.body[:500].decode("utf-8", errors="replace")
        error = f"HTTP {response.status}" + (f": {excerpt}" if excerpt else "")
        retry_after = client.retry_after_seconds(response.headers.get("Retry-After"))
    return record(
        status_code=response.status,
        latency_ms=response.latency_ms,
        error=error,
        jti=claims["jti"],
        retry_after=retry_after,
        permanent=response.status == HTTPStatus.GONE,  # the receiver says the URL is gone for good
    )
