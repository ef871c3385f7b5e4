"""ACPs AIP v01.00 wire shapes <-> the domain. Pure functions: no database, no I/O.

AIP (seed 004): plain JSON, camelCase members; a `Message` from the Leader carries a
`command` (start, continue, cancel, complete, get, re-stream) with `commandParams`, its
`dataItems` told apart by `type` (text; file with uri or base64 bytes, mimeType, name; data);
a `Task` has `status {state, stateChangedAt, dataItems?}`, `products` (our artifacts),
`messageHistory`, `statusHistory` and `sessionId` (our context id). Times are ISO 8601 with
an offset, in AIP_TIME_ZONE (the seed's default is Beijing time).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import orjson
from django.conf import settings
from django.utils import timezone

from accounts import storable
from push.domain import PushConfigInput, PushConfigView
from tasks_app import parts as P
from tasks_app.domain import (
    ArtifactView,
    LoggedMessage,
    LoggedStatus,
    MessageView,
    NewMessage,
    TaskLimits,
    TaskRecord,
    TaskView,
)
from tasks_app.errors import (
    ContentTypeNotSupported,
    DomainError,
    GroupNotSupported,
    InvalidAgentResponse,
    InvalidParams,
    PushNotificationNotSupported,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
)
from tasks_app.lifecycle import EventKind, Role, TaskState

from ..params import file_part, get, opt_int, opt_obj, opt_str, required_str, typed_part

# AIP's eight states. Ours that it lacks are shown as the nearest: auth-required (an A2A
# agent's) is the client's move, as awaiting-input is.
_STATE_TO_WIRE = {
    TaskState.SUBMITTED: "accepted",
    TaskState.WORKING: "working",
    TaskState.INPUT_REQUIRED: "awaiting-input",
    TaskState.AUTH_REQUIRED: "awaiting-input",
    TaskState.AWAITING_COMPLETION: "awaiting-completion",
    TaskState.COMPLETED: "completed",
    TaskState.CANCELED: "canceled",
    TaskState.FAILED: "failed",
    TaskState.REJECTED: "rejected",
}
_WIRE_TO_STATE = {wire: state for state, wire in _STATE_TO_WIRE.items() if state != TaskState.AUTH_REQUIRED}

COMMANDS = ("start", "continue", "cancel", "complete", "get", "re-stream")
_ROLES = {Role.USER: "leader", Role.AGENT: "partner"}


def state_to_wire(state: str) -> str:
    return _STATE_TO_WIRE[TaskState(state)]


def parse_state(value: Any, where: str) -> str:
    """A TaskState as AIP writes it ("awaiting-input"), or as its enum's member names do
    ("AwaitingInput", the seed's own notifyOnStates example): the store's name."""
    if isinstance(value, str):
        kebab = "".join(f"-{c.lower()}" if c.isupper() else c for c in value).lstrip("-")
        found = _WIRE_TO_STATE.get(value.strip().lower()) or _WIRE_TO_STATE.get(kebab)
        if found is not None:
            return found
    raise InvalidParams(f"{where} must be one of {', '.join(_WIRE_TO_STATE)}, got {storable.brief(value)}")


# --- times -----------------------------------------------------------------------------


def time(value: datetime) -> str:
    """ISO 8601 with its offset, to the millisecond, in AIP_TIME_ZONE."""
    return value.astimezone(ZoneInfo(settings.AIP_TIME_ZONE)).isoformat(timespec="milliseconds")


def parse_time(value: Any, where: str) -> datetime:
    """An ISO 8601 date and time with an offset (or Z); one without is ambiguous."""
    if isinstance(value, str) and len(value) <= 64:
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:
                raise InvalidParams(f"{where} must carry a UTC offset (e.g. 2025-09-01T12:00:00+08:00)")
            return parsed
    raise InvalidParams(f"{where} must be an ISO 8601 date and time, e.g. 2025-09-01T12:00:00+08:00")


def _opt_time(obj: dict, key: str, where: str) -> datetime | None:
    value = obj.get(key)
    return None if value is None else parse_time(value, f"{where}.{key}")


# --- data items ------------------------------------------------------------------------


def decode_data_item(obj: Any, where: str) -> P.Part:
    return typed_part(obj, where, file=file_part)  # flat: a file's members are the item's own


def encode_data_item(part: P.Part) -> dict[str, Any]:
    kind = part["type"]
    if kind == "text":
        out: dict[str, Any] = {"type": "text", "text": part["text"]}
    elif kind == "file":
        out = {"type": "file"}
        if part.get("name"):
            out["name"] = part["name"]
        if part.get("media_type"):
            out["mimeType"] = part["media_type"]
        if "uri" in part:
            out["uri"] = part["uri"]
        else:
            out["bytes"] = part["bytes"]
    else:
        data = part["data"]
        # AIP's data items hold objects; another dialect's client may have stored any JSON.
        out = {"type": "data", "data": data if isinstance(data, dict) else {"value": data}}
    if part.get("metadata"):
        out["metadata"] = part["metadata"]
    return out


def _data_items(parts: list[P.Part]) -> list[dict[str, Any]]:
    return [encode_data_item(p) for p in parts]


# --- the Leader's message --------------------------------------------------------------


@dataclass(frozen=True)
class LeaderMessage:
    """A Leader's Message as a Partner receives it, checked."""

    id: str
    sent_at: datetime
    sender_id: str
    command: str
    command_params: dict[str, Any]
    data_items: list[P.Part]
    task_id: str
    session_id: str | None = None
    group_id: str | None = None
    mentions: list[str] = field(default_factory=list)

    def stored(self) -> NewMessage:
        """The message as the task's history keeps it (a new task's id is the caller's)."""
        metadata: dict[str, Any] = {}
        if self.group_id:
            metadata["groupId"] = self.group_id
        if self.mentions:
            metadata["mentions"] = self.mentions
        return NewMessage(
            message_id=self.id,
            role=Role.USER,
            parts=self.data_items,
            metadata=metadata,
            context_id=self.session_id,
            command=self.command,
            command_params=self.command_params or None,
            sent_at=self.sent_at,
            sender_id=self.sender_id,
        )

    def limits(self) -> TaskLimits:
        """What a start asks of the task (StartCommandParams, in milliseconds and bytes)."""
        where = "params.message.commandParams"
        params = self.command_params
        return TaskLimits(
            input_timeout=_ms(params, "awaitingInputTimeout", where),
            completion_timeout=_ms(params, "awaitingCompletionTimeout", where),
            products_max_bytes=opt_int(params, "maxProductsBytes", where, minimum=0, maximum=2**53),
        )

    def response_timeout(self) -> float | None:
        """How long the Leader waits for the answer to its start, in seconds (responseTimeout)."""
        value = opt_int(self.command_params, "responseTimeout", "params.message.commandParams", minimum=0)
        return None if value is None else value / 1000


def _ms(params: dict[str, Any], key: str, where: str) -> timedelta | None:
    value = opt_int(params, key, where, minimum=1, maximum=2**53)
    return None if value is None else timedelta(milliseconds=value)


def decode_message(obj: Any, where: str = "params.message") -> LeaderMessage:
    if not isinstance(obj, dict):
        raise InvalidParams(f"{where} is required and must be an AIP Message object")
    if obj.get("type") != "message":
        raise InvalidParams(f'{where}.type must be "message", got {storable.brief(obj.get("type"))}')
    role = obj.get("senderRole")
    if role != "leader":
        raise InvalidParams(
            f'{where}.senderRole must be "leader" (a Partner takes commands from its Leader), '
            f"got {storable.brief(role)}"
        )
    command = obj.get("command")
    if command not in COMMANDS:
        raise InvalidParams(f"{where}.command must be one of {', '.join(COMMANDS)}, got {storable.brief(command)}")
    raw_items = obj.get("dataItems")
    if raw_items is None and command not in ("start", "continue"):
        raw_items = []  # a bare command (get, cancel, complete) needs no data
    if not isinstance(raw_items, list):
        raise InvalidParams(f"{where}.dataItems is required and must be a list")
    if command == "start" and not raw_items:
        raise InvalidParams(f"{where}.dataItems must hold what the task is about: a start needs at least one item")
    mentions = obj.get("mentions")
    if mentions is not None and (not isinstance(mentions, list) or not all(isinstance(m, str) for m in mentions)):
        raise InvalidParams(f"{where}.mentions must be a list of AICs (strings)")
    return LeaderMessage(
        id=required_str(obj, "id", where, max_length=storable.ID_LENGTH),
        sent_at=parse_time(obj.get("sentAt"), f"{where}.sentAt"),
        sender_id=required_str(obj, "senderId", where, max_length=storable.ID_LENGTH),
        command=command,
        command_params=opt_obj(obj, "commandParams", where),
        data_items=[decode_data_item(item, f"{where}.dataItems[{i}]") for i, item in enumerate(raw_items)],
        task_id=required_str(obj, "taskId", where, max_length=storable.ID_LENGTH),
        session_id=opt_str(obj, "sessionId", where, max_length=storable.ID_LENGTH) or None,
        group_id=opt_str(obj, "groupId", where, max_length=storable.ID_LENGTH) or None,
        mentions=list(mentions or []),
    )


@dataclass(frozen=True)
class GetParams:
    messages_since: datetime | None
    statuses_since: datetime | None


def get_params(message: LeaderMessage) -> GetParams:
    where = "params.message.commandParams"
    return GetParams(
        messages_since=_opt_time(message.command_params, "lastMessageSentAt", where),
        statuses_since=_opt_time(message.command_params, "lastStateChangedAt", where),
    )


def notify_on_states(message: LeaderMessage) -> list[str]:
    """notification/start's states (none, null or empty: every change), in the store's names."""
    where = "params.message.commandParams.notifyOnStates"
    raw = message.command_params.get("notifyOnStates")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidParams(f"{where} must be a list of task states")
    return [parse_state(state, f"{where}[{i}]") for i, state in enumerate(raw)]


# --- the Task and its events -----------------------------------------------------------


def _status(state: str, at: datetime, message: MessageView | None, reason: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"state": state_to_wire(state), "stateChangedAt": time(at)}
    if message is not None and message.parts:
        out["dataItems"] = _data_items(message.parts)
    elif reason:
        # A change the server made (a timeout, products too large): the reason is its data.
        out["dataItems"] = [{"type": "text", "text": reason}]
    return out


def encode_product(a: ArtifactView) -> dict[str, Any]:
    out: dict[str, Any] = {"id": a.artifact_id}
    if a.name:
        out["name"] = a.name
    if a.description:
        out["description"] = a.description
    out["dataItems"] = _data_items(a.parts)
    return out


def encode_logged_message(m: LoggedMessage, task_id: str, session_id: str) -> dict[str, Any]:
    view = m.message
    out: dict[str, Any] = {
        "type": "message",
        "id": view.message_id,
        "sentAt": time(m.sent_at),
        "senderRole": _ROLES.get(Role(view.role), "leader"),
        "senderId": m.sender_id,
    }
    if view.metadata.get("mentions"):
        out["mentions"] = view.metadata["mentions"]
    if m.command:
        out["command"] = m.command
    # Parameters left null ("lastMessageSentAt": null) said nothing: not repeated.
    params = {k: v for k, v in (m.command_params or {}).items() if v is not None}
    if params:
        out["commandParams"] = params
    out["dataItems"] = _data_items(view.parts)
    out["taskId"] = task_id
    if view.metadata.get("groupId"):
        out["groupId"] = view.metadata["groupId"]
    out["sessionId"] = session_id
    return out


def _status_history(statuses: list[LoggedStatus]) -> list[dict[str, Any]]:
    shown = []
    for i, s in enumerate(statuses):
        following = statuses[i + 1] if i + 1 < len(statuses) else None
        if s.state == TaskState.SUBMITTED and following is not None and following.state == TaskState.REJECTED:
            # AIP's start gives accepted or rejected, never both: a task its agent declined on
            # sight was never accepted (the store's receipt of the start is not an acceptance).
            continue
        shown.append(_status(s.state, s.timestamp, s.message, s.reason))
    return shown


def encode_task(view: TaskView, *, record: TaskRecord | None = None, histories: bool = False) -> dict[str, Any]:
    """A Task: its status (with the reason of a change the server made as its data), its
    products and session; with `histories`, the record's messageHistory and statusHistory."""
    out: dict[str, Any] = {
        "type": "task",
        "id": view.id,
        "status": _status(
            view.state, view.status_timestamp, view.status_message, record.reason if record is not None else ""
        ),
        "products": [encode_product(a) for a in view.artifacts],
    }
    if histories and record is not None:
        out["messageHistory"] = [encode_logged_message(m, view.id, view.context_id) for m in record.messages]
        out["statusHistory"] = _status_history(record.statuses)
    out["sessionId"] = view.context_id
    return out


def status_of(payload: dict[str, Any]) -> dict[str, Any]:
    """The TaskStatus a stored status event records."""
    message = payload.get("message")
    return _status(
        payload["state"],
        datetime.fromisoformat(payload["timestamp"]),
        MessageView.from_payload(message) if message else None,
        payload.get("reason", ""),
    )


def encode_event(task_id: str, context_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A stored event as a stream's eventData: a status-update, a product-chunk, or a Message."""
    if kind == EventKind.STATUS:
        return {"type": "status-update", "taskId": task_id, "status": status_of(payload), "sessionId": context_id}
    if kind == EventKind.ARTIFACT:
        return {
            "type": "product-chunk",
            "taskId": task_id,
            "product": encode_product(ArtifactView(**payload["artifact"])),
            "append": bool(payload.get("append")),
            "lastChunk": bool(payload.get("last_chunk")),
            "sessionId": context_id,
        }
    if kind == EventKind.MESSAGE:
        view = MessageView.from_payload(payload["message"])
        return {
            "type": "message",
            "id": view.message_id,
            "sentAt": time(timezone.now()),
            "senderRole": _ROLES.get(Role(view.role), "partner"),
            "senderId": "",
            "dataItems": _data_items(view.parts),
            "taskId": task_id,
            "sessionId": context_id,
        }
    raise ValueError(f"unknown event kind {kind!r}")


# --- notification configs ----------------------------------------------------------------


def decode_notification_config(params: dict[str, Any], where: str = "params") -> tuple[str, PushConfigInput]:
    """NotificationConfig: (taskId, the config). An id names a config to update; none (or
    null) asks for a new one, whose id the Partner chooses."""
    task_id = required_str(params, "taskId", where, max_length=storable.ID_LENGTH)
    url = required_str(params, "url", where, max_length=storable.URL_LENGTH)
    token = get(params, "token")
    if not isinstance(token, str):
        raise InvalidParams(f"{where}.token is required: the receiver checks notifications by it")
    return task_id, PushConfigInput(
        url=url,
        config_id=opt_str(params, "id", where, max_length=storable.ID_LENGTH) or str(uuid.uuid4()),
        token=token,
    )


def encode_notification_config(c: PushConfigView) -> dict[str, Any]:
    return {"id": c.config_id, "url": c.url, "token": c.token, "taskId": c.task_id}


def config_ids(params: dict[str, Any], where: str = "params") -> tuple[str, str | None]:
    """NotificationIdRequest: (taskId, notificationConfigId or None for all of the task's)."""
    task_id = required_str(params, "taskId", where, max_length=storable.ID_LENGTH)
    return task_id, opt_str(params, "notificationConfigId", where, max_length=storable.ID_LENGTH) or None


# --- errors ------------------------------------------------------------------------------

# The seed's error table (5.2): our errors by class -> AIP's code and message.
_ERRORS: dict[type[DomainError], tuple[int, str]] = {
    TaskNotFound: (-32001, "Task not found"),
    TaskNotCancelable: (-32002, "Task cannot be canceled"),
    PushNotificationNotSupported: (-32003, "Notification is not supported"),
    UnsupportedOperation: (-32004, "This operation is not supported"),
    ContentTypeNotSupported: (-32005, "Incompatible content types"),
    InvalidAgentResponse: (-32006, "Invalid agent response type"),
    GroupNotSupported: (-32007, "Group communication is not supported"),
    InvalidParams: (-32602, "Invalid method parameters"),
}
# JSON-RPC's own codes (the seed's table 5.2 (1)) and AIP's authentication codes.
STANDARD_MESSAGES = {
    -32700: "Invalid JSON payload",
    -32600: "Invalid JSON-RPC Request",
    -32601: "Method not found",
    -32602: "Invalid method parameters",
    -32603: "Internal server error",
    -32008: "Authentication required",
    -32009: "Authorization failed",
    -32010: "Invalid access token",
}


def error_object(code: int, message: str, details: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """{code, message, data}: the seed's message for the code, what exactly went wrong in
    data.details, and the facts (taskId, …) beside it."""
    return {"code": code, "message": message, "data": {**(data or {}), "details": details}}


def encode_error(request_id: Any, exc: DomainError) -> bytes:
    """A domain error as AIP writes it. An error AIP has no code for (the tenant's limits,
    a required extension) keeps the server's code, with the reason in data. One that is its
    own error object (`verbatim`) goes out as it is."""
    if exc.verbatim:
        whole = {"code": exc.code, "message": exc.message, "data": exc.data}
        return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": whole})
    code, message = _ERRORS.get(type(exc), (exc.code, STANDARD_MESSAGES.get(exc.code, exc.default_message)))
    data = dict(exc.data)
    if exc.reason and type(exc) not in _ERRORS:
        data["reason"] = exc.reason
    error = error_object(code, message, exc.message, data)
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})
