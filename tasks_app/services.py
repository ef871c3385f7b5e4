"""Every write to the task store.

Each function is one short transaction: lock the task row, check the state machine, write
the change, append its TaskEvent with the next per-task seq, and only after commit publish
the wake-up hint and enqueue work. No network I/O and no agent code run inside.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import BigIntegerField, Case, DateTimeField, F, Func, Max, Model, Q, Sum, TextField, When
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from accounts import sealing, storable
from accounts.models import Agent
from accounts.selectors import Principal

from . import dispatch, hints, holders, hooks, media, sql
from . import parts as P
from .domain import MessageView, NewArtifact, NewMessage, RunInputs, TaskLimits, parse_task_id
from .errors import (
    InvalidParams,
    InvalidTransition,
    StorageQuotaExceeded,
    TaskClosed,
    TaskNotCancelable,
    TaskNotFound,
    TooManyActiveTasks,
    UnsupportedOperation,
)
from .lifecycle import (
    ALLOWED,
    INTERRUPTED,
    TERMINAL,
    Dialect,
    EventKind,
    Failure,
    Role,
    TaskState,
    can_transition,
    public_text,
)
from .models import (
    ACTIVE_STATES,
    ANONYMOUS_OWNER,
    Artifact,
    Message,
    StatusChange,
    StorageCount,
    Task,
    TaskEvent,
    TenantStorage,
)
from .parts import Part, PartError, validate_all
from .selectors import caller_task_q, message_view, redispatch_refusal, run_inputs

log = logging.getLogger(__name__)

# What a client's operation may do to a task that exists is the cross-dialect contract's to
# decide (protocols.contract), asked here with the task's row locked: (the task's creating
# dialect, its state, the id it is shown by). A send's rule answers the state the follow-up
# resumes the task in; either raises the refusal, before anything is written.
FollowUp = Callable[[str, str, str], str]
Admit = Callable[[str, str, str], None]

# For each state, the states a task may be in to move to it (the state machine, inverted):
# the single-statement writes check it in their WHERE clause, bound as one text[] value.
_SOURCES: dict[str, str] = {
    new: sql.text_array(sorted(current for current, allowed in ALLOWED.items() if new in allowed))
    for new in TaskState.values
}
_OPEN = sql.text_array(sorted(set(TaskState.values) - TERMINAL))
_TERMINAL = sql.text_array(sorted(TERMINAL))


def _status_payload(
    state: str, message: Message | dict[str, Any] | None, at: datetime, reason: str = ""
) -> dict[str, Any]:
    if isinstance(message, Message):
        message = message_view(message).as_payload()
    payload: dict[str, Any] = {"state": state, "timestamp": at.isoformat(), "message": message}
    if reason:
        payload["reason"] = reason
    return payload


def _event_append(*, task: Task, kind: str, payload: dict[str, Any]) -> TaskEvent:
    """Append to the task's log. Caller holds the task's row lock and saves `last_seq`."""
    task.last_seq += 1
    return TaskEvent.objects.create(task=task, seq=task.last_seq, kind=kind, payload=payload)


@dataclass(frozen=True)
class _Written:
    """A task as a one-statement run write left it (`sql.WRITTEN_COLUMNS`): what the
    after-commit hook needs."""

    pk: uuid.UUID
    state: str
    last_seq: int
    has_push_configs: bool


def _after_commit(task: Task | _Written, *, created: bool = False) -> None:
    change = hooks.TaskChanged(task_id=str(task.pk), state=str(task.state), has_push_configs=task.has_push_configs)
    transaction.on_commit(lambda: hints.publish(change.task_id, change.state, local_only=created))
    transaction.on_commit(lambda: hooks.task_changed(change))


def _enqueue_run(task: Task, executor: str) -> None:
    """Register after `_after_commit`: the hint is one cheap PUBLISH that streams of the task
    wait for, the broker's publish takes longer, and on_commit callbacks run in order."""
    task_id, token = task.id, task.run_token
    transaction.on_commit(lambda: dispatch.enqueue_run(task_id=task_id, run_token=token, executor=executor))


def _message_fields(
    message: NewMessage, context_id: str, activated_extensions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "context_id": context_id,
        "role": message.role,
        "parts": message.parts,
        "metadata": message.metadata,
        "extensions": message.extensions,
        "reference_task_ids": message.reference_task_ids,
        "command": message.command,
        "command_params": message.command_params,
        "sent_at": message.sent_at,
        "sender_id": message.sender_id,
        "activated_extensions": activated_extensions or [],
    }


def _message_store(
    *, task: Task, message: NewMessage, context_id: str, activated_extensions: list[dict[str, Any]] | None = None
) -> Message:
    return Message.objects.create(task=task, **_message_fields(message, context_id, activated_extensions))


def _set_status(*, task: Task, state: str, message: Message | None, at: datetime, reason: str = "") -> None:
    """Record a transition on a locked task (the caller saves the task)."""
    StatusChange.objects.create(task=task, state=state, message=message, reason=reason, timestamp=at)
    task.state = state
    task.status_message = message
    task.status_timestamp = at
    _event_append(task=task, kind=EventKind.STATUS, payload=_status_payload(state, message, at, reason))


@dataclass(frozen=True)
class _Caps:
    """A tenant's caps on new work (0: none)."""

    max_active: int
    max_stored: int
    # The share of `max_active` the caller's tasks may hold: anonymous callers only (0: none).
    max_anonymous: int = 0


def _caps(agent: Agent, principal: Principal) -> _Caps:
    # The tenant came with the agent (accounts.selectors.agent_get): no query.
    tenant = agent.tenant
    active, stored, anonymous = tenant.max_active_tasks, tenant.max_stored_bytes, tenant.max_active_anonymous_tasks
    if anonymous is None:
        anonymous = settings.TENANT_MAX_ACTIVE_ANONYMOUS_TASKS
    return _Caps(
        max_active=settings.TENANT_MAX_ACTIVE_TASKS if active is None else active,
        max_stored=settings.TENANT_MAX_STORED_BYTES if stored is None else stored,
        # A shared sandbox's callers are one principal of their own ("shared"), not anonymous.
        max_anonymous=anonymous if principal.name == ANONYMOUS_OWNER else 0,
    )


