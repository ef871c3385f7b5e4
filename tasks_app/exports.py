"""A task as a JSON document: its dialect's own encoding of it, and every event of its log with
that encoding and the stored payload. The admin's task page shows the encoding; its export, one
task's button and the task list's bulk action alike, downloads the whole document."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from . import encoders, selectors
from .errors import TaskNotFound
from .lifecycle import EventKind
from .models import Task


def stamp(value: datetime | None) -> str:
    """To the millisecond, with the timezone."""
    if value is None:
        return ""
    return timezone.localtime(value).isoformat(timespec="milliseconds")


def dialect_encoding(task: Task) -> tuple[Any, str]:
    """The task (with its whole history and artifacts) as its dialect returns it, and what the
    shown JSON is. A dialect that registered no task encoder: the task's parts as its events
    encode them; one that registered nothing: the store's own form. TaskNotFound if it is gone."""
    found = selectors.task_with_view(task.pk)
    if found is None:
        raise TaskNotFound(f"task {task.pk} not found")
    view = found[1]
    try:
        return encoders.encode_task(task.dialect, view), f"as {task.get_dialect_display()} returns it"
    except LookupError:
        pass
    task_id, context_id = str(task.pk), task.context_id
    status = {
        "state": view.state,
        "timestamp": view.status_timestamp.isoformat(),
        "message": view.status_message.as_payload() if view.status_message else None,
    }
    try:
        return {
            "status": encoders.encode_event(task.dialect, task_id, context_id, EventKind.STATUS, status),
            "artifacts": [
                encoders.encode_event(
                    task.dialect,
                    task_id,
                    context_id,
                    EventKind.ARTIFACT,
                    {"artifact": a.as_payload(), "append": False, "last_chunk": True},
                )
                for a in view.artifacts
            ],
            "history": [
                encoders.encode_event(task.dialect, task_id, context_id, EventKind.MESSAGE, {"message": m.as_payload()})
                for m in view.history
            ],
        }, f"its status, artifacts and history as {task.get_dialect_display()} encodes them in its events"
    except (LookupError, ValueError, TypeError):  # no encoder, or a payload it cannot read
        return {
            "status": status,
            "artifacts": [a.as_payload() for a in view.artifacts],
            "history": [m.as_payload() for m in view.history],
            "metadata": view.metadata,
        }, "the store's own form (its dialect registered no encoder)"


def _encoded_event(task: Task, kind: str, payload: dict[str, Any]) -> Any:
    try:
        return encoders.encode_event(task.dialect, str(task.pk), task.context_id, kind, payload)
    except (LookupError, KeyError, ValueError, TypeError):
        return None


def task_export(task: Task) -> dict[str, Any]:
    """The whole task: its dialect's encoding and every event (seq, kind, time, that dialect's
    encoding of it, the stored payload). TaskNotFound if it is gone."""
    encoded, encoded_as = dialect_encoding(task)
    return {
        "dialect": task.dialect,
        "encoding": encoded_as,
        "exported_at": stamp(timezone.now()),
        "task": encoded,
        "events": [
            {
                "seq": e.seq,
                "kind": e.kind,
                "created_at": stamp(e.created_at),
                "encoded": _encoded_event(task, e.kind, e.payload),
                "payload": e.payload,
            }
            for e in selectors.task_events_all(task)
        ],
    }
