"""A2A 0.1 wire shapes <-> the domain. Pure functions: no database, no I/O.

The 0.1 documents (the first public A2A draft): camelCase members, parts told apart by
`type` (`text`, `file` with `file: {name, mimeType, bytes | uri}`, `data`), a task's group
is its `sessionId` (our context id), states in lowercase, artifacts with `index`, `append`
and `lastChunk`, stream events `{id, status, final}` and `{id, artifact}`. Messages carry
no id of their own: the server gives each stored message one.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from accounts import storable
from push.domain import PushConfigInput, PushConfigView
from tasks_app import parts as P
from tasks_app.domain import ArtifactView, MessageView, NewMessage, TaskView
from tasks_app.errors import DomainError, InvalidParams
from tasks_app.lifecycle import SETTLED, EventKind, Role, TaskState

from ..params import file_part, opt_obj, opt_str, required_str, typed_part

# 0.1 knows seven states; ours that it does not are shown as the nearest of its own, the real
# one in the task's metadata under STATE_KEY (docs/dialects.md).
_STATE_TO_WIRE = {
    TaskState.SUBMITTED: "submitted",
    TaskState.WORKING: "working",
    TaskState.INPUT_REQUIRED: "input-required",
    # Both ask the client to act before the task goes on.
    TaskState.AUTH_REQUIRED: "input-required",
    TaskState.AWAITING_COMPLETION: "input-required",
    TaskState.COMPLETED: "completed",
    TaskState.CANCELED: "canceled",
    TaskState.FAILED: "failed",
    # The agent declined the task: it did not get done, which 0.1 calls failed.
    TaskState.REJECTED: "failed",
}
STATE_KEY = "agentserverState"
# The one config a 0.1 task has (tasks/pushNotification/set replaces it): under this id.
PUSH_CONFIG_ID = "a2a-0.1"

_ROLE_TO_WIRE = {Role.USER: "user", Role.AGENT: "agent"}


def state_to_wire(state: str) -> str:
    return _STATE_TO_WIRE.get(TaskState(state), "unknown")


def timestamp(value: datetime) -> str:
    """ISO 8601, as the 0.1 documents write it, in UTC."""
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- parts -----------------------------------------------------------------------------


def _file(obj: dict[str, Any], where: str) -> P.Part:
    file = obj.get("file")
    if not isinstance(file, dict):
        raise InvalidParams(f"{where}.file must be an object with bytes or uri")
    # The 0.1 document's own examples name the content `data` ("file": {"mimeType": …,
    # "data": "<base64>"}); its schema says `bytes`. Either is read, never both.
    return file_part(file, f"{where}.file", bytes_keys=("bytes", "data"))


def decode_part(obj: Any, where: str) -> P.Part:
    return typed_part(obj, where, file=_file)


def encode_part(part: P.Part) -> dict[str, Any]:
    kind = part["type"]
    if kind == "text":
        out: dict[str, Any] = {"type": "text", "text": part["text"]}
    elif kind == "data":
        out = {"type": "data", "data": part["data"]}
    else:
        file: dict[str, Any] = {"bytes": part["bytes"]} if "bytes" in part else {"uri": part["uri"]}
        if part.get("media_type"):
            file["mimeType"] = part["media_type"]
        if part.get("name"):
            file["name"] = part["name"]
        out = {"type": "file", "file": file}
    if part.get("metadata"):
        out["metadata"] = part["metadata"]
    return out


# --- messages, tasks, artifacts ---------------------------------------------------------


def decode_message(obj: Any, where: str = "params.message") -> NewMessage:
    """A client's message. 0.1 messages have no id: the stored one gets a fresh UUID."""
    if not isinstance(obj, dict):
        raise InvalidParams(f"{where} is required and must be an object")
    if obj.get("role") != "user":
        raise InvalidParams(f'{where}.role must be "user", got {storable.brief(obj.get("role"))}')
    raw_parts = obj.get("parts")
    if not isinstance(raw_parts, list) or not raw_parts:
        raise InvalidParams(f"{where}.parts is required and must be a non-empty list of parts")
    return NewMessage(
        message_id=str(uuid.uuid4()),
        role=Role.USER,
        parts=[decode_part(p, f"{where}.parts[{i}]") for i, p in enumerate(raw_parts)],
        metadata=opt_obj(obj, "metadata", where),
    )


def encode_message(m: MessageView) -> dict[str, Any]:
    out: dict[str, Any] = {"role": _ROLE_TO_WIRE[Role(m.role)], "parts": [encode_part(p) for p in m.parts]}
    if m.metadata:
        out["metadata"] = m.metadata
    return out


def encode_artifact(
    a: ArtifactView, *, index: int, append: bool | None = None, last_chunk: bool | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"parts": [encode_part(p) for p in a.parts], "index": index}
    if a.name:
        out["name"] = a.name
    if a.description:
        out["description"] = a.description
    if a.metadata:
        out["metadata"] = a.metadata
    if append is not None:
        out["append"] = append
    if last_chunk is not None:
        out["lastChunk"] = last_chunk
    return out


def encode_status(state: str, message: MessageView | None, at: datetime) -> dict[str, Any]:
    out: dict[str, Any] = {"state": state_to_wire(state), "timestamp": timestamp(at)}
    if message is not None:
        out["message"] = encode_message(message)
    return out