def _too_many_active(caps: _Caps) -> TooManyActiveTasks:
    wait = settings.TENANT_ACTIVE_TASKS_RETRY_AFTER
    return TooManyActiveTasks(
        f"the tenant already has {caps.max_active} tasks queued or running, its limit; "
        f"send again once one of them finishes (retry in {wait} s)",
        retry_after=wait,
    )


def _too_many_anonymous(caps: _Caps) -> TooManyActiveTasks:
    wait = settings.TENANT_ACTIVE_TASKS_RETRY_AFTER
    return TooManyActiveTasks(
        f"callers without an API key already have {caps.max_anonymous} tasks queued or running at this "
        f"tenant, their limit; send again once one of them finishes (retry in {wait} s), or send with an API key",
        retry_after=wait,
    )


def _storage_used_up(caps: _Caps) -> StorageQuotaExceeded:
    return StorageQuotaExceeded(
        f"the tenant's storage quota of {caps.max_stored} bytes is used up; no new messages are "
        "taken until tasks are deleted or the quota is raised"
    )


def _room_check(*, tenant_id: int, caps: _Caps) -> None:
    """Refuse new work when the tenant is at a cap: the ORM's form of the check `sql.NEW_TASK`
    makes in its statement. Inside the transaction that requests the run."""
    if sql.available():
        # One query for every cap, as the new task's statement counts them.
        params = {"t_tenant_id": tenant_id, "max_active": caps.max_active, "max_anonymous": caps.max_anonymous}
        [(active, anonymous, stored)] = sql.execute(sql.ROOM, params)
        if caps.max_stored and stored is not None and stored >= caps.max_stored:
            raise _storage_used_up(caps)
        if caps.max_active and active >= caps.max_active:
            raise _too_many_active(caps)
        if caps.max_anonymous and anonymous >= caps.max_anonymous:
            raise _too_many_anonymous(caps)
        return
    if caps.max_stored:
        stored = TenantStorage.objects.filter(tenant_id=tenant_id).values_list("stored_bytes", flat=True).first()
        if stored is not None and stored >= caps.max_stored:
            raise _storage_used_up(caps)
    # SQLite (the embedded mode) keeps no ActiveTaskCount: its tasks are counted, at most as
    # many as the cap.
    if caps.max_active:
        active = Task.objects.filter(tenant_id=tenant_id, state__in=ACTIVE_STATES)[: caps.max_active].count()
        if active >= caps.max_active:
            raise _too_many_active(caps)
    if caps.max_anonymous:
        anonymous = Task.objects.filter(tenant_id=tenant_id, state__in=ACTIVE_STATES, owner=ANONYMOUS_OWNER)
        if anonymous[: caps.max_anonymous].count() >= caps.max_anonymous:
            raise _too_many_anonymous(caps)


def message_receive(
    *,
    agent: Agent,
    principal: Principal,
    message: NewMessage,
    dialect: str = Dialect.A2A_1_0,
    accepted_output_modes: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    new_task_id: uuid.UUID | None = None,
    client_task_id: str | None = None,
    follow_up: FollowUp | None = None,
    activated_extensions: list[dict[str, Any]] | None = None,
    limits: TaskLimits | None = None,
) -> tuple[Task, Message]:
    """A client's message: start a task, or continue an interrupted one, and queue the agent.

    The rules are A2A's (spec 001 and the 1.0 spec §3.4): the server chooses task ids;
    a message without a context gets a new one; a follow-up naming only the task takes the
    task's context; a context that contradicts the task is refused; terminal tasks are closed.
    `new_task_id` lets a caller that must watch the task before it exists choose its id.
    `client_task_id` is the id the client chose for a new task (A2A 0.1): the task keeps it
    beside its key, and is found and shown by it (`selectors.caller_task_q`); the caller has
    looked it up for this agent and owner and found none. `follow_up` decides whether a message
    to an existing task is taken, and the state it resumes the task in (protocols.contract:
    interrupted tasks take one; A2A 0.1 re-opens a completed task it made; AIP's resume in
    working, as its state machine has no way back to accepted); a follow-up needs it.
    `activated_extensions` (what the request's A2A-Extensions activated, see
    `protocols.extensions`) is kept on the message for the agent's run. `limits` are what the
    client asks of a new task (its timeouts while it waits on the client, its products' size).
    A tenant at its cap on active tasks gets TooManyActiveTasks, one past its storage quota
    StorageQuotaExceeded (docs/limits.md); nothing of the message is stored then.
    """
    if message.role != Role.USER:
        raise InvalidParams("message.role must be the user's role")
    try:  # every dialect's codec gives canonical parts; the store holds no other kind
        validate_all(message.parts, where="message.parts")
    except PartError as exc:
        raise InvalidParams(str(exc)) from None
    media.check_message(agent=agent, parts=message.parts, accepted_output_modes=accepted_output_modes)
    if client_task_id is not None and not message.task_id:
        client_task_id_check(agent=agent, principal=principal, task_id=client_task_id)
    now = timezone.now()
    caps = _caps(agent, principal)
    if message.task_id:
        if follow_up is None:
            raise TypeError("a follow-up is the cross-dialect contract's to decide: pass follow_up")
        with transaction.atomic():
            task, stored = _follow_up_receive(
                agent=agent,
                principal=principal,
                message=message,
                now=now,
                accepted_output_modes=accepted_output_modes,
                caps=caps,
                follow_up=follow_up,
                activated_extensions=activated_extensions,
            )
            _after_commit(task)
            _enqueue_run(task, agent.executor)
        return task, stored
    # A new task: the hot path. Nothing to lock or check, so it is inserts only.
    task = sql.made(
        Task,
        {
            "id": new_task_id or uuid.uuid4(),
            "tenant_id": agent.tenant_id,
            "agent_id": agent.pk,
            "owner": principal.name,
            "client_task_id": client_task_id,
            "context_id": message.context_id or str(uuid.uuid4()),
            "dialect": dialect,
            "state": TaskState.SUBMITTED,
            "status_timestamp": now,
            "metadata": metadata or {},
            "accepted_output_modes": accepted_output_modes or [],
            "input_timeout": limits.input_timeout if limits else None,
            "completion_timeout": limits.completion_timeout if limits else None,
            "products_max_bytes": limits.products_max_bytes if limits else None,
            "last_seq": 1,
            "message_count": 1,
            "created_at": now,
            "updated_at": now,
        },
    )
    task.agent = agent  # read by what follows: no query for it
    _run_request(task, now)
    payload = _status_payload(TaskState.SUBMITTED, None, now)
    if sql.available():
        # One statement, so one transaction of its own (or part of the caller's).
        with _client_id_taken(client_task_id):
            stored = _task_insert_in_one_statement(task, message, payload, now, caps, activated_extensions)
        _after_commit(task, created=True)
        _enqueue_run(task, agent.executor)
        return task, stored
    with transaction.atomic():
        _room_check(tenant_id=agent.tenant_id, caps=caps)
        with _client_id_taken(client_task_id), transaction.atomic():
            task.save(force_insert=True)
        stored = _message_store(
            task=task, message=message, context_id=task.context_id, activated_extensions=activated_extensions
        )
        StatusChange.objects.create(task=task, state=TaskState.SUBMITTED, timestamp=now)
        TaskEvent.objects.create(task=task, seq=1, kind=EventKind.STATUS, payload=payload)
        _after_commit(task, created=True)
        _enqueue_run(task, agent.executor)
    return task, stored


