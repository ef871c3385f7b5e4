"""Every read of the task store. Callers see only their own tasks, and a task they may not
see is indistinguishable from one that does not exist."""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import transaction
from django.db.models import Count, Min, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts import storable
from accounts.models import Agent
from accounts.selectors import Principal

from . import parts as P
from . import sql
from .domain import ArtifactView, LoggedMessage, LoggedStatus, MessageView, TaskRecord, TaskView, parse_task_id
from .errors import InvalidParams
from .lifecycle import TERMINAL, EventKind, Role, TaskState
from .models import ACTIVE_STATES, Artifact, Message, StatusChange, Task, TaskEvent


def caller_task_q(*, agent: Agent, principal: Principal, task_id: str) -> Q | None:
    """The caller's task named by `task_id`: the id its creator was shown, i.e. the server's
    UUID or, for a task whose client chose its id (A2A 0.1), the client's. Both are looked for
    (a client's id may itself read as a UUID), always within the agent and the caller's own
    tasks, so a client-chosen id never reaches another owner's or tenant's task. None when
    `task_id` can be neither."""
    if not isinstance(task_id, str) or not task_id or len(task_id) > storable.ID_LENGTH:
        return None
    pk = parse_task_id(task_id)
    named = Q(client_task_id=task_id) if pk is None else Q(pk=pk) | Q(client_task_id=task_id)
    return named & Q(agent=agent, owner=principal.name)


def task_for_caller(*, agent: Agent, principal: Principal, task_id: str) -> Task | None:
    where = caller_task_q(agent=agent, principal=principal, task_id=task_id)
    if where is None:
        return None
    return Task.objects.select_related("status_message").filter(where).first()


def task_key_for_caller(*, agent: Agent, principal: Principal, task_id: str) -> tuple[uuid.UUID, str] | None:
    """The primary key and the creating dialect of the caller's task named by `task_id` (as
    `caller_task_q`), in one indexed query: what a wake-up watch keys on, and what tells which
    dialect a request for that task speaks. None if there is no such task of theirs."""
    where = caller_task_q(agent=agent, principal=principal, task_id=task_id)
    if where is None:
        return None
    return Task.objects.filter(where).values_list("pk", "dialect").first()


def task_state_for_caller(*, agent: Agent, principal: Principal, task_id: str) -> tuple[str, str] | None:
    """The state and the creating dialect of the caller's task named by `task_id` (as
    `caller_task_q`), in one indexed query; None if there is no such task of theirs."""
    where = caller_task_q(agent=agent, principal=principal, task_id=task_id)
    if where is None:
        return None
    return Task.objects.filter(where).values_list("state", "dialect").first()


def status_reason(task_key: Any) -> str:
    """Why the server made the task's latest transition ("" when it did not make it)."""
    return StatusChange.objects.filter(task_id=task_key).order_by("-id").values_list("reason", flat=True).first() or ""


def display_id(task: Task) -> str:
    """The id a task is shown by in every dialect: the one its creator gave it."""
    return task.client_task_id or str(task.pk)


def _shown_as(messages: list[MessageView], task_id: str) -> list[MessageView]:
    """Messages naming their task by the id it is shown by (stored rows name its key)."""
    return [m if m.task_id == task_id else replace(m, task_id=task_id) for m in messages]


def message_view(m: Message) -> MessageView:
    return MessageView(
        message_id=m.message_id,
        role=m.role,
        parts=m.parts,
        context_id=m.context_id,
        task_id=str(m.task_id),
        metadata=m.metadata,
        extensions=m.extensions,
        reference_task_ids=m.reference_task_ids,
    )


def _artifact_view(a: Artifact) -> ArtifactView:
    return ArtifactView(
        artifact_id=a.artifact_id,
        name=a.name,
        description=a.description,
        parts=a.parts,
        metadata=a.metadata,
        extensions=a.extensions,
    )


def _view(task: Task, history: list[MessageView], artifacts: list[ArtifactView]) -> TaskView:
    status_message = message_view(task.status_message) if task.status_message is not None else None
    return _view_of(task, status_message, history, artifacts)


