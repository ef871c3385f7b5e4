"""A2A 1.0 wire shapes <-> the domain. Pure functions: no database, no I/O.

ProtoJSON: camelCase members, enums by SCREAMING_SNAKE name (integers accepted too, as
ProtoJSON parsers must), timestamps RFC 3339 in UTC with milliseconds, bytes in base64.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from accounts import storable
from push.domain import PushConfigInput, PushConfigView
from tasks_app import parts as P
from tasks_app.domain import ArtifactView, MessageView, NewMessage
from tasks_app.errors import InvalidParams
from tasks_app.lifecycle import EventKind, Role, TaskState

from ..params import get, is_base64, opt_obj, opt_str, opt_str_list, required_str
from ..shapes import Shapes

_STATE_TO_WIRE = {
    TaskState.SUBMITTED: "TASK_STATE_SUBMITTED",
    TaskState.WORKING: "TASK_STATE_WORKING",
    TaskState.INPUT_REQUIRED: "TASK_STATE_INPUT_REQUIRED",
    TaskState.AUTH_REQUIRED: "TASK_STATE_AUTH_REQUIRED",
    # AIP's awaiting-completion has no A2A state; the nearest is "the client must act".
    TaskState.AWAITING_COMPLETION: "TASK_STATE_INPUT_REQUIRED",
    TaskState.COMPLETED: "TASK_STATE_COMPLETED",
    TaskState.CANCELED: "TASK_STATE_CANCELED",
    TaskState.FAILED: "TASK_STATE_FAILED",
    TaskState.REJECTED: "TASK_STATE_REJECTED",
}
_WIRE_TO_STATE = {v: k for k, v in _STATE_TO_WIRE.items() if k != TaskState.AWAITING_COMPLETION}
_STATE_NUMBERS = {
    1: "submitted",
    2: "working",
    3: "completed",
    4: "failed",
    5: "canceled",
    6: "input-required",
    7: "rejected",
    8: "auth-required",
}
_ROLES = {"ROLE_USER": Role.USER, "ROLE_AGENT": Role.AGENT, 1: Role.USER, 2: Role.AGENT}
_ROLE_TO_WIRE = {Role.USER: "ROLE_USER", Role.AGENT: "ROLE_AGENT"}


def parse_timestamp(value: Any, where: str) -> datetime:
    if not isinstance(value, str):
        raise InvalidParams(f"{where} must be an RFC 3339 timestamp string")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidParams(f"{where} is not an RFC 3339 timestamp: {storable.brief(value)}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def state_to_wire(state: str) -> str:
    return _STATE_TO_WIRE[TaskState(state)]


def parse_state(value: Any, where: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value in _STATE_NUMBERS:
        return _STATE_NUMBERS[value]
    if isinstance(value, str) and value in _WIRE_TO_STATE:
        return _WIRE_TO_STATE[value]
    raise InvalidParams(f"{where} must be a TaskState such as TASK_STATE_WORKING, got {storable.brief(value)}")


# --- parts -----------------------------------------------------------------------------


def decode_part(obj: Any, where: str) -> P.Part:
    if not isinstance(obj, dict):
        raise InvalidParams(f"{where} must be an object")
    present = [k for k in ("text", "raw", "url", "data") if k in obj]
    if len(present) != 1:
        raise InvalidParams(f"{where} must have exactly one of text, raw, url or data")
    kind = present[0]
    if kind == "text":
        if not isinstance(obj["text"], str):
            raise InvalidParams(f"{where}.text must be a string")
        part: P.Part = {"type": "text", "text": obj["text"]}
    elif kind == "data":
        part = {"type": "data", "data": obj["data"]}
    else:
        value = obj[kind]
        if not isinstance(value, str):
            raise InvalidParams(f"{where}.{kind} must be a string")
        if kind == "raw":
            if not is_base64(value):
                raise InvalidParams(f"{where}.raw must be base64")
            part = {"type": "file", "bytes": value}
        else:
            if not value:
                raise InvalidParams(f"{where}.url must not be empty")
            part = {"type": "file", "uri": value}
    media_type = opt_str(obj, "mediaType", where)
    filename = opt_str(obj, "filename", where)
    if media_type:
        part["media_type"] = media_type
    if filename:
        part["name"] = filename
    metadata = opt_obj(obj, "metadata", where)
    if metadata:
        part["metadata"] = metadata
    return part


def encode_part(part: P.Part) -> dict[str, Any]:
    kind = part["type"]
    if kind == "text":
        out: dict[str, Any] = {"text": part["text"]}
    elif kind == "data":
        out = {"data": part["data"]}
    elif "bytes" in part:
        out = {"raw": part["bytes"]}
    else:
        out = {"url": part["uri"]}
    if part.get("media_type"):
        out["mediaType"] = part["media_type"]
    if part.get("name"):
        out["filename"] = part["name"]
    if part.get("metadata"):
        out["metadata"] = part["metadata"]
    return out


# --- messages, tasks, artifacts ---------------------------------------------------------


def decode_message(obj: Any, where: str = "params.message") -> NewMessage:
    if not isinstance(obj, dict):
        raise InvalidParams(f"{where} must be an object")
    message_id = required_str(obj, "messageId", where, max_length=storable.ID_LENGTH)
    role = obj.get("role")
    role = _ROLES.get(role) if isinstance(role, (str, int)) and not isinstance(role, bool) else None
    if role is None:
        raise InvalidParams(f"{where}.role must be ROLE_USER or ROLE_AGENT")
    raw_parts = get(obj, "parts")
    if not isinstance(raw_parts, list) or not raw_parts:
        raise InvalidParams(f"{where}.parts must be a non-empty list")
    return NewMessage(
        message_id=message_id,
        role=role,
        parts=[decode_part(p, f"{where}.parts[{i}]") for i, p in enumerate(raw_parts)],
        metadata=opt_obj(obj, "metadata", where),
        extensions=opt_str_list(obj, "extensions", where),
        reference_task_ids=opt_str_list(obj, "referenceTaskIds", where),
        context_id=opt_str(obj, "contextId", where, max_length=storable.ID_LENGTH) or None,
        task_id=opt_str(obj, "taskId", where, max_length=storable.ID_LENGTH) or None,
    )


SHAPES = Shapes(part=encode_part, role=lambda role: _ROLE_TO_WIRE[Role(role)], state=state_to_wire, kinds=False)
encode_message = SHAPES.message
encode_bare_message = SHAPES.bare_message
encode_artifact = SHAPES.artifact
encode_status = SHAPES.status
encode_task = SHAPES.task


def encode_event(task_id: str, context_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A TaskEvent as the StreamResponse a stream or a push notification carries."""
    if kind == EventKind.STATUS:
        return {"statusUpdate": {"taskId": task_id, "contextId": context_id, "status": SHAPES.status_of(payload)}}
    if kind == EventKind.ARTIFACT:
        artifact = payload["artifact"]
        return {
            "artifactUpdate": {
                "taskId": task_id,
                "contextId": context_id,
                "artifact": encode_artifact(ArtifactView(**artifact)),
                "append": bool(payload.get("append")),
                "lastChunk": bool(payload.get("last_chunk")),
            }
        }
    if kind == EventKind.MESSAGE:
        return {"message": encode_message(MessageView.from_payload(payload["message"]))}
    raise ValueError(f"unknown event kind {kind!r}")