# Callers without a key on a public agent are all one principal ("anonymous"), so a task they
# name by an id they chose is anyone's who can guess that id: they must choose ids no one can
# guess, and long ones at least (a UUID has 32 hex digits). docs/tenancy.md.
ANONYMOUS_CLIENT_ID_MIN = 32


def client_task_id_check(*, agent: Agent, principal: Principal, task_id: str, where: str = "id") -> None:
    """InvalidParams for a task id an anonymous caller chose too short to be unguessable."""
    if principal.is_anonymous and not agent.shared_sandbox and len(task_id) < ANONYMOUS_CLIENT_ID_MIN:
        raise InvalidParams(
            f"{where} must be at least {ANONYMOUS_CLIENT_ID_MIN} characters when sent without an API key: "
            "every caller without a key shares one scope on this public agent, so a task id must be one no "
            "one else can guess (send a random UUID, or an API key)"
        )


@contextmanager
def _client_id_taken(client_task_id: str | None) -> Iterator[None]:
    """Two requests that create a task under the same client id at once: the second insert
    meets the unique constraint (agent, owner, client id), and its client is told to send
    again, which then continues the task the first one made."""
    try:
        yield
    except IntegrityError as exc:
        if client_task_id is None or _CLIENT_ID_CONSTRAINT not in str(exc):
            raise
        raise UnsupportedOperation(
            f"task {client_task_id!r} was created by another request at the same moment; send again to continue it"
        ) from None


_CLIENT_ID_CONSTRAINT = "tasks_task_unique_client_task_id"


def _follow_up_receive(
    *,
    agent: Agent,
    principal: Principal,
    message: NewMessage,
    now: datetime,
    accepted_output_modes: list[str] | None,
    caps: _Caps,
    activated_extensions: list[dict[str, Any]] | None,
    follow_up: FollowUp,
) -> tuple[Task, Message]:
    task = task_lock_for_caller(agent=agent, principal=principal, task_id=str(message.task_id))
    shown = task.client_task_id or task.id
    if message.context_id and message.context_id != task.context_id:
        raise InvalidParams(f"contextId {message.context_id!r} does not match the context of task {shown}")
    resume_as = follow_up(task.dialect, task.state, str(shown))
    # A new exchange of the task (a re-opened one too): its answer is the task, not a bare reply.
    task.reply_only = False
    # The follow-up makes the task active again: it counts against the cap like a new task.
    _room_check(tenant_id=task.tenant_id, caps=caps)
    stored = _message_store(
        task=task, message=message, context_id=task.context_id, activated_extensions=activated_extensions
    )
    task.message_count += 1
    task.accepted_output_modes = accepted_output_modes or []
    _run_request(task, now)
    _set_status(task=task, state=resume_as, message=None, at=now)
    task.save()
    return task, stored


def _task_insert_in_one_statement(
    task: Task,
    message: NewMessage,
    payload: dict[str, Any],
    now: datetime,
    caps: _Caps,
    activated_extensions: list[dict[str, Any]] | None,
) -> Message:
    fields = _message_fields(message, task.context_id, activated_extensions)
    stored: Message = sql.made(Message, {"task_id": task.pk, "created_at": now, **fields})
    stored.task = task
    status = {"state": task.state, "message_id": None, "reason": "", "timestamp": now}
    event = {"seq": 1, "kind": EventKind.STATUS, "payload": payload, "created_at": now}
    params = sql.new_task_params(
        task,
        stored,
        status,
        event,
        max_active=caps.max_active,
        max_stored=caps.max_stored,
        max_anonymous=caps.max_anonymous,
    )
    [(message_pk, active, bytes_stored, anonymous)] = sql.execute(sql.NEW_TASK, params)
    if message_pk is None:  # the statement found the tenant at a cap and wrote nothing
        if caps.max_stored and bytes_stored is not None and bytes_stored >= caps.max_stored:
            raise _storage_used_up(caps)
        if caps.max_active and active >= caps.max_active:
            raise _too_many_active(caps)
        raise _too_many_anonymous(caps)
    for instance in (task, stored):
        instance._state.adding = False
        instance._state.db = DEFAULT_DB_ALIAS
    stored.id = message_pk
    return stored