def _view_of(
    task: Task, status_message: MessageView | None, history: list[MessageView], artifacts: list[ArtifactView]
) -> TaskView:
    shown = display_id(task)
    if task.client_task_id:
        history = _shown_as(history, shown)
        status_message = _shown_as([status_message], shown)[0] if status_message is not None else None
    return TaskView(
        id=shown,
        context_id=task.context_id,
        state=task.state,
        status_message=status_message,
        status_timestamp=task.status_timestamp,
        history=history,
        artifacts=artifacts,
        metadata=task.metadata,
        reply_only=task.reply_only,
        key=str(task.pk),
        dialect=task.dialect,
    )


def _last(messages: list[MessageView], history_length: int | None) -> list[MessageView]:
    """The newest `history_length` messages (all of them for None, none for 0)."""
    if history_length is None:
        return messages
    return messages[-history_length:] if history_length else []


def _history_for(task_ids: Iterable[Any], history_length: int | None) -> dict[Any, list[MessageView]]:
    by_task: dict[Any, list[MessageView]] = defaultdict(list)
    if history_length == 0:
        return by_task
    for m in Message.objects.filter(task_id__in=list(task_ids)).order_by("id"):
        by_task[m.task_id].append(message_view(m))
    return {key: _last(messages, history_length) for key, messages in by_task.items()}


def _artifacts_for(task_ids: Iterable[Any]) -> dict[Any, list[ArtifactView]]:
    by_task: dict[Any, list[ArtifactView]] = defaultdict(list)
    for a in Artifact.objects.filter(task_id__in=list(task_ids)).order_by("id"):
        by_task[a.task_id].append(_artifact_view(a))
    return by_task


def task_view(
    task: Task,
    *,
    history_length: int | None = None,
    include_artifacts: bool = True,
    known_history: list[Message] | None = None,
) -> TaskView:
    """A task with its history and artifacts. `known_history` spares a query when the caller
    just wrote the only messages there are (a brand-new task)."""
    if known_history is not None:
        history = _last([message_view(m) for m in known_history], history_length)
    else:
        history = _history_for([task.pk], history_length).get(task.pk, [])
    artifacts = _artifacts_for([task.pk]).get(task.pk, []) if include_artifacts else []
    return _view(task, history, artifacts)


def task_with_view(
    task_id: Any,
    *,
    history_length: int | None = None,
    include_artifacts: bool = True,
    agent: Agent | None = None,
    principal: Principal | None = None,
) -> tuple[Task, TaskView] | None:
    """A task and its view in one read (None if it does not exist, or, given `agent` and
    `principal`, is not theirs). On Postgres it is one query that has the database build the
    history and the artifacts as JSON; on SQLite, the ORM reads of `task_view`."""
    for_caller = agent is not None and principal is not None
    pk = parse_task_id(str(task_id))
    if agent is not None and principal is not None:
        # The caller's task by either of its ids (`caller_task_q`).
        if caller_task_q(agent=agent, principal=principal, task_id=task_id) is None:
            return None
    elif pk is None:
        return None
    if not sql.available():
        task = (
            task_for_caller(agent=agent, principal=principal, task_id=task_id)
            if agent is not None and principal is not None
            else Task.objects.select_related("status_message").filter(pk=task_id).first()
        )
        if task is None:
            return None
        return task, task_view(task, history_length=history_length, include_artifacts=include_artifacts)
    params: dict[str, Any] = {"task_id": pk}  # Python reads forms of a UUID ("urn:uuid:…") Postgres does not
    if agent is not None and principal is not None:
        params.update(agent_id=agent.pk, owner=principal.name, client_id=task_id)
    statement = sql.TASK_READS[(for_caller, history_length != 0, include_artifacts)]
    rows = sql.execute(statement, params)
    if not rows:
        return None
    row = rows[0]
    task = sql.task_from_row(row)
    status_json, history_json, artifacts_json = row[-3:]
    status_message = MessageView(**sql.loads(status_json)) if status_json else None
    history = _last(sql.messages_from_json(history_json), history_length)
    return task, _view_of(task, status_message, history, sql.artifacts_from_json(artifacts_json))


