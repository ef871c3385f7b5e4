"""Every write of push: configs (create, delete) and the delivery cursor (lease, record an
attempt, release, retry a dead delivery).

Short transactions only: the URL check resolves DNS and the POST goes over the network, so
both happen outside any transaction (see push/delivery.py for the loop that calls these).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import Agent
from accounts.sealing import seal
from accounts.selectors import Principal
from outbound import client, ssrf
from tasks_app.errors import InvalidParams, TooManyPushConfigs
from tasks_app.models import Task
from tasks_app.selectors import event_after
from tasks_app.services import task_lock_for_caller, task_push_configs_mark

from . import dispatch
from .domain import REDACTED, PushConfigInput
from .models import ConfigStatus, DeliveryState, PendingPushConfig, PushAttempt, PushConfig, PushDelivery

# RFC 9110 token (an auth scheme) and visible ASCII plus space (credentials, token): header
# values must not smuggle a CR/LF into the request.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_HEADER_VALUE = re.compile(r"^[\x20-\x7e]*$")


# --- configs ---------------------------------------------------------------------------


def config_check(*, config: PushConfigInput) -> None:
    """Refuse a config that could never be delivered: a URL the SSRF guard refuses, header
    values that are not header values. Resolves the host (network I/O): call it before, never
    inside, a transaction. A host that does not resolve yet is accepted; delivery checks again.
    Lengths are the columns' (`accounts.storable`); the dialect's codec checked them."""
    try:
        ssrf.check(config.url, unresolvable_ok=True)
    except ssrf.Refused as exc:
        raise InvalidParams(f"url refused: {exc}") from None
    if config.auth_scheme and not _TOKEN.match(config.auth_scheme):
        raise InvalidParams("authentication.scheme must be an HTTP authentication scheme such as Bearer")
    if config.auth_credentials and not config.auth_scheme:
        raise InvalidParams("authentication.scheme is required with authentication.credentials")
    if config.auth_credentials == REDACTED:
        raise InvalidParams(
            f"authentication.credentials is {REDACTED}, what this server shows instead of stored credentials; "
            "send the credentials themselves"
        )
    for name, value in (("authentication.credentials", config.auth_credentials), ("token", config.token)):
        if not _HEADER_VALUE.match(value):
            raise InvalidParams(f"{name} must be printable ASCII (it is sent in an HTTP header)")


def _sealed_fields(config: PushConfigInput) -> dict[str, str]:
    return {
        "url": config.url,
        "auth_scheme": config.auth_scheme,
        "credentials_sealed": seal(config.auth_credentials),
        "token_sealed": seal(config.token),
    }


def _limit(tenant_value: int | None, site_default: int) -> int:
    return site_default if tenant_value is None else tenant_value


def _per_task_check(*, agent: Agent, task: Task) -> None:
    """TooManyPushConfigs when the (locked) task has as many configs as it may: every event is
    POSTed to each of them, so this bounds what one event fans out into."""
    cap = _limit(agent.tenant.max_push_configs_per_task, settings.PUSH_MAX_CONFIGS_PER_TASK)
    if cap and PushConfig.objects.filter(task=task, deleted_at__isnull=True)[:cap].count() >= cap:
        raise TooManyPushConfigs(
            f"task {task.client_task_id or task.pk} already has {cap} push notification configs, the most a task may "
            "have; delete one first, or set again under an existing config id to replace it"
        )


def config_create(
    *, agent: Agent, principal: Principal, task_id: str, config: PushConfigInput, after_seq: int | None = None
) -> PushConfig:
    """Register (or, for an id the task already has, replace) a config on the caller's task.

    Events with seq > `after_seq` are due to it; by default those after the task's newest
    event, i.e. what happens from now on. The caller has run `config_check` first.
    """
    with transaction.atomic():
        task = task_lock_for_caller(agent=agent, principal=principal, task_id=task_id)
        fields = _sealed_fields(config)
        existing = (
            PushConfig.objects.filter(task=task, config_id=config.config_id, deleted_at__isnull=True).first()
            if config.config_id
            else None
        )
        if existing is not None:
            existing.task = task  # the row locked above: its id is shown without a query
            # Same id: the client moved its endpoint or renewed its secrets. The cursor stays,
            # so what was delivered is not delivered again.
            for name, value in fields.items():
                setattr(existing, name, value)
            existing.save(update_fields=[*fields, "updated_at"])
            stored = existing
        else:
            _per_task_check(agent=agent, task=task)
            stored = PushConfig.objects.create(
                task=task,
                config_id=config.config_id or str(uuid.uuid4()),
                delivered_seq=task.last_seq if after_seq is None else after_seq,
                **fields,
            )
        task_push_configs_mark(task=task, present=True)
        pk = stored.pk
        transaction.on_commit(lambda: dispatch.enqueue_delivery(config_pk=pk))
    return stored


def config_delete(*, agent: Agent, principal: Principal, task_id: str, config_id: str | None) -> int:
    """Delete a config (`config_id` None: every config of the task): nothing more is delivered
    to it. Deleting what is not there is not an error (A2A wants Delete idempotent); the task
    must still be the caller's. How many were deleted."""
    now = timezone.now()
    with transaction.atomic():
        task = task_lock_for_caller(agent=agent, principal=principal, task_id=task_id)
        doomed = PushConfig.objects.filter(task=task, deleted_at__isnull=True)
        if config_id is not None:
            doomed = doomed.filter(config_id=config_id)
        deleted = _configs_delete_locked(task, doomed, now)
    return deleted