def _run_request(task: Task, now: datetime) -> None:
    """Ask for a fresh run of the agent: a new token that exactly one worker can claim, with
    its own allowance of re-runs should its worker be lost."""
    task.run_token = uuid.uuid4()
    task.run_requested_at = now
    task.run_claimed_at = None
    task.run_retries = 0


def task_push_configs_mark(*, task: Task, present: bool) -> None:
    """Record whether the task has push configs (the caller holds the task's row lock): each
    later write announces the flag to `hooks` subscribers, so tasks without push cost push
    nothing."""
    if task.has_push_configs != present:
        Task.objects.filter(pk=task.pk).update(has_push_configs=present)
        task.has_push_configs = present


def task_lock_for_caller(*, agent: Agent, principal: Principal, task_id: str) -> Task:
    """The caller's task by either of its ids (`selectors.caller_task_q`), locked for update
    (call inside a transaction); TaskNotFound if it does not exist or is not theirs."""
    where = caller_task_q(agent=agent, principal=principal, task_id=task_id)
    if where is None:
        raise TaskNotFound(f"task {task_id!r} not found")
    task = Task.objects.select_for_update().filter(where).first()
    if task is None:
        raise TaskNotFound(f"task {task_id!r} not found")
    return task


def task_cancel(
    *,
    agent: Agent,
    principal: Principal,
    task_id: str,
    reason: str = "canceled by the client",
    message: NewMessage | None = None,
    admit: Admit | None = None,
) -> Task:
    """Cancel at once in the store; a running executor notices on its next call or poll. The
    client's `message` that asked for it (AIP's cancel command) joins the task's history.
    `admit` is the contract's say on the acting dialect's cancel (protocols.contract)."""
    with transaction.atomic():
        task = task_lock_for_caller(agent=agent, principal=principal, task_id=task_id)
        if admit is not None:
            admit(task.dialect, task.state, str(task.client_task_id or task.id))
        if message is not None and task.state not in TERMINAL:
            _client_message_add(task, message)
        return _cancel_locked(task, reason)


def task_confirm(
    *,
    agent: Agent,
    principal: Principal,
    task_id: str,
    message: NewMessage | None = None,
    admit: Admit | None = None,
) -> Task:
    """The client accepts the products of a task that awaits its confirmation (AIP's complete):
    the task is completed. UnsupportedOperation in any other state. `admit` is the contract's
    say (protocols.contract)."""
    with transaction.atomic():
        task = task_lock_for_caller(agent=agent, principal=principal, task_id=task_id)
        if admit is not None:
            admit(task.dialect, task.state, str(task.client_task_id or task.id))
        if task.state != TaskState.AWAITING_COMPLETION:
            raise UnsupportedOperation(
                f"task {task.client_task_id or task.id} is {task.state}; only a task awaiting completion is completed"
            )
        if message is not None:
            _client_message_add(task, message)
        now = timezone.now()
        _set_status(task=task, state=TaskState.COMPLETED, message=None, at=now, reason="completed by the client")
        task.save()
        _after_commit(task)
        return task


def message_record(*, agent: Agent, principal: Principal, task_id: str, message: NewMessage) -> Task:
    """Keep a client's message in its task's history without changing the task (AIP's get is
    one of the task's messages, and shows in its messageHistory)."""
    with transaction.atomic():
        task = task_lock_for_caller(agent=agent, principal=principal, task_id=task_id)
        _client_message_add(task, message)
        task.save(update_fields=["message_count", "updated_at"])
        return task


def _client_message_add(task: Task, message: NewMessage) -> Message:
    """A client's message on a task its caller holds locked (the caller saves the task)."""
    if message.role != Role.USER:
        raise InvalidParams("message.role must be the user's role")
    try:
        validate_all(message.parts, where="message.parts")
    except PartError as exc:
        raise InvalidParams(str(exc)) from None
    task.message_count += 1
    return _message_store(task=task, message=message, context_id=task.context_id)


# What a task's client is told of an operator's cancel when the operator gave no reason (AIP
# shows a change's reason): who canceled stays in the admin's log, not with the client.
OPERATOR_CANCEL_REASON = "canceled by the agent's operator"


def task_cancel_as_operator(*, task_id: Any, reason: str = OPERATOR_CANCEL_REASON) -> Task:
    """An operator's cancel (the admin): the client's flow (`task_cancel`) on any task, not
    only the caller's: the agent notices on its next call, stream subscribers and push
    receivers hear the canceled status. TaskNotFound, or TaskNotCancelable once terminal."""
    pk = parse_task_id(str(task_id))
    with transaction.atomic():
        task = Task.objects.select_for_update().filter(pk=pk).first() if pk is not None else None
        if task is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return _cancel_locked(task, reason)


def _cancel_locked(task: Task, reason: str) -> Task:
    """Cancel a task whose row the caller holds locked, inside its transaction."""
    if task.state in TERMINAL:
        raise TaskNotCancelable(f"task {task.client_task_id or task.id} is already {task.state}")
    # A running executor sees the cancel itself; one that kept state on a task waiting for
    # input (or for its next run) hears of it in a worker (runner.forward_cancel).
    idle = task.state in INTERRUPTED or task.state == TaskState.SUBMITTED
    _set_status(task=task, state=TaskState.CANCELED, message=None, at=timezone.now(), reason=reason)
    task.save()
    _after_commit(task)
    if idle and task.executor_state:
        task_id = task.pk
        transaction.on_commit(lambda: dispatch.enqueue_forward_cancel(task_id=task_id))
    return task


# --- Tasks that wait on their client longer than it allowed ----------------------------

# The state a task waits in -> (its timeout's field, what it becomes then, and why).
_EXPIRY: dict[str, tuple[str, str, str]] = {
    TaskState.INPUT_REQUIRED: (
        "input_timeout",
        TaskState.CANCELED,
        "no input came within the awaitingInputTimeout of {ms} ms",
    ),
    TaskState.AWAITING_COMPLETION: (
        "completion_timeout",
        TaskState.COMPLETED,
        "the client did not confirm the products within the awaitingCompletionTimeout of {ms} ms",
    ),
}