def encode_task(t: TaskView) -> dict[str, Any]:
    """A Task as 0.1 writes it: `metadata` always (the documents' answers carry `{}`)."""
    out: dict[str, Any] = {
        "id": t.id,
        "sessionId": t.context_id,
        "status": encode_status(t.state, t.status_message, t.status_timestamp),
    }
    if t.artifacts:
        out["artifacts"] = [encode_artifact(a, index=i) for i, a in enumerate(t.artifacts)]
    if t.history:
        out["history"] = [encode_message(m) for m in t.history]
    metadata = dict(t.metadata)
    if state_to_wire(t.state) != t.state:
        metadata[STATE_KEY] = t.state
    out["metadata"] = metadata
    return out


def status_event(task_id: str, state: str, message: MessageView | None, at: datetime) -> dict[str, Any]:
    """A TaskStatusUpdateEvent: `final` once the exchange waits on the client or is over."""
    return {"id": task_id, "status": encode_status(state, message, at), "final": state in SETTLED}


def encode_event(task_id: str, context_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A TaskEvent as a 0.1 stream or push notification carries it."""
    if kind == EventKind.STATUS:
        message = payload.get("message")
        return status_event(
            task_id,
            payload["state"],
            MessageView.from_payload(message) if message else None,
            datetime.fromisoformat(payload["timestamp"]),
        )
    if kind == EventKind.ARTIFACT:
        return {
            "id": task_id,
            "artifact": encode_artifact(
                ArtifactView(**payload["artifact"]),
                # The artifact's place among the task's (stored with the event); events
                # written before it was stored name none: the first.
                index=int(payload.get("index") or 0),
                append=bool(payload.get("append")),
                last_chunk=bool(payload.get("last_chunk")),
            ),
        }
    if kind == EventKind.MESSAGE:
        # 0.1 has no bare messages: the agent's answer is a status message, and the
        # completion that follows at once carries it too.
        message = MessageView.from_payload(payload["message"])
        return {"id": task_id, "status": {"state": "working", "message": encode_message(message)}, "final": False}
    raise ValueError(f"unknown event kind {kind!r}")


# --- push notification configs ----------------------------------------------------------


def decode_push_config(obj: Any, where: str) -> PushConfigInput:
    """A PushNotificationConfig: url, token, authentication {schemes, credentials}."""
    if not isinstance(obj, dict):
        raise InvalidParams(f"{where} must be an object with a url")
    url = required_str(obj, "url", where, max_length=storable.URL_LENGTH)
    auth = opt_obj(obj, "authentication", where)
    schemes = auth.get("schemes")
    if auth and (
        not isinstance(schemes, list) or len(schemes) != 1 or not isinstance(schemes[0], str) or not schemes[0]
    ):
        # The one scheme is the Authorization header's: a receiver is called one way.
        raise InvalidParams(f'{where}.authentication.schemes must name exactly one scheme, e.g. ["Bearer"]')
    scheme: str = schemes[0] if auth and isinstance(schemes, list) else ""
    if len(scheme) > storable.SCHEME_LENGTH:
        raise InvalidParams(f"{where}.authentication.schemes[0] is longer than {storable.SCHEME_LENGTH} characters")
    return PushConfigInput(
        url=url,
        config_id=PUSH_CONFIG_ID,
        token=opt_str(obj, "token", where) or "",
        auth_scheme=scheme,
        auth_credentials=opt_str(auth, "credentials", f"{where}.authentication") or "",
    )


def encode_push_config(c: PushConfigView) -> dict[str, Any]:
    out: dict[str, Any] = {"url": c.url}
    if c.token:
        out["token"] = c.token
    if c.auth_scheme:
        out["authentication"] = {
            "schemes": [c.auth_scheme],
            **({"credentials": c.auth_credentials} if c.auth_credentials else {}),
        }
    return out


def encode_task_push_config(c: PushConfigView) -> dict[str, Any]:
    """A TaskPushNotificationConfig: the task's id and its config."""
    return {"id": c.task_id, "pushNotificationConfig": encode_push_config(c)}


# --- errors ------------------------------------------------------------------------------

# The messages of the 0.1 document's error table (its section 错误处理), by code. An error
# of the dialect's own codes says the table's words, then what exactly went wrong.
SEED_MESSAGES = {
    -32700: "JSON解析错误",
    -32600: "无效请求",
    -32601: "方法未找到",
    -32602: "无效参数",
    -32603: "内部错误",
    -32001: "任务未找到",
    -32002: "任务不可取消",
    -32003: "不支持推送通知",
    -32004: "不支持的操作",
    -32005: "不兼容的内容类型",
}


# A2A codes of later versions, which 0.1 clients do not know (a required extension, a
# version, an invalid agent response, an extended card): Invalid Request, the reason in `data`
# (as A2A 0.3 answers those it lacks). The server's own codes (-32029, -32030) stay.
LATER_CODES = frozenset({-32006, -32007, -32008, -32009})


def encode_error(request_id: Any, exc: DomainError) -> bytes:
    """A JSON-RPC error as 0.1 has it: {code, message, data?}; `data` names the reason."""
    code = -32600 if exc.code in LATER_CODES else exc.code
    seed = SEED_MESSAGES.get(code)
    message = f"{seed}: {exc.message}" if seed else exc.message
    error: dict[str, Any] = {"code": code, "message": message}
    if exc.reason:
        error["data"] = {"reason": exc.reason, "detail": exc.message}
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})