def _configs_delete_locked(task: Task, doomed: Any, now: datetime) -> int:
    # The row stays for the delivery log; its secrets go.
    deleted = doomed.update(
        deleted_at=now, credentials_sealed="", token_sealed="", lease_token=None, lease_until=None, updated_at=now
    )
    if task.has_push_configs and not PushConfig.objects.filter(task=task, deleted_at__isnull=True).exists():
        task_push_configs_mark(task=task, present=False)
    return deleted


def config_delete_for_tenant(*, tenant_id: int, config_pk: int) -> bool:
    """Delete one config of a task of the tenant, as the tenant manages it (its API), not as
    the task's caller: the same deletion as `config_delete`. False if there is no such live
    config of the tenant's."""
    now = timezone.now()
    with transaction.atomic():
        config = (
            PushConfig.objects.filter(pk=config_pk, task__tenant_id=tenant_id, deleted_at__isnull=True)
            .values_list("task_id", flat=True)
            .first()
        )
        if config is None:
            return False
        task = Task.objects.select_for_update().get(pk=config)
        doomed = PushConfig.objects.filter(pk=config_pk, deleted_at__isnull=True)
        return bool(_configs_delete_locked(task, doomed, now))


# --- configs registered before their task (AIP) -----------------------------------------


def config_register_ahead(
    *, agent: Agent, principal: Principal, client_task_id: str, config: PushConfigInput
) -> PendingPushConfig:
    """Register (or, for an id it has, replace) a config for a task the caller has not started
    yet, under the id it will give the task. The caller has run `config_check` first and found
    no task of that id. A caller holds at most PUSH_MAX_PENDING_CONFIGS of them in the tenant
    (one task's count toward the per-task cap as well), each for PUSH_PENDING_CONFIG_TTL
    seconds from its last set (`pending_live`)."""
    config_id = config.config_id or str(uuid.uuid4())
    with transaction.atomic():
        mine = pending_live(PendingPushConfig.objects.filter(agent__tenant_id=agent.tenant_id, owner=principal.name))
        replaces = mine.filter(agent=agent, client_task_id=client_task_id, config_id=config_id).exists()
        if not replaces:
            _pending_check(agent=agent, mine=mine, client_task_id=client_task_id)
        # An expired row of the same id is taken over, as if it had been swept.
        stored, _ = PendingPushConfig.objects.update_or_create(
            agent=agent,
            owner=principal.name,
            client_task_id=client_task_id,
            config_id=config_id,
            defaults=_sealed_fields(config),
        )
    return stored