def task_expire_awaiting(*, task_id: Any) -> str:
    """Close a task that has waited on its client longer than its timeout: canceled when it
    waited for input, completed when it waited for the client to confirm its products (AIP's
    state table, rows 11 and 15). Safe any number of times, early or late: "expired", "waiting"
    (not due yet), or "moved-on" (the task left that state, or has no such timeout)."""
    now = timezone.now()
    with transaction.atomic():
        task = Task.objects.select_for_update().filter(pk=task_id).first()
        if task is None or task.state not in _EXPIRY:
            return "moved-on"
        field, closed, why = _EXPIRY[task.state]
        timeout = getattr(task, field)
        if timeout is None:
            return "moved-on"
        if task.status_timestamp + timeout > now:
            return "waiting"
        reason = why.format(ms=int(timeout.total_seconds() * 1000))
        if closed == TaskState.CANCELED:
            _cancel_locked(task, reason)
        else:
            _set_status(task=task, state=closed, message=None, at=now, reason=reason)
            task.save()
            _after_commit(task)
    return "expired"


def awaiting_expire_due(*, limit: int = 500) -> int:
    """The sweeper's side of the timeouts: close every task that outstayed its wait (the job
    scheduled when it began to wait may have been lost). How many it closed."""
    now = timezone.now()
    due = (
        Task.objects.filter(
            Q(state=TaskState.INPUT_REQUIRED, input_timeout__isnull=False)
            | Q(state=TaskState.AWAITING_COMPLETION, completion_timeout__isnull=False)
        )
        .annotate(
            deadline=Case(
                When(state=TaskState.INPUT_REQUIRED, then=F("status_timestamp") + F("input_timeout")),
                default=F("status_timestamp") + F("completion_timeout"),
                output_field=DateTimeField(),
            )
        )
        .filter(deadline__lte=now)
        .values_list("pk", flat=True)[:limit]
    )
    return sum(task_expire_awaiting(task_id=pk) == "expired" for pk in due)


# --- Writes made on behalf of a running executor -------------------------------------


def run_claim(*, task_id: Any, run_token: Any) -> bool:
    """Compare-and-set: true for exactly one caller per run token, however often it is delivered.
    The claim names this process as the run's holder (tasks_app.holders)."""
    return bool(
        Task.objects.filter(pk=task_id, run_token=run_token, run_claimed_at__isnull=True)
        .exclude(state__in=TERMINAL)
        .update(run_claimed_at=timezone.now(), run_holder=holders.claiming())
    )


def run_start(*, task_id: Any, run_token: Any) -> RunInputs | None:
    """Claim a run (as `run_claim`) and load what its executor is given (as
    `selectors.run_inputs`); None when this caller did not get the run."""
    if sql.available():
        # One statement: the compare-and-set and the read of the agent and the history.
        rows = sql.execute(
            sql.RUN_START,
            {
                "task_id": task_id,
                "run_token": run_token,
                "now": timezone.now(),
                "holder": holders.claiming(),
                "terminal": _TERMINAL,
            },
        )
        if not rows:
            return None
        (
            pk,
            context_id,
            accepted,
            token,
            executor,
            agent_settings,
            history,
            sealed,
            state,
            declared,
            activated,
            dialect,
            input_timeout,
            completion_timeout,
            products_max_bytes,
            task_state,
            agent_name,
        ) = rows[0]
        return RunInputs(
            task_id=str(pk),
            context_id=context_id,
            executor=executor,
            agent_settings=sql.loads(agent_settings) or {},
            accepted_output_modes=sql.loads(accepted),
            run_token=token,
            history=sql.messages_from_json(history),
            agent_secret=_unsealed(sealed, task_id=pk),
            executor_state=sql.loads(state) or {},
            agent_extensions=sql.loads(declared) or [],
            activated_extensions=sql.loads(activated) or [],
            dialect=dialect,
            state=task_state,
            agent=agent_name,
            limits=TaskLimits(input_timeout, completion_timeout, products_max_bytes),
        )
    if not run_claim(task_id=task_id, run_token=run_token):
        return None
    loaded = run_inputs(task_id)
    if loaded is None:
        return None
    task, history, activated = loaded
    return RunInputs(
        task_id=str(task.pk),
        context_id=task.context_id,
        executor=task.agent.executor,
        agent_settings=task.agent.settings or {},
        accepted_output_modes=task.accepted_output_modes,
        run_token=task.run_token or run_token,
        history=history,
        agent_secret=_unsealed(task.agent.secret_sealed, task_id=task.pk),
        executor_state=task.executor_state or {},
        agent_extensions=task.agent.extensions or [],
        activated_extensions=activated,
        dialect=task.dialect,
        state=task.state,
        agent=f"{task.agent.tenant.slug}/{task.agent.slug}",
        limits=TaskLimits(task.input_timeout, task.completion_timeout, task.products_max_bytes),
    )


def _unsealed(sealed: str, *, task_id: Any) -> str | None:
    try:
        return sealing.unseal(sealed)
    except sealing.Unsealable:
        log.error("task %s: its agent's secret cannot be decrypted with the configured keys", task_id)
        return None


def task_executor_state_save(*, task_id: Any, run_token: Any, state: dict[str, Any]) -> None:
    """Keep what the task's executor needs at its next run (AgentContext.state). Only the
    run that holds the task may: a superseded or closed run gets TaskClosed."""
    storable.check(state, where="executor state")
    saved = (
        Task.objects.filter(pk=task_id, run_token=run_token)
        .exclude(state__in=TERMINAL)
        .update(executor_state=state, updated_at=timezone.now())
    )
    if not saved:
        raise TaskClosed(f"task {task_id} is closed or has moved on to a newer run")


