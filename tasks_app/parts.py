"""Parts in one canonical form, whatever the dialect that carried them.

    {"type": "text", "text": str}
    {"type": "file", "bytes": <base64 str>, "media_type"?: str, "name"?: str}
    {"type": "file", "uri": str, "media_type"?: str, "name"?: str}
    {"type": "data", "data": <any JSON>}

Any part may also carry "metadata": {...}. Dialect codecs translate to and from this form;
`validate` is the one place that decides what a well-formed part is (and, through
`storable.check`, that the store can hold it).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from accounts.storable import Refused, check

Part = dict[str, Any]


class PartError(Refused):
    """A part that is not well formed; the message says which and why."""


def text(value: str) -> Part:
    return {"type": "text", "text": value}


def file_bytes(raw: bytes, *, media_type: str = "", name: str = "") -> Part:
    part: Part = {"type": "file", "bytes": base64.b64encode(raw).decode()}
    if media_type:
        part["media_type"] = media_type
    if name:
        part["name"] = name
    return part


def file_uri(uri: str, *, media_type: str = "", name: str = "") -> Part:
    part: Part = {"type": "file", "uri": uri}
    if media_type:
        part["media_type"] = media_type
    if name:
        part["name"] = name
    return part


def data(value: Any) -> Part:
    return {"type": "data", "data": value}


def coerce(content: str | list[Part] | None) -> list[Part]:
    """What an executor passes (a string or parts) as validated canonical parts."""
    if content is None:
        return []
    return validate_all([text(content)] if isinstance(content, str) else content)


def validate_all(parts: Any, *, where: str = "parts") -> list[Part]:
    if not isinstance(parts, list):
        raise PartError(f"{where} must be a list")
    return [validate(p, where=f"{where}[{i}]") for i, p in enumerate(parts)]


def validate(part: Any, *, where: str = "part") -> Part:
    if not isinstance(part, dict):
        raise PartError(f"{where} must be an object")
    check(part, where=where)
    kind = part.get("type")
    metadata = part.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise PartError(f"{where}.metadata must be an object")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise PartError(f"{where}.text must be a string")
    elif kind == "file":
        has_bytes, has_uri = "bytes" in part, "uri" in part
        if has_bytes == has_uri:
            raise PartError(f"{where} must have exactly one of bytes or uri")
        if has_bytes:
            if not isinstance(part["bytes"], str):
                raise PartError(f"{where}.bytes must be a base64 string")
            try:
                base64.b64decode(part["bytes"], validate=True)
            except (binascii.Error, ValueError):
                raise PartError(f"{where}.bytes is not valid base64") from None
        elif not isinstance(part["uri"], str) or not part["uri"]:
            raise PartError(f"{where}.uri must be a non-empty string")
        for key in ("media_type", "name"):
            if key in part and not isinstance(part[key], str):
                raise PartError(f"{where}.{key} must be a string")
    elif kind == "data":
        if "data" not in part:
            raise PartError(f"{where}.data is missing")
    else:
        raise PartError(f"{where} has unknown type {kind!r}")
    return part


def plain_text(parts: list[Part]) -> str:
    """The text parts joined by newlines: what simple agents read."""
    return "\n".join(p["text"] for p in parts if p.get("type") == "text")


def content_size(parts: list[Part]) -> int:
    """What parts hold, in bytes: a text's UTF-8, a file's decoded bytes (or its URI), and
    data as compact JSON. What a client's limit on a task's products counts (maxProductsBytes)."""
    size = 0
    for part in parts:
        kind = part.get("type")
        if kind == "text":
            size += len(part["text"].encode())
        elif kind == "file" and "bytes" in part:
            encoded = part["bytes"]
            size += len(encoded) * 3 // 4 - encoded[-2:].count("=")
        elif kind == "file":
            size += len(str(part.get("uri", "")).encode())
        else:
            size += len(orjson.dumps(part.get("data")))
    return size