def _pending_check(*, agent: Agent, mine: Any, client_task_id: str) -> None:
    per_caller = _limit(agent.tenant.max_pending_push_configs, settings.PUSH_MAX_PENDING_CONFIGS)
    if per_caller and mine[:per_caller].count() >= per_caller:
        raise TooManyPushConfigs(
            f"this caller already has {per_caller} notification configs set for tasks it has not started, the most "
            "it may have; start those tasks or delete configs first (unused ones expire after "
            f"{settings.PUSH_PENDING_CONFIG_TTL} s)"
        )
    per_task = _limit(agent.tenant.max_push_configs_per_task, settings.PUSH_MAX_CONFIGS_PER_TASK)
    if per_task and mine.filter(agent=agent, client_task_id=client_task_id)[:per_task].count() >= per_task:
        raise TooManyPushConfigs(
            f"task {client_task_id} already has {per_task} notification configs set ahead of it, the most a task may "
            "have; delete one first, or set again under an existing config id to replace it"
        )


def pending_live(configs: Any, *, now: datetime | None = None) -> Any:
    """The configs (a PendingPushConfig queryset) not yet expired: one unused for
    PUSH_PENDING_CONFIG_TTL seconds since it was last set is ignored, and swept."""
    ttl = settings.PUSH_PENDING_CONFIG_TTL
    if not ttl:
        return configs
    return configs.filter(updated_at__gt=(now or timezone.now()) - timedelta(seconds=ttl))


def pending_configs_sweep(*, now: datetime | None = None, batch: int = 1000) -> int:
    """Delete expired configs set ahead of tasks (the push sweep runs this). How many went."""
    ttl = settings.PUSH_PENDING_CONFIG_TTL
    if not ttl:
        return 0
    cutoff = (now or timezone.now()) - timedelta(seconds=ttl)
    doomed = list(PendingPushConfig.objects.filter(updated_at__lte=cutoff).values_list("pk", flat=True)[:batch])
    return PendingPushConfig.objects.filter(pk__in=doomed).delete()[0] if doomed else 0


def pending_configs_delete(*, agent: Agent, principal: Principal, client_task_id: str, config_id: str | None) -> int:
    """Delete configs registered ahead of a task (`config_id` None: all of them)."""
    doomed = PendingPushConfig.objects.filter(agent=agent, owner=principal.name, client_task_id=client_task_id)
    if config_id is not None:
        doomed = doomed.filter(config_id=config_id)
    return doomed.delete()[0]


def config_attach(
    *, agent: Agent, principal: Principal, task: Task, config_id: str, states: Iterable[str] = (), after_seq: int = 0
) -> PushConfig:
    """Move a config registered ahead of `task` (just created, in the caller's transaction)
    onto it, delivering the events after `after_seq` (in `states` only, if any are named).
    InvalidParams if the caller registered no config of that id for the task's id."""
    client_task_id = task.client_task_id or str(task.pk)
    pending = pending_live(
        PendingPushConfig.objects.select_for_update().filter(
            agent=agent, owner=principal.name, client_task_id=client_task_id, config_id=config_id
        )
    ).first()
    if pending is None:
        raise InvalidParams(
            f"notificationConfigId {config_id!r} names no notification config set for task {client_task_id!r} "
            "(notification/set it first)"
        )
    stored = PushConfig.objects.create(
        task=task,
        config_id=pending.config_id,
        url=pending.url,
        auth_scheme=pending.auth_scheme,
        credentials_sealed=pending.credentials_sealed,
        token_sealed=pending.token_sealed,
        notify_on_states=sorted(set(states)),
        delivered_seq=after_seq,
    )
    pending.delete()
    task_push_configs_mark(task=task, present=True)
    pk = stored.pk
    transaction.on_commit(lambda: dispatch.enqueue_delivery(config_pk=pk))
    return stored


# --- the delivery cursor ----------------------------------------------------------------


def _lease_seconds() -> float:
    # One attempt can take connect + a read timeout per chunk; a lease outlives that by far.
    return settings.PUSH_TIMEOUT * 4 + 30


