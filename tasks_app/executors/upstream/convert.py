"""Parts and messages between this store's canonical form (tasks_app.parts) and the a2a-sdk's
protobuf types, which the SDK's client speaks for either A2A version it talks to."""

from __future__ import annotations

import base64
from typing import Any

from a2a.types import Artifact, Message, Part, Role
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict

from ... import parts as P
from ...domain import MessageView

_EXACT = 2**53  # a JSON number protobuf's double holds exactly


def _plain(value: Any) -> Any:
    """JSON from a protobuf Value, whose numbers are all doubles: 1.0 goes back to 1."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT:
        return int(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    return ParseDict(value, struct_pb2.Struct())


def to_upstream_part(part: P.Part) -> Part:
    kind = part["type"]
    if kind == "text":
        out = Part(text=part["text"])
    elif kind == "data":
        out = Part(data=ParseDict(part["data"], struct_pb2.Value()))
    elif "bytes" in part:
        out = Part(raw=base64.b64decode(part["bytes"]))
    else:
        out = Part(url=part["uri"])
    if kind == "file":
        out.media_type = part.get("media_type", "")
        out.filename = part.get("name", "")
    if part.get("metadata"):
        out.metadata.CopyFrom(_struct(part["metadata"]))
    return out


def from_upstream_part(part: Part) -> P.Part | None:
    """Ours, or None for a part that carries nothing (no content of any kind)."""
    kind = part.WhichOneof("content")
    if kind == "text":
        out = P.text(part.text)
    elif kind == "raw":
        out = P.file_bytes(part.raw, media_type=part.media_type, name=part.filename)
    elif kind == "url":
        out = P.file_uri(part.url, media_type=part.media_type, name=part.filename)
    elif kind == "data":
        out = P.data(_plain(MessageToDict(part.data)))
    else:
        return None
    if part.HasField("metadata"):
        out["metadata"] = _plain(MessageToDict(part.metadata))
    return out


def from_upstream_parts(parts: Any) -> list[P.Part]:
    return [p for p in map(from_upstream_part, parts) if p is not None]


def metadata_of(message: Message | Artifact) -> dict[str, Any]:
    return _plain(MessageToDict(message.metadata)) if message.HasField("metadata") else {}


def user_message(message: MessageView, *, message_id: str, task_id: str = "", context_id: str = "") -> Message:
    """Our client's message as the upstream gets it: its parts, metadata and extensions, under
    a message id of its own (ours were chosen by our clients, who may repeat each other's);
    with the upstream's task and context when it continues an upstream task. Reference task
    ids name our tasks, which the upstream does not know, so they stay here."""
    out = Message(
        message_id=message_id,
        role=Role.ROLE_USER,
        parts=[to_upstream_part(p) for p in message.parts],
        task_id=task_id,
        context_id=context_id,
        extensions=list(message.extensions or []),
    )
    if message.metadata:
        out.metadata.CopyFrom(_struct(message.metadata))
    return out