def _run_write_in_one_statement(
    statement: str, params: dict[str, Any], *, task_id: Any, run_token: Any, from_states: str
) -> _Written | None:
    """Run one of the single-statement writes of `sql`; the task as written, or None when the
    guard failed (or the ids are not UUIDs) and the caller must take the locked ORM path."""
    if not sql.available():
        return None
    pk = parse_task_id(task_id)
    token = parse_task_id(run_token) if run_token is not None else None
    if pk is None or (run_token is not None and token is None):
        return None
    rows = sql.execute(
        statement,
        {
            **params,
            "task_id": pk,
            "run_token": token,
            "from_states": from_states,
        },
    )
    return _Written(*rows[0]) if rows else None


def _locked_for_run(task_id: Any, run_token: Any) -> Task:
    task = Task.objects.select_for_update().filter(pk=task_id).first()
    if task is None:
        raise TaskClosed(f"task {task_id} no longer exists")
    if task.state in TERMINAL:
        raise TaskClosed(f"task {task_id} is {task.state}")
    if run_token is not None and str(task.run_token) != str(run_token):
        raise TaskClosed(f"task {task_id} has moved on to a newer run")
    return task


def _agent_message(task: Task, content: list[Part], metadata: dict[str, Any] | None = None) -> Message:
    """Store an agent message of a locked task (the caller saves the task's `message_count`)."""
    task.message_count += 1
    return Message.objects.create(
        task=task,
        message_id=str(uuid.uuid4()),
        context_id=task.context_id,
        role=Role.AGENT,
        parts=content,
        metadata=metadata or {},
    )


def task_transition(
    *,
    task_id: Any,
    state: str,
    parts: list[Part] | None = None,
    reason: str = "",
    failure: str = Failure.NONE,
    run_token: Any = None,
    artifact: NewArtifact | None = None,
    message_metadata: dict[str, Any] | None = None,
) -> None:
    """Move a task to `state`, with an optional agent message (`parts`, `message_metadata`) as
    the status message; with `artifact`, record that artifact first, in the same transaction
    (two events)."""
    now = timezone.now()
    message_metadata = message_metadata or {}
    storable.check(message_metadata, where="metadata")
    message = None
    if parts:
        message = MessageView(
            message_id=str(uuid.uuid4()),
            role=Role.AGENT,
            parts=parts,
            context_id="",
            task_id=str(parse_task_id(task_id) or task_id),
            metadata=message_metadata,
            extensions=[],
            reference_task_ids=[],
        ).as_payload()
    params = {
        "state": state,
        "now": now,
        "failure": failure,
        "reason": reason,
        "kind": EventKind.STATUS,
        "payload": sql.dumps(_status_payload(state, message, now, reason)),
    }
    if message:
        params.update(
            message_id=message["message_id"],
            role=Role.AGENT,
            parts=sql.dumps(parts),
            message_metadata=sql.dumps(message_metadata),
        )
    if artifact is not None:
        params.update(_artifact_params(artifact))
    written = _run_write_in_one_statement(
        sql.RUN_WRITES[True, bool(message), artifact.mode if artifact else None],
        params,
        task_id=task_id,
        run_token=run_token,
        from_states=_SOURCES.get(state, "{}"),
    )
    if written is not None:
        _after_commit(written)
        return
    # The guard failed: the locked path below says why (or writes, if the task moved on meanwhile).
    with transaction.atomic():
        task = _locked_for_run(task_id, run_token)
        if not can_transition(task.state, state):
            raise InvalidTransition(f"{task.state} -> {state} is not allowed")
        if artifact is not None:
            _artifact_store(task, artifact)
        stored = _agent_message(task, parts, message_metadata) if parts else None
        _set_status(task=task, state=state, message=stored, at=now, reason=reason)
        task.failure = failure
        fields = ["state", "status_message", "status_timestamp", "last_seq", "failure", "updated_at"]
        task.save(update_fields=[*fields, "message_count", "artifact_count"])
        _after_commit(task)


def task_reply(*, task_id: Any, parts: list[Part], run_token: Any = None, metadata: dict | None = None) -> None:
    """The agent answers with a bare Message. For a brand-new exchange the client sees only
    that Message; for a task the client already holds, it completes the task with it."""
    now = timezone.now()
    storable.check(metadata, where="metadata")
    with transaction.atomic():
        task = _locked_for_run(task_id, run_token)
        message = _agent_message(task, parts, metadata)
        # Once a task has had a follow-up the client holds it as a task: it stays one.
        task.reply_only = Message.objects.filter(task=task, role=Role.USER)[:2].count() == 1
        _event_append(task=task, kind=EventKind.MESSAGE, payload={"message": message_view(message).as_payload()})
        _set_status(task=task, state=TaskState.COMPLETED, message=message, at=now)
        fields = ["state", "status_message", "status_timestamp", "last_seq", "reply_only", "updated_at"]
        task.save(update_fields=[*fields, "message_count"])
        _after_commit(task)


def artifact_append(
    *,
    task_id: Any,
    parts: list[Part],
    artifact_id: str | None = None,
    name: str = "",
    description: str = "",
    metadata: dict[str, Any] | None = None,
    append: bool = False,
    last_chunk: bool = False,
    run_token: Any = None,
) -> str:
    """Add an artifact, or (append=True) add parts to an existing one. Returns its id."""
    artifact = NewArtifact(
        artifact_id=artifact_id or str(uuid.uuid4()),
        parts=parts,
        name=name,
        description=description,
        metadata=metadata or {},
        append=append,
        last_chunk=last_chunk,
    )
    written = _run_write_in_one_statement(
        sql.RUN_WRITES[False, False, artifact.mode],
        {"now": timezone.now(), **_artifact_params(artifact)},
        task_id=task_id,
        run_token=run_token,
        from_states=_OPEN,
    )
    if written is not None:
        _after_commit(written)
        return artifact.artifact_id
    with transaction.atomic():
        task = _locked_for_run(task_id, run_token)
        _artifact_store(task, artifact)
        task.save(update_fields=["last_seq", "artifact_count", "updated_at"])
        _after_commit(task)
    return artifact.artifact_id