def lease_take(*, config_pk: int, now: datetime | None = None) -> uuid.UUID | None:
    """Compare-and-set: the config becomes this job's if it is live, not leased by a live job
    and not waiting out a backoff. Returns the lease token, or None."""
    now = now or timezone.now()
    token = uuid.uuid4()
    taken = (
        PushConfig.objects.live()
        .free(now)
        .filter(pk=config_pk)
        .update(lease_token=token, lease_until=now + timedelta(seconds=_lease_seconds()))
    )
    return token if taken else None


def lease_release(*, config_pk: int, lease_token: uuid.UUID) -> None:
    PushConfig.objects.filter(pk=config_pk, lease_token=lease_token).update(lease_token=None, lease_until=None)


@dataclass(frozen=True)
class Due:
    """The next event one config is owed, ready to send (signing happens per attempt)."""

    config_pk: int
    event_pk: int
    task_id: str  # as the task is shown (its client's own id, if it chose one)
    task_key: str
    context_id: str
    dialect: str  # the task's: its events are pushed as its creator's dialect writes them
    seq: int
    kind: str
    payload: dict[str, Any]
    url: str
    auth_scheme: str
    credentials_sealed: str
    token_sealed: str
    attempt: int  # this attempt's number, counting from 1 since the delivery was (re)started

    @property
    def event_id(self) -> str:
        return f"{self.task_id}:{self.seq}"


def delivery_next(*, config_pk: int, lease_token: uuid.UUID) -> Due | None:
    """The oldest event after the config's cursor and how often it was tried already; None
    when nothing is due or the lease is no longer ours.

    The lease needs no renewing here: a lease outlasts one attempt by far (`outbound.client.post`
    bounds it), and every delivered attempt extends it (`attempt_record`), so a batch of slow
    attempts never lets a second job in."""
    config = PushConfig.objects.live().select_related("task").filter(pk=config_pk, lease_token=lease_token).first()
    if config is None:
        return None
    states = config.notify_on_states
    event = event_after(config.task_id, config.delivered_seq, states=states)
    if states:
        # A config for some states only passes the events of others: its cursor moves past
        # them, so that it is not owed them (the sweeper would send a job for them forever).
        # Every event up to the task's last_seq read above (with the config) is committed.
        passed = event.seq - 1 if event is not None else config.task.last_seq
        if passed > config.delivered_seq:
            PushConfig.objects.filter(pk=config_pk, lease_token=lease_token, delivered_seq__lt=passed).update(
                delivered_seq=passed
            )
    if event is None:
        return None
    # The delivery row itself is made with the first attempt's record, in its transaction:
    # a row made here would cost a commit of its own (and a WAL flush) per event. Until then
    # the event has no row, and it was tried 0 times.
    tried = PushDelivery.objects.filter(config_id=config_pk, seq=event.seq).values_list("attempts", flat=True).first()
    return Due(
        config_pk=config.pk,
        event_pk=event.pk,
        # The id the task is shown by (the client's own for an A2A 0.1 task): what the
        # receiver knows it by, in the body and the signed claims.
        task_id=config.task.client_task_id or str(config.task_id),
        task_key=str(config.task_id),
        context_id=config.task.context_id,
        dialect=config.task.dialect,
        seq=event.seq,
        kind=event.kind,
        payload=event.payload,
        url=config.url,
        auth_scheme=config.auth_scheme,
        credentials_sealed=config.credentials_sealed,
        token_sealed=config.token_sealed,
        attempt=(tried or 0) + 1,
    )


def retry_delay(failures: int, retry_after: float | None = None, *, rand: float | None = None) -> float:
    """Seconds before the next attempt after `failures` failed ones: exponential backoff with
    jitter (so receivers coming back up are not hit by every sender at once), and at least
    what the receiver asked for in Retry-After, within PUSH_RETRY_AFTER_MAX."""
    return client.backoff(
        failures,
        base=settings.PUSH_BACKOFF_BASE,
        cap=settings.PUSH_BACKOFF_CAP,
        retry_after=retry_after,
        retry_after_max=settings.PUSH_RETRY_AFTER_MAX,
        rand=rand,
    )


@dataclass(frozen=True)
class Verdict:
    """What the delivery loop does next: go on, stop (dead, or the lease was lost), or retry later."""

    outcome: str  # "delivered" | "retry" | "dead" | "lost"
    delay: float = 0.0


