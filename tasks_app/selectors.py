"""Every read of the task store. Callers see only their own tasks, and a task they may not
see is indistinguishable from one that does not exist."""

from __future__ import annotations

import base64
import uuid
from collections import defaultdict
from collections.abc import Iterable
from contextlib import nullcontext
from datetime import datetime
from typing import Any, NamedTuple

from django.db import transaction
from django.db.models import Q

from accounts.models import Agent
from accounts.selectors import Principal

from . import sql
from .domain import ArtifactView, MessageView, TaskView, parse_task_id
from .errors import InvalidParams
from .models import Artifact, Message, StatusChange, Task, TaskEvent


def task_for_caller(*, agent: Agent, principal: Principal, task_id: str) -> Task | None:
    if parse_task_id(task_id) is None:
        return None
    return Task.objects.select_related("status_message").filter(pk=task_id, agent=agent, owner=principal.name).first()


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
    return TaskView(
        id=str(task.id),
        context_id=task.context_id,
        state=task.state,
        status_message=message_view(task.status_message) if task.status_message is not None else None,
        status_timestamp=task.status_timestamp,
        history=history,
        artifacts=artifacts,
        metadata=task.metadata,
        reply_only=task.reply_only,
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
    pk = parse_task_id(task_id)
    if pk is None:
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
    for_caller = agent is not None and principal is not None
    if agent is not None and principal is not None:
        params.update(agent_id=agent.pk, owner=principal.name)
    statement = sql.TASK_READS[(for_caller, history_length != 0, include_artifacts)]
    rows = sql.execute(statement, params)
    if not rows:
        return None
    row = rows[0]
    task = sql.task_from_row(row)
    status_json, history_json, artifacts_json = row[-3:]
    status_message = MessageView(**sql.loads(status_json)) if status_json else None
    history = _last(sql.messages_from_json(history_json), history_length)
    return task, TaskView(
        id=str(task.id),
        context_id=task.context_id,
        state=task.state,
        status_message=status_message,
        status_timestamp=task.status_timestamp,
        history=history,
        artifacts=sql.artifacts_from_json(artifacts_json),
        metadata=task.metadata,
        reply_only=task.reply_only,
    )


def task_state(task_id: Any) -> str | None:
    """The state of a task (None if it is gone): the cheap read a waiter repeats."""
    return Task.objects.filter(pk=task_id).values_list("state", flat=True).first()


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


def run_inputs(task_id: Any) -> tuple[Task, list[MessageView]] | None:
    """What an executor is given: the task row (with its agent) and its whole history."""
    task = Task.objects.select_related("agent").filter(pk=task_id).first()
    if task is None:
        return None
    return task, _history_for([task.pk], None).get(task.pk, [])


def failure_reason(task: Task) -> str:
    """Why the server failed the task, as recorded with its last status change."""
    return StatusChange.objects.filter(task=task).order_by("-id").values_list("reason", flat=True).first() or ""


# --- the event log, as streams read it ---------------------------------------------------


class LoggedEvent(NamedTuple):
    seq: int
    kind: str
    payload: dict[str, Any]


def events_after(task_id: Any, seq: int, *, limit: int = 500) -> list[LoggedEvent]:
    """The task's events after `seq`, oldest first (served by the (task, seq) unique index)."""
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


def event_after(task_id: Any, seq: int) -> StoredEvent | None:
    """The task's first event after `seq`, with its row's key (push's delivery log refers to it)."""
    row = (
        TaskEvent.objects.filter(task_id=task_id, seq__gt=seq)
        .order_by("seq")
        .values_list("pk", "seq", "kind", "payload")
        .first()
    )
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