def _artifact_payload(artifact: NewArtifact, name: str, description: str, index: int = 0) -> dict[str, Any]:
    """An artifact event's payload; `index` is the artifact's place among the task's (how many
    were made before it: A2A 0.1 numbers artifacts), which the one-statement write sets itself."""
    return {
        "artifact": {
            "artifact_id": artifact.artifact_id,
            "name": name,
            "description": description,
            "parts": artifact.parts,
            "metadata": artifact.metadata,
            "extensions": [],
        },
        "append": artifact.append,
        "last_chunk": artifact.last_chunk,
        "index": index,
    }


def _artifact_params(artifact: NewArtifact) -> dict[str, Any]:
    """The artifact's parameters of `sql.run_write` (which puts the stored name in the event)."""
    return {
        "artifact_id": artifact.artifact_id,
        "name": artifact.name,
        "description": artifact.description,
        "artifact_parts": sql.dumps(artifact.parts),
        "artifact_metadata": sql.dumps(artifact.metadata),
        "complete": artifact.last_chunk,
        "artifact_kind": EventKind.ARTIFACT,
        "artifact_payload": sql.dumps(_artifact_payload(artifact, artifact.name, artifact.description)),
    }


def _artifact_store(task: Task, artifact: NewArtifact) -> None:
    """Store an artifact (or a chunk) and its event on a locked task (the caller saves the task,
    `last_seq` and `artifact_count`)."""
    stored = None
    if artifact.append:
        stored = Artifact.objects.filter(task=task, artifact_id=artifact.artifact_id).first()
        if stored is not None:
            stored.parts = [*stored.parts, *artifact.parts]
            stored.complete = artifact.last_chunk
            stored.save(update_fields=["parts", "complete", "updated_at"])
    if stored is None:
        # A new one counts; one replaced (same id) does not.
        if artifact.append or not Artifact.objects.filter(task=task, artifact_id=artifact.artifact_id).exists():
            task.artifact_count += 1
        # A whole artifact (or the first chunk) is (re)placed in one INSERT … ON CONFLICT.
        stored = Artifact(
            task=task,
            artifact_id=artifact.artifact_id,
            name=artifact.name,
            description=artifact.description,
            parts=artifact.parts,
            metadata=artifact.metadata,
            complete=artifact.last_chunk,
        )
        Artifact.objects.bulk_create(
            [stored],
            update_conflicts=True,
            unique_fields=["task", "artifact_id"],
            update_fields=["name", "description", "parts", "metadata", "complete", "updated_at"],
        )
    # The event names the artifact as stored: a chunk keeps the name of its first chunk.
    if stored.pk is None:  # a bulk insert that did not hand the key back
        stored = Artifact.objects.get(task=task, artifact_id=artifact.artifact_id)
    index = Artifact.objects.filter(task=task, pk__lt=stored.pk).count()
    _event_append(
        task=task,
        kind=EventKind.ARTIFACT,
        payload=_artifact_payload(artifact, stored.name, stored.description, index),
    )


def run_fail(*, task_id: Any, reason: str, failure: str, run_token: Any = None, public: str = "") -> bool:
    """Fail a task because its run went wrong (time limit, crash, bad executor). Quiet if already over.
    `reason` is the admin's (the status change's); the client reads `public` (the failure's
    default text unless given) as the status message, written in the same statement."""
    parts = [P.text(public or public_text(failure))]
    try:
        task_transition(
            task_id=task_id, state=TaskState.FAILED, parts=parts, reason=reason, failure=failure, run_token=run_token
        )
    except TaskClosed:
        return False
    return True


def run_again(*, task_id: Any, run_token: Any, retries: int) -> uuid.UUID | None:
    """Give a run that could not finish (its worker lost, the store gone under it) a fresh
    token, if it is still the task's run and has re-runs left: the new token to enqueue, or
    None. A compare-and-set on the old token, so a run that finished meanwhile keeps its outcome."""
    fresh = uuid.uuid4()
    given = Task.objects.filter(
        pk=task_id,
        run_token=run_token,
        run_retries__lt=retries,
        state__in=[TaskState.SUBMITTED, TaskState.WORKING],
    ).update(
        run_token=fresh,
        run_claimed_at=None,
        run_holder=None,
        run_requested_at=timezone.now(),
        run_retries=F("run_retries") + 1,
    )
    return fresh if given else None


def sweep_stuck_work(
    *,
    unclaimed_after: int,
    lost_after: int,
    retries: int = 0,
    rerunnable: Collection[str] = (),
) -> tuple[list[tuple[Any, Any]], int]:
    """Find committed work no worker picked up, and runs whose worker vanished (claimed longer
    ago than the hard time limit allows). Returns the (task id, run token) pairs to enqueue and
    how many tasks were failed. A lost run of an executor in `rerunnable` is given a fresh
    token, up to `retries` times per run; after that, or for any other executor, the task
    fails `worker-lost`."""
    now = timezone.now()
    # Both through tasks_task_runs (the active tasks' runs: few), the claim checked on the
    # rows found.
    unclaimed = list(
        Task.objects.filter(
            state__in=ACTIVE_STATES,
            run_token__isnull=False,
            run_claimed_at__isnull=True,
            run_requested_at__lt=now - timedelta(seconds=unclaimed_after),
        ).values_list("id", "run_token")[:500]
    )
    # Touch run_requested_at so the next sweep does not enqueue them again right away.
    if unclaimed:
        Task.objects.filter(pk__in=[u[0] for u in unclaimed]).update(run_requested_at=now)
    lost = Task.objects.filter(
        state__in=ACTIVE_STATES,
        run_token__isnull=False,
        run_claimed_at__lt=now - timedelta(seconds=lost_after),
    ).values_list("id", "run_token", "run_retries", "agent__executor")[:500]
    failed = 0
    for task_id, token, tried, executor in lost:
        if executor in rerunnable and tried < retries:
            fresh = run_again(task_id=task_id, run_token=token, retries=retries)
            if fresh is not None:
                unclaimed.append((task_id, fresh))
            continue
        reason = "the worker running this task was lost" + (f" ({tried + 1} runs)" if tried else "")
        failed += run_fail(task_id=task_id, run_token=token, failure=Failure.WORKER_LOST, reason=reason)
    return unclaimed, failed


