"""A2A 0.3 wire shapes <-> the domain. Pure functions: no database, no I/O.

Plain JSON (the 0.3.0 specification's JSON schema; the a2a-sdk's `a2a.compat.v0_3.types` are
the reference for names): camelCase members, a `kind` discriminator on every object that is
one of several (task, message, status-update, artifact-update; parts text, file, data),
lowercase kebab-case states, roles `user`/`agent`, file parts as a nested `file` object with
`bytes` (base64) or `uri`, `mimeType` and `name`.
"""

from __future__ import annotations

from typing import Any

from accounts import storable
from push.domain import PushConfigInput, PushConfigView
from tasks_app import parts as P
from tasks_app.domain import ArtifactView, MessageView, NewMessage
from tasks_app.errors import InvalidParams
from tasks_app.lifecycle import TERMINAL, EventKind, Role, TaskState

from ..params import file_part, get, opt_obj, opt_str, opt_str_list, required_str
from ..shapes import Shapes

_STATE_TO_WIRE = {
    TaskState.SUBMITTED: "submitted",
    TaskState.WORKING: "working",
    TaskState.INPUT_REQUIRED: "input-required",
    TaskState.AUTH_REQUIRED: "auth-required",
    # AIP's awaiting-completion has no A2A state; the nearest is "the client must act"
    # (its real state goes in the task's metadata, as 1.0 does it).
    TaskState.AWAITING_COMPLETION: "input-required",
    TaskState.COMPLETED: "completed",
    TaskState.CANCELED: "canceled",
    TaskState.FAILED: "failed",
    TaskState.REJECTED: "rejected",
}
_ROLES = {"user": Role.USER, "agent": Role.AGENT}
PART_KINDS = ("text", "file", "data")
# A data part whose value is not an object: 0.3's DataPart holds only objects, so the value
# travels as {"value": ...} with this flag in the part's metadata, as the a2a-sdk's 0.3
# compatibility layer writes and reads it (a2a.compat.v0_3.conversions).
DATA_PART_COMPAT = "data_part_compat"


def state_to_wire(state: str) -> str:
    return _STATE_TO_WIRE[TaskState(state)]


def _kind(obj: dict, where: str, expected: str) -> None:
    """0.3 objects name their kind; one that names another is the wrong object here. An absent
    kind is accepted, as the a2a-sdk's models default it."""
    kind = obj.get("kind")
    if kind is not None and kind != expected:
        raise InvalidParams(f'{where}.kind must be "{expected}", got {storable.brief(kind)}')


# --- parts -----------------------------------------------------------------------------


def _part_kind(obj: dict, where: str) -> str:
    kind = obj.get("kind")
    if kind is None:  # the a2a-sdk's models infer it from the one member present
        present = [k for k in PART_KINDS if k in obj]
        if len(present) != 1:
            raise InvalidParams(f"{where}.kind is required: text, file or data")
        return present[0]
    if kind not in PART_KINDS:
        raise InvalidParams(f"{where}.kind must be text, file or data, got {storable.brief(kind)}")
    return str(kind)


def decode_part(obj: Any, where: str) -> P.Part:
    if not isinstance(obj, dict):
        raise InvalidParams(f"{where} must be an object")
    kind = _part_kind(obj, where)
    metadata = opt_obj(obj, "metadata", where)
    if kind == "text":
        text = obj.get("text")
        if not isinstance(text, str):
            raise InvalidParams(f"{where}.text is required and must be a string")
        part: P.Part = {"type": "text", "text": text}
    elif kind == "data":
        data = obj.get("data")
        if not isinstance(data, dict):
            raise InvalidParams(f"{where}.data is required and must be an object")
        if metadata.get(DATA_PART_COMPAT) is True and "value" in data:
            metadata = {k: v for k, v in metadata.items() if k != DATA_PART_COMPAT}
            data = data["value"]
        part = {"type": "data", "data": data}
    else:
        file = obj.get("file")
        if not isinstance(file, dict):
            raise InvalidParams(f"{where}.file is required and must be an object with bytes or uri")
        part = file_part(file, f"{where}.file")
    if metadata:
        part["metadata"] = metadata
    return part