# --- push notification configs ----------------------------------------------------------


def decode_push_config(obj: Any, where: str) -> PushConfigInput:
    """A TaskPushNotificationConfig (its taskId, where present, is the caller's business)."""
    if not isinstance(obj, dict):
        raise InvalidParams(f"{where} must be an object")
    url = required_str(obj, "url", where, max_length=storable.URL_LENGTH)
    auth = opt_obj(obj, "authentication", where)
    scheme = opt_str(auth, "scheme", f"{where}.authentication", max_length=storable.SCHEME_LENGTH) or ""
    if auth and not scheme:
        raise InvalidParams(f"{where}.authentication.scheme is required, e.g. Bearer")
    return PushConfigInput(
        url=url,
        config_id=opt_str(obj, "id", where, max_length=storable.ID_LENGTH) or "",
        token=opt_str(obj, "token", where) or "",
        auth_scheme=scheme,
        auth_credentials=opt_str(auth, "credentials", f"{where}.authentication") or "",
    )


def encode_push_config(c: PushConfigView) -> dict[str, Any]:
    out: dict[str, Any] = {"id": c.config_id, "taskId": c.task_id, "url": c.url}
    if c.token:
        out["token"] = c.token
    if c.auth_scheme:
        out["authentication"] = {
            "scheme": c.auth_scheme,
            **({"credentials": c.auth_credentials} if c.auth_credentials else {}),
        }
    return out