def task_state(task_id: Any) -> str | None:
    """The state of a task (None if it is gone): the cheap read a waiter repeats."""
    return Task.objects.filter(pk=task_id).values_list("state", flat=True).first()


def task_executor(task_id: Any) -> str | None:
    """The name of the executor of the task's agent (None if the task is gone)."""
    return Task.objects.filter(pk=task_id).values_list("agent__executor", flat=True).first()


def _encode_cursor(ts: datetime, pk: Any) -> str:
    return base64.urlsafe_b64encode(f"{ts.isoformat()}|{pk}".encode()).decode().rstrip("=")


def _decode_cursor(token: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        ts, pk = raw.split("|", 1)
        return datetime.fromisoformat(ts), uuid.UUID(pk)
    except (ValueError, UnicodeDecodeError):
        raise InvalidParams("pageToken is not a token this server issued") from None


def task_list(
    *,
    agent: Agent,
    principal: Principal,
    context_id: str | None = None,
    state: str | None = None,
    status_after: datetime | None = None,
    page_size: int = 50,
    page_token: str = "",
    history_length: int | None = None,
    include_artifacts: bool = False,
) -> tuple[list[TaskView], str, int]:
    """One page of the caller's tasks, newest status first: (tasks, next token or "", total).
    A caller that may not list (anonymous: its tasks are reachable only by their ids) has none."""
    if page_token:
        _decode_cursor(page_token)  # a bad token is refused the same for every caller
    if not principal.can_list:
        return [], "", 0
    base = Task.objects.filter(agent=agent, owner=principal.name, reply_only=False)
    if context_id:
        base = base.filter(context_id=context_id)
    if state:
        base = base.filter(state=state)
    if status_after is not None:
        base = base.filter(status_timestamp__gt=status_after)
    total = base.count()
    page = base.select_related("status_message").order_by("-status_timestamp", "-id")
    if page_token:
        ts, pk = _decode_cursor(page_token)
        page = page.filter(Q(status_timestamp__lt=ts) | Q(status_timestamp=ts, id__lt=pk))
    tasks = list(page[: page_size + 1])
    has_more = len(tasks) > page_size
    tasks = tasks[:page_size]
    ids = [t.pk for t in tasks]
    history = _history_for(ids, history_length) if ids else {}
    artifacts = _artifacts_for(ids) if ids and include_artifacts else {}
    views = [_view(t, history.get(t.pk, []), artifacts.get(t.pk, [])) for t in tasks]
    next_token = _encode_cursor(tasks[-1].status_timestamp, tasks[-1].pk) if has_more else ""
    return views, next_token, total


def run_inputs(task_id: Any) -> tuple[Task, list[MessageView], list[dict[str, Any]]] | None:
    """What an executor is given: the task row (with its agent), its whole history, and the
    extensions the latest client message's request activated."""
    task = Task.objects.select_related("agent__tenant").filter(pk=task_id).first()
    if task is None:
        return None
    activated = (
        Message.objects.filter(task_id=task.pk, role=Role.USER)
        .order_by("-id")
        .values_list("activated_extensions", flat=True)
        .first()
    )
    return task, _history_for([task.pk], None).get(task.pk, []), activated or []


def canceled_task_inputs(task_id: Any) -> tuple[str, dict[str, Any], str, dict[str, Any], str] | None:
    """For a canceled task's executor (runner.forward_cancel): its name, the agent's settings,
    its sealed secret, what the executor kept on the task and the task's context; None unless
    canceled."""
    return (
        Task.objects.filter(pk=task_id, state=TaskState.CANCELED)
        .values_list("agent__executor", "agent__settings", "agent__secret_sealed", "executor_state", "context_id")
        .first()
    )


def _since(at: datetime | None) -> datetime | None:
    """The earliest time newer than `at` as readers are shown times (to the millisecond): a
    reader that sends back a time it was shown is not shown that entry again."""
    if at is None:
        return None
    return at.replace(microsecond=at.microsecond // 1000 * 1000) + timedelta(milliseconds=1)


def task_record(
    *,
    agent: Agent,
    principal: Principal,
    task_id: str,
    histories: bool,
    messages_since: datetime | None = None,
    statuses_since: datetime | None = None,
) -> TaskRecord | None:
    """The caller's task with (`histories`) its client's messages sent and its transitions
    made after the given times (None: all), oldest first; None if it is not theirs."""
    found = task_with_view(task_id, history_length=0, agent=agent, principal=principal)
    if found is None:
        return None
    task, view = found
    if not histories:
        return TaskRecord(view=view, messages=[], statuses=[], reason=status_reason(task.pk))
    transitions = StatusChange.objects.filter(task_id=task.pk).select_related("message").order_by("-id")
    messages = Message.objects.filter(task_id=task.pk, role=Role.USER).annotate(sent=Coalesce("sent_at", "created_at"))
    if (after := _since(messages_since)) is not None:
        messages = messages.filter(sent__gte=after)
    statuses = list(transitions)
    reason = statuses[0].reason if statuses else ""
    if (after := _since(statuses_since)) is not None:
        statuses = [s for s in statuses if s.timestamp >= after]
    return TaskRecord(
        view=view,
        messages=[
            LoggedMessage(
                message=message_view(m),
                command=m.command,
                command_params=m.command_params,
                sent_at=m.sent,
                sender_id=m.sender_id,
            )
            for m in messages.order_by("id")
        ],
        statuses=[
            LoggedStatus(
                state=s.state,
                timestamp=s.timestamp,
                message=message_view(s.message) if s.message is not None else None,
                reason=s.reason,
            )
            for s in reversed(statuses)
        ],
        reason=reason,
    )


def products_sizes(task_id: Any) -> dict[str, int]:
    """What each of the task's artifacts (AIP's products) holds, in bytes (parts.content_size)."""
    stored = Artifact.objects.filter(task_id=task_id).values_list("artifact_id", "parts")
    return {artifact_id: P.content_size(parts) for artifact_id, parts in stored}


def failure_reason(task: Task) -> str:
    """Why the server failed the task, as recorded with its last status change."""
    return status_reason(task.pk)


# The reason quotes what an endpoint answered; operators read this much of it.
FAILURE_REASON_SHOWN = 4000
# Executors write the status code of an endpoint's answer in their own words, before its body.
_ANSWERED = re.compile(r"answered HTTP (\d{3})\b")


@dataclass(frozen=True)
class FailureShown:
    """A failed task's failure, by who may read what (docs/api.md, "Failure detail by role")."""

    kind: str  # lifecycle.Failure
    status_code: int | None  # of the endpoint's answer, when one failed the task
    message: str  # what the task's client reads (its status message): no endpoint's words
    reason: str  # the server's full reason (bounded), quoting the endpoint: operators and up


def failure_shown(task: Task) -> FailureShown | None:
    """What failed `task` (None when it did not fail)."""
    if task.state != TaskState.FAILED:
        return None
    last = StatusChange.objects.filter(task_id=task.pk).select_related("message").order_by("-id").first()
    reason = last.reason if last is not None else ""
    message = P.plain_text(last.message.parts) if last is not None and last.message is not None else ""
    # Read from the client's text first: the reason's quoted body could say "answered HTTP" too.
    found = _ANSWERED.search(message) or _ANSWERED.search(reason)
    return FailureShown(
        kind=task.failure,
        status_code=int(found.group(1)) if found else None,
        message=message,
        reason=reason[:FAILURE_REASON_SHOWN],
    )


# --- the event log, as streams read it ---------------------------------------------------


class LoggedEvent(NamedTuple):
    seq: int
    kind: str
    payload: dict[str, Any]


def events_after(task_id: Any, seq: int, *, limit: int = 500) -> list[LoggedEvent]:
    """The task's events after `seq`, oldest first (served by the (task, seq) unique index)."""
    if sql.available():
        found = sql.execute(sql.EVENTS_AFTER, {"task_id": str(task_id), "seq": seq, "limit": limit})
        return [LoggedEvent(row_seq, kind, sql.loads(payload)) for row_seq, kind, payload in found]
    rows = (
        TaskEvent.objects.filter(task_id=task_id, seq__gt=seq)
        .order_by("seq")
        .values_list("seq", "kind", "payload")[:limit]
    )
    return [LoggedEvent(*row) for row in rows]


class StoredEvent(NamedTuple):
    pk: int
    seq: int
    kind: str
    payload: dict[str, Any]


def event_after(task_id: Any, seq: int, *, states: Iterable[str] = ()) -> StoredEvent | None:
    """The task's first event after `seq`, with its row's key (push's delivery log refers to
    it); with `states`, its first status event into one of them."""
    events = TaskEvent.objects.filter(task_id=task_id, seq__gt=seq)
    if states:
        events = events.filter(kind=EventKind.STATUS, payload__state__in=list(states))
    row = events.order_by("seq").values_list("pk", "seq", "kind", "payload").first()
    return None if row is None else StoredEvent(*row)


def task_snapshot(
    *, agent: Agent, principal: Principal, task_id: str, history_length: int | None = None
) -> tuple[TaskView, int] | None:
    """The caller's task and the log position it reflects, read as one consistent picture,
    so that a chunk cannot land both in the snapshot and after its seq.

    On Postgres `task_with_view` is one statement, which sees one snapshot of every table;
    on SQLite its reads share one transaction, which is a snapshot there.
    """
    with transaction.atomic() if not sql.available() else nullcontext():
        found = task_with_view(task_id, history_length=history_length, agent=agent, principal=principal)
    return None if found is None else (found[1], found[0].last_seq)


# --- the admin's task page and overview --------------------------------------------------
# Reads for members of tenants (tasks_app.admin_detail). `tenant_ids` scopes each to the tenants
# a member may see; None (a superuser) is every tenant.


def _in_tenants(queryset: Any, tenant_ids: list[int] | None, field: str = "tenant_id") -> Any:
    return queryset if tenant_ids is None else queryset.filter(**{f"{field}__in": tenant_ids})


class TimelineEvent(NamedTuple):
    seq: int
    kind: str
    payload: dict[str, Any]
    created_at: datetime


class Timeline(NamedTuple):
    """One page of a task's timeline: its events (seq order) and the user messages that came
    with them, each list in order; `page`/`pages` of `per_page` events."""

    events: list[TimelineEvent]
    messages: list[Message]
    page: int
    pages: int


def task_timeline(task: Task, *, page: int = 1, per_page: int = 200) -> Timeline:
    """A page of the task's event log and the user messages of that stretch: two queries
    whatever the page holds. Events are paged by seq (dense from 1 to `last_seq`, so no count);
    agent messages are in their events already (a status message, a reply), user messages are
    not: each goes with the page of the first event at or after it."""
    pages = max(1, -(-task.last_seq // per_page))
    page = min(max(1, page), pages)
    low, high = (page - 1) * per_page + 1, page * per_page
    # The (task, seq) unique index; the event before the page gives its messages' lower bound.
    rows = list(
        TaskEvent.objects.filter(task_id=task.pk, seq__gte=low - 1, seq__lte=high)
        .order_by("seq")
        .values_list("seq", "kind", "payload", "created_at")
    )
    events = [TimelineEvent(*row) for row in rows if row[0] >= low]
    before = rows[0][3] if rows and rows[0][0] < low else None
    messages = Message.objects.filter(task_id=task.pk, role=Role.USER)  # tasks_message_history: the task's rows
    if before is not None:
        messages = messages.filter(created_at__gt=before)
    if page < pages and events:
        messages = messages.filter(created_at__lte=events[-1].created_at)
    return Timeline(events=events, messages=list(messages.order_by("id")), page=page, pages=pages)


class RelatedTask(NamedTuple):
    pk: uuid.UUID
    state: str
    status_timestamp: datetime
    same_context: bool
    referenced: bool


def task_related(task: Task, *, tenant_ids: list[int] | None, limit: int = 100) -> list[RelatedTask]:
    """The other tasks of the task's context (its agent's and owner's: tasks_task_list_ctx) and
    the tasks its messages refer to (Message.reference_task_ids), of the given tenants only:
    two queries. A referenced id that is not a task the member may see is left out."""
    referenced: set[uuid.UUID] = set()
    for ids in Message.objects.filter(task_id=task.pk).values_list("reference_task_ids", flat=True):
        for value in ids if isinstance(ids, list) else []:
            pk = parse_task_id(value) if isinstance(value, str) else None
            if pk is not None and pk != task.pk:
                referenced.add(pk)
    same_context = Q(agent_id=task.agent_id, owner=task.owner, context_id=task.context_id)
    rows = (
        _in_tenants(Task.objects.filter(same_context | Q(pk__in=sorted(referenced))), tenant_ids)
        .exclude(pk=task.pk)
        .order_by("-status_timestamp")
        .values_list("pk", "state", "status_timestamp", "agent_id", "owner", "context_id")[:limit]
    )
    return [
        RelatedTask(
            pk=pk,
            state=state,
            status_timestamp=ts,
            same_context=(agent_id, owner, context_id) == (task.agent_id, task.owner, task.context_id),
            referenced=pk in referenced,
        )
        for pk, state, ts, agent_id, owner, context_id in rows
    ]


def _parts_of_payload(kind: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    if kind == "artifact":
        return list((payload.get("artifact") or {}).get("parts") or [])
    message = payload.get("message") or {}
    return list(message.get("parts") or [])


def task_part(task: Task, *, source: str, ref: int, index: int) -> dict[str, Any] | None:
    """One stored part of the task: of its event `ref` (by seq) or its message `ref` (by id)."""
    if source == "event":
        row = TaskEvent.objects.filter(task_id=task.pk, seq=ref).values_list("kind", "payload").first()
        parts = _parts_of_payload(*row) if row else []
    elif source == "message":
        found = Message.objects.filter(task_id=task.pk, pk=ref).values_list("parts", flat=True).first()
        parts = found if isinstance(found, list) else []
    else:
        return None
    return parts[index] if 0 <= index < len(parts) and isinstance(parts[index], dict) else None


# A media type sent as a download's Content-Type only when it is this plain (no parameters,
# nothing a header could be split on); else application/octet-stream.
_MEDIA_TYPE = re.compile(r"^[\w.+-]+/[\w.+-]+$")


@dataclass(frozen=True)
class StoredFile:
    """A file part's stored bytes, as the admin and the tenant API serve them (an attachment)."""

    content: bytes
    media_type: str  # safe as a Content-Type: the part's own if plain, else application/octet-stream
    name: str  # the part's name, or one made of where it is stored


def task_file(task: Task, *, source: str, ref: int, index: int) -> StoredFile | None:
    """The bytes of the task's file part `index` of its event `ref` (by seq, `source` "event")
    or its message `ref` (by id, "message"); None for what is not a file part with valid bytes."""
    part = task_part(task, source=source, ref=ref, index=index)
    if part is None or part.get("type") != "file" or not isinstance(part.get("bytes"), str):
        return None
    try:
        raw = base64.b64decode(part["bytes"], validate=True)
    except (binascii.Error, ValueError):
        return None
    media_type = str(part.get("media_type") or "")
    name = str(part.get("name") or "") or f"task-{task.pk}-{source}-{ref}-{index}"
    return StoredFile(raw, media_type if _MEDIA_TYPE.match(media_type) else "application/octet-stream", name)


def redispatch_refusal(task: Task, *, time_limit: int, now: datetime | None = None) -> str | None:
    """Why an operator's re-dispatch of `task` would send nothing, in a sentence; None when
    its run is stuck (no worker claimed it, or one claimed it more than `time_limit` seconds
    ago) and would be sent again (services.task_redispatch)."""
    if task.state in TERMINAL:
        return f"the task is {task.state}: it has no run to send"
    if task.state not in ACTIVE_STATES:
        return f"the task is {task.state}, waiting for its client: it has no run to send"
    if task.run_token is None:
        return f"the task is {task.state} with no run to send"
    if task.run_claimed_at is None:
        return None
    elapsed = ((now or timezone.now()) - task.run_claimed_at).total_seconds()
    if elapsed > time_limit:
        return None
    return (
        f"a worker claimed its run {int(elapsed)} s ago, within the agents' time limit ({time_limit} s): "
        "it may still be running"
    )


def task_events_all(task: Task) -> list[TimelineEvent]:
    """Every event of the task, in seq order (an export)."""
    rows = TaskEvent.objects.filter(task_id=task.pk).order_by("seq").values_list("seq", "kind", "payload", "created_at")
    return [TimelineEvent(*row) for row in rows]


class Overview(NamedTuple):
    by_state: list[tuple[str, int, int]]  # (state, last hour, last day)
    busiest: list[tuple[Agent, int]]  # (agent, tasks whose status changed in the last hour)
    stuck_claimed: list[tuple[uuid.UUID, str, datetime]]  # (task, state, claimed at)
    stuck_unclaimed: list[tuple[uuid.UUID, str, datetime]]  # (task, state, requested at)


def tasks_overview(
    *, tenant_ids: list[int] | None, now: datetime, time_limit: int, unclaimed_after: int, limit: int = 50
) -> Overview:
    """What the admin's overview shows of tasks, each read on an index (never a scan of the
    table): five queries, however many tasks there are."""
    hour, day = now - timedelta(hours=1), now - timedelta(days=1)
    # tasks_task_recent (-status_timestamp, -id INCLUDE tenant, state, agent): an index-only range
    # scan over the last day's status changes, grouped by state.
    counts = (
        _in_tenants(Task.objects.filter(status_timestamp__gte=day), tenant_ids)
        .values("state")
        .annotate(day=Count("*"), hour=Count("status_timestamp", filter=Q(status_timestamp__gte=hour)))
        .order_by()
    )
    by_state = sorted((row["state"], row["hour"], row["day"]) for row in counts)
    # tasks_task_recent again, over the last hour, grouped by agent; then the agents by pk.
    busiest_rows = list(
        _in_tenants(Task.objects.filter(status_timestamp__gte=hour), tenant_ids)
        .values("agent_id")
        .annotate(n=Count("*"))
        .order_by("-n", "agent_id")[:10]
    )
    agents = Agent.objects.select_related("tenant").in_bulk([row["agent_id"] for row in busiest_rows])
    busiest = [(agents[row["agent_id"]], row["n"]) for row in busiest_rows if row["agent_id"] in agents]
    # tasks_task_runs (partial: the active tasks' runs, few): the claimed runs older than the limit.
    claimed = (
        _in_tenants(
            Task.objects.filter(
                state__in=[TaskState.SUBMITTED, TaskState.WORKING],
                run_token__isnull=False,
                run_claimed_at__lt=now - timedelta(seconds=time_limit),
            ),
            tenant_ids,
        )
        .order_by("run_claimed_at")
        .values_list("pk", "state", "run_claimed_at")[:limit]
    )
    # tasks_task_runs again: work no worker took.
    unclaimed = (
        _in_tenants(
            Task.objects.filter(
                run_token__isnull=False,
                run_claimed_at__isnull=True,
                run_requested_at__lt=now - timedelta(seconds=unclaimed_after),
                state__in=[TaskState.SUBMITTED, TaskState.WORKING],
            ),
            tenant_ids,
        )
        .order_by("run_requested_at")
        .values_list("pk", "state", "run_requested_at")[:limit]
    )
    return Overview(by_state=by_state, busiest=busiest, stuck_claimed=list(claimed), stuck_unclaimed=list(unclaimed))


class Queue(NamedTuple):
    """Runs asked for and not yet taken by a worker: how many, and since when the oldest."""

    depth: int
    oldest_requested_at: datetime | None


def run_queue() -> Queue:
    """The run queue as the store sees it (the partial index tasks_task_runs: the active
    tasks' runs, small)."""
    found = Task.objects.filter(
        state__in=[TaskState.SUBMITTED, TaskState.WORKING], run_token__isnull=False, run_claimed_at__isnull=True
    ).aggregate(depth=Count("pk"), oldest=Min("run_requested_at"))
    return Queue(found["depth"], found["oldest"])


def task_counts_by_state() -> dict[str, int]:
    """Every task, counted by state (one index scan of tasks_task_state_recent)."""
    return dict(Task.objects.values_list("state").annotate(n=Count("pk")).values_list("state", "n"))