def encode_part(part: P.Part) -> dict[str, Any]:
    kind = part["type"]
    metadata = dict(part.get("metadata") or {})
    if kind == "text":
        out: dict[str, Any] = {"kind": "text", "text": part["text"]}
    elif kind == "data":
        data = part["data"]
        if not isinstance(data, dict):
            data = {"value": data}
            metadata[DATA_PART_COMPAT] = True
        out = {"kind": "data", "data": data}
    else:
        file: dict[str, Any] = {"bytes": part["bytes"]} if "bytes" in part else {"uri": part["uri"]}
        if part.get("media_type"):
            file["mimeType"] = part["media_type"]
        if part.get("name"):
            file["name"] = part["name"]
        out = {"kind": "file", "file": file}
    if metadata:
        out["metadata"] = metadata
    return out


# --- messages, tasks, artifacts ---------------------------------------------------------


def decode_message(obj: Any, where: str = "params.message") -> NewMessage:
    if not isinstance(obj, dict):
        raise InvalidParams(f"{where} must be an object")
    _kind(obj, where, "message")
    message_id = required_str(obj, "messageId", where, max_length=storable.ID_LENGTH)
    role = obj.get("role")
    role = _ROLES.get(role) if isinstance(role, str) else None
    if role is None:
        raise InvalidParams(f'{where}.role must be "user" or "agent"')
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


SHAPES = Shapes(part=encode_part, role=lambda role: Role(role).value, state=state_to_wire, kinds=True)
encode_message = SHAPES.message
encode_bare_message = SHAPES.bare_message
encode_artifact = SHAPES.artifact
encode_status = SHAPES.status
encode_task = SHAPES.task


def encode_stream_event(
    task_id: str, context_id: str, kind: str, payload: dict[str, Any], *, final: bool
) -> dict[str, Any]:
    """A TaskEvent as a 0.3 stream carries it; `final` marks the status event after which the
    stream ends."""
    if kind == EventKind.STATUS:
        status = SHAPES.status_of(payload)
        return {"kind": "status-update", "taskId": task_id, "contextId": context_id, "status": status, "final": final}
    if kind == EventKind.ARTIFACT:
        return {
            "kind": "artifact-update",
            "taskId": task_id,
            "contextId": context_id,
            "artifact": encode_artifact(ArtifactView(**payload["artifact"])),
            "append": bool(payload.get("append")),
            "lastChunk": bool(payload.get("last_chunk")),
        }
    if kind == EventKind.MESSAGE:
        return encode_message(MessageView.from_payload(payload["message"]))
    raise ValueError(f"unknown event kind {kind!r}")


def encode_event(task_id: str, context_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A TaskEvent on its own (the admin shows events so): a status event is final when its
    state is terminal, since nothing follows it then whoever listens."""
    final = kind == EventKind.STATUS and payload.get("state") in TERMINAL
    return encode_stream_event(task_id, context_id, kind, payload, final=final)


# --- push notification configs ----------------------------------------------------------


def decode_push_config(obj: Any, where: str, *, default_id: str = "") -> PushConfigInput:
    """A PushNotificationConfig. 0.3 names a list of schemes; the store keeps the one the
    Authorization header is sent with: the first (as the a2a-sdk's 0.3 conversion does)."""
    if not isinstance(obj, dict):
        raise InvalidParams(f"{where} must be an object")
    url = required_str(obj, "url", where, max_length=storable.URL_LENGTH)
    auth = opt_obj(obj, "authentication", where)
    scheme = ""
    if auth:
        schemes = opt_str_list(auth, "schemes", f"{where}.authentication")
        if not schemes or not schemes[0]:
            raise InvalidParams(f'{where}.authentication.schemes must name a scheme, e.g. ["Bearer"]')
        scheme = schemes[0]
        if len(scheme) > storable.SCHEME_LENGTH:
            raise InvalidParams(f"{where}.authentication.schemes[0] is longer than {storable.SCHEME_LENGTH} characters")
    return PushConfigInput(
        url=url,
        config_id=opt_str(obj, "id", where, max_length=storable.ID_LENGTH) or default_id,
        token=opt_str(obj, "token", where) or "",
        auth_scheme=scheme,
        auth_credentials=opt_str(auth, "credentials", f"{where}.authentication") or "",
    )


def encode_push_config(c: PushConfigView) -> dict[str, Any]:
    """A TaskPushNotificationConfig: the task's id and the config."""
    config: dict[str, Any] = {"id": c.config_id, "url": c.url}
    if c.token:
        config["token"] = c.token
    if c.auth_scheme:
        config["authentication"] = {
            "schemes": [c.auth_scheme],
            **({"credentials": c.auth_credentials} if c.auth_credentials else {}),
        }
    return {"taskId": c.task_id, "pushNotificationConfig": config}
