"""How each dialect writes a stored event, for what sends events with no request to answer:
push notifications. Each dialect (in `protocols`, above the store) registers its encoder from
its app's `ready`; the sender looks it up by the task's own dialect, so a task created by an
A2A 0.3 client is pushed in 0.3. A dialect whose notifications are not its events (A2A 0.3
POSTs the task itself) registers a push encoder too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# (task id, context id, event kind, event payload in domain form) -> the JSON to send
EventEncoder = Callable[[str, str, str, dict[str, Any]], dict[str, Any]]

_encoders: dict[str, EventEncoder] = {}


def register(dialect: str, encoder: EventEncoder) -> None:
    _encoders[dialect] = encoder


def encode_event(dialect: str, task_id: str, context_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The event as the task's dialect sends it; LookupError for a dialect that registered none."""
    try:
        encoder = _encoders[dialect]
    except KeyError:
        raise LookupError(f"no event encoder for the dialect {dialect!r}") from None
    return encoder(task_id, context_id, kind, payload)


_push_encoders: dict[str, EventEncoder] = {}


def register_push(dialect: str, encoder: EventEncoder) -> None:
    _push_encoders[dialect] = encoder


@dataclass(frozen=True)
class PushHeaders:
    """How a dialect's push notifications are labelled: the body's media type, and the header
    that carries the token the client registered with its config."""

    content_type: str = "application/a2a+json"
    token_header: str = "X-A2A-Notification-Token"  # the name a2a-python receivers read


_push_headers: dict[str, PushHeaders] = {}


def register_push_headers(dialect: str, headers: PushHeaders) -> None:
    _push_headers[dialect] = headers


def push_headers(dialect: str) -> PushHeaders:
    return _push_headers.get(dialect) or PushHeaders()


def encode_push(
    dialect: str, task_id: str, context_id: str, kind: str, payload: dict[str, Any], *, key: str
) -> dict[str, Any]:
    """The body of the push notification of this event: the dialect's push encoder's (given
    the task's `key`: it reads the task, which shows its own id), else the event as the dialect
    writes it (given the id the task is shown by); LookupError for a dialect that registered
    neither."""
    encoder = _push_encoders.get(dialect)
    if encoder is None:
        return encode_event(dialect, task_id, context_id, kind, payload)
    return encoder(key, context_id, kind, payload)


# (the task as selectors.task_view reads it) -> the JSON its dialect returns for it (GetTask)
TaskEncoder = Callable[[Any], dict[str, Any]]

_task_encoders: dict[str, TaskEncoder] = {}


def register_task(dialect: str, encoder: TaskEncoder) -> None:
    _task_encoders[dialect] = encoder


def encode_task(dialect: str, view: Any) -> dict[str, Any]:
    """The task as its dialect returns it; LookupError for a dialect that registered none
    (the admin then shows it as the dialect's events encode it)."""
    try:
        encoder = _task_encoders[dialect]
    except KeyError:
        raise LookupError(f"no task encoder for the dialect {dialect!r}") from None
    return encoder(view)