def attempt_record(
    *,
    due: Due,
    lease_token: uuid.UUID,
    started_at: datetime,
    status_code: int | None,
    latency_ms: int,
    error: str = "",
    jti: str = "",
    retry_after: float | None = None,
    permanent: bool = False,
) -> Verdict:
    """Log the attempt and move the cursor: forward on a 2xx; on a failure, schedule the next
    attempt, or give up after PUSH_MAX_ATTEMPTS (at once when `permanent`: a refused
    destination, an event that cannot be encoded)."""
    now = timezone.now()
    succeeded = status_code is not None and 200 <= status_code < 300
    with transaction.atomic():
        config = PushConfig.objects.select_for_update().get(pk=due.config_pk)
        ours = config.lease_token == lease_token and config.status == ConfigStatus.ACTIVE and config.deleted_at is None
        # Every delivery row is made here, under the config's row lock, so two jobs (one whose
        # lease ran out, one holding it now) cannot both make it. A new row is inserted with
        # this attempt's outcome already in it: one statement, not an insert and an update.
        found = PushDelivery.objects.select_for_update().filter(config_id=due.config_pk, seq=due.seq).first()
        made = found is None
        delivery = found or PushDelivery(config_id=due.config_pk, event_id=due.event_pk, seq=due.seq)
        verdict = Verdict("lost")
        if ours:
            delivery.attempts += 1
            delivery.last_status_code = status_code
            delivery.last_error = error[:2000]
            if succeeded:
                delivery.state = DeliveryState.DELIVERED
                delivery.delivered_at = now
                verdict = Verdict("delivered")
            elif permanent or delivery.attempts >= settings.PUSH_MAX_ATTEMPTS:
                delivery.state = DeliveryState.DEAD
                verdict = Verdict("dead")
            else:
                verdict = Verdict("retry", retry_delay(delivery.attempts, retry_after))
        # If our lease ran out (or the config was deleted or died) while we sent, the attempt
        # is still logged, but the delivery's count and the cursor belong to whoever holds the
        # lease now: a row we make is left pending, one we found is left alone.
        if made:
            delivery.save(force_insert=True)
        elif ours:
            delivery.save(update_fields=["attempts", "last_status_code", "last_error", "state", "delivered_at"])
        PushAttempt.objects.create(
            delivery=delivery,
            started_at=started_at,
            status_code=status_code,
            latency_ms=latency_ms,
            error=error[:2000],
            jti=jti,
        )
        if not ours:
            return verdict
        if verdict.outcome == "delivered":
            config.delivered_seq = max(config.delivered_seq, due.seq)
            config.next_attempt_at = None
            config.lease_until = now + timedelta(seconds=_lease_seconds())
        elif verdict.outcome == "dead":
            config.status = ConfigStatus.DEAD
            config.next_attempt_at = None
        else:
            config.next_attempt_at = now + timedelta(seconds=verdict.delay)
        config.save(update_fields=["delivered_seq", "next_attempt_at", "lease_until", "status", "updated_at"])
    return verdict


def deliveries_retry(*, delivery_pks: Iterable[int]) -> int:
    """Give dead deliveries a fresh budget of attempts and resume their configs from them
    (an operator's action). Returns how many were revived."""
    revived = 0
    with transaction.atomic():
        deliveries = (
            PushDelivery.objects.select_for_update()
            .select_related("config")
            .filter(pk__in=list(delivery_pks), state=DeliveryState.DEAD, config__deleted_at__isnull=True)
        )
        for delivery in deliveries:
            config = delivery.config
            # A dead delivery the cursor has since passed (an earlier retry got further) is history.
            if config.delivered_seq >= delivery.seq:
                continue
            delivery.state = DeliveryState.PENDING
            delivery.attempts = 0
            delivery.save(update_fields=["state", "attempts"])
            PushConfig.objects.filter(pk=config.pk).update(
                status=ConfigStatus.ACTIVE, next_attempt_at=None, updated_at=timezone.now()
            )
            transaction.on_commit(partial(dispatch.enqueue_delivery, config_pk=config.pk))
            revived += 1
    return revived