def task_redispatch(*, task_id: Any, time_limit: int) -> uuid.UUID | None:
    """An operator's re-dispatch of a task stuck past its time limit, as the sweeper
    (`sweep_stuck_work`) would: a run no worker claimed is sent again with its token; a run
    claimed longer than `time_limit` seconds ago (its worker lost) gets a fresh token by
    `run_again`, beyond the sweeper's allowance of re-runs. The token sent, or None when the
    task is not stuck (finished, waiting for input, or still within its time)."""
    now = timezone.now()
    pk = parse_task_id(str(task_id))
    if pk is None:
        return None
    row = (
        Task.objects.filter(pk=pk, state__in=ACTIVE_STATES, run_token__isnull=False)
        .values_list("run_token", "run_claimed_at", "run_requested_at", "run_retries")
        .first()
    )
    if row is None:
        return None
    token, claimed_at, requested_at, tried = row
    if claimed_at is None:
        # As the sweeper: touch run_requested_at (compare-and-set on the token, unclaimed).
        touched = Task.objects.filter(
            pk=pk, run_token=token, run_claimed_at__isnull=True, state__in=ACTIVE_STATES
        ).update(run_requested_at=now)
        fresh = token if touched else None
    elif claimed_at < now - timedelta(seconds=time_limit):
        fresh = run_again(task_id=pk, run_token=token, retries=tried + 1)
    else:
        return None
    if fresh is not None:
        transaction.on_commit(lambda: dispatch.enqueue_run(task_id=pk, run_token=fresh))
    return fresh


class TaskNotStuck(Exception):
    """An operator's re-dispatch that sent nothing: why, in a sentence."""


def task_redispatch_as_operator(*, task_id: Any, time_limit: int) -> uuid.UUID:
    """The admin's and the tenant API's re-dispatch (`task_redispatch`): the run token sent
    (enqueued once the caller's transaction commits); TaskNotFound, or TaskNotStuck saying why
    nothing was sent (a finished task, one waiting for its client, a run within its time)."""
    fresh = task_redispatch(task_id=task_id, time_limit=time_limit)
    if fresh is not None:
        return fresh
    pk = parse_task_id(str(task_id))
    task = Task.objects.filter(pk=pk).first() if pk is not None else None
    if task is None:
        raise TaskNotFound(f"task {task_id!r} not found")
    # Read after the refusal: a run that changed in between is explained as it is now.
    raise TaskNotStuck(redispatch_refusal(task, time_limit=time_limit) or "its run was sent again meanwhile")


# --- The tenants' stored bytes ----------------------------------------------------------


class _OctetLength(Func):
    """Bytes of a text (SQLite, the embedded mode, counts characters: near enough there)."""

    function = "OCTET_LENGTH"
    output_field = BigIntegerField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return super().as_sql(compiler, connection, function="LENGTH", **extra)


def _sizes(model: type[Model], size: Any, *, after: int, through: int) -> dict[int, int]:
    """Bytes of `model`'s rows with ids in (after, through], per tenant."""
    rows = (
        model.objects.filter(id__gt=after, id__lte=through)  # type: ignore[attr-defined]
        .values_list("task__tenant_id")
        .annotate(size=Sum(size))
        .order_by()
    )
    return {tenant_id: int(total or 0) for tenant_id, total in rows}


def _through(model: type[Model], *, after: int, settled: datetime) -> int:
    """The newest id of `model` old enough to count, from `after` on (`after` if none)."""
    newest = model.objects.filter(id__gt=after, created_at__lt=settled).aggregate(m=Max("id"))["m"]  # type: ignore[attr-defined]
    return int(newest) if newest is not None else after


_MESSAGE_BYTES = Coalesce(_OctetLength(Cast("parts", TextField())), 0) + Coalesce(
    _OctetLength(Cast("metadata", TextField())), 0
)
_EVENT_BYTES = Coalesce(_OctetLength(Cast("payload", TextField())), 0)


def stored_bytes_count(*, settle: float, recount_every: float) -> dict[str, int]:
    """Bring the tenants' stored-bytes counters up to date: add the bytes of the messages and
    task events written since the last count, or recount everything when a full recount is
    due (it also takes off what deleted tasks had stored). Safe to run twice at once: the
    second waits for the first's row lock and finds nothing new. Returns what it counted."""
    now = timezone.now()
    settled = now - timedelta(seconds=settle)
    with transaction.atomic():
        mark = StorageCount.objects.select_for_update().filter(pk=1).first()
        if mark is None:
            StorageCount.objects.bulk_create([StorageCount(pk=1)], ignore_conflicts=True)
            mark = StorageCount.objects.select_for_update().get(pk=1)
        full = mark.recounted_at is None or mark.recounted_at <= now - timedelta(seconds=recount_every)
        after_m, after_e = (0, 0) if full else (mark.messages_through, mark.events_through)
        through_m = _through(Message, after=after_m, settled=settled)
        through_e = _through(TaskEvent, after=after_e, settled=settled)
        totals = _sizes(Message, _MESSAGE_BYTES, after=after_m, through=through_m)
        for tenant_id, size in _sizes(TaskEvent, _EVENT_BYTES, after=after_e, through=through_e).items():
            totals[tenant_id] = totals.get(tenant_id, 0) + size
        if full:
            TenantStorage.objects.exclude(tenant_id__in=totals).update(stored_bytes=0)
        for tenant_id, size in totals.items():
            value = size if full else F("stored_bytes") + size
            if not TenantStorage.objects.filter(tenant_id=tenant_id).update(stored_bytes=value):
                TenantStorage.objects.create(tenant_id=tenant_id, stored_bytes=size)
        mark.messages_through, mark.events_through = through_m, through_e
        if full:
            mark.recounted_at = now
        mark.save()
    return {
        "full": int(full),
        "tenants": len(totals),
        "messages_through": through_m,
        "events_through": through_e,
    }
