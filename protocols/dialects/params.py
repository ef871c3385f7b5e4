"""Reading a request's params, for every dialect: members by their JSON name (or the proto
name, as ProtoJSON parsers must also accept; plain-JSON dialects are read the same way, as
the a2a-sdk's models are), optional and required values of the expected type, int32 numbers,
timestamps. Each refusal is InvalidParams naming the field. Pure functions."""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from accounts import storable
from tasks_app.errors import InvalidParams

# --- fields ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)  # called with our own field names, a fixed set
def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()


def get(obj: dict, camel: str) -> Any:
    """A member by its JSON name or, as ProtoJSON parsers must also accept, its proto name."""
    value = obj.get(camel)
    if value is None and camel != (snake := _snake(camel)):
        value = obj.get(snake)
    return value


# --- scalars ---------------------------------------------------------------------------


def timestamp(value: datetime) -> str:
    # isoformat is C; strftime and an f-string cost 2 % of the web process under blocking sends.
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _typed(obj: dict, key: str, where: str, check: Callable[[Any], bool], what: str, empty: Any) -> Any:
    """An optional member of the expected type, `empty` when absent; InvalidParams otherwise."""
    value = get(obj, key)
    if value is None:
        return empty
    if not check(value):
        raise InvalidParams(f"{where}.{key} must be {what}")
    return value


def _bounded(value: str, where: str, max_length: int | None) -> str:
    if max_length is not None and len(value) > max_length:
        raise InvalidParams(f"{where} is longer than {max_length} characters")
    return value


def opt_str(obj: dict, key: str, where: str, *, max_length: int | None = None) -> str | None:
    value = _typed(obj, key, where, lambda v: isinstance(v, str), "a string", None)
    return None if value is None else _bounded(value, f"{where}.{key}", max_length)


def required_str(obj: dict, key: str, where: str, *, max_length: int | None = None) -> str:
    value = get(obj, key)
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"{where}.{key} is required and must be a non-empty string")
    return _bounded(value, f"{where}.{key}", max_length)


def opt_obj(obj: dict, key: str, where: str) -> dict[str, Any]:
    return _typed(obj, key, where, lambda v: isinstance(v, dict), "an object", {})


def opt_str_list(obj: dict, key: str, where: str) -> list[str]:
    return _typed(
        obj, key, where, lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings", []
    )


def opt_bool(obj: dict, key: str, where: str) -> bool | None:
    return _typed(obj, key, where, lambda v: isinstance(v, bool), "true or false", None)


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_DECIMAL = re.compile(r"-?[0-9]+")


def opt_int(obj: dict, key: str, where: str, *, minimum: int = INT32_MIN, maximum: int = INT32_MAX) -> int | None:
    """An int32: as ProtoJSON has it, a JSON number with an integral value or a decimal string."""
    value = get(obj, key)
    if value is None:
        return None
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        if len(value) > 11:  # more digits than any int32 has (and Python caps long conversions)
            raise InvalidParams(f"{where}.{key} must be between {minimum} and {maximum}, got {storable.brief(value)}")
        value = int(value)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParams(f"{where}.{key} must be an integer")
    if value < minimum:
        raise InvalidParams(f"{where}.{key} must be at least {minimum}, got {value}")
    if value > maximum:
        raise InvalidParams(f"{where}.{key} must be at most {maximum}, got {value}")
    return value


def is_base64(value: str) -> bool:
    """Whether `value` is standard base64 (what both dialects' file bytes are)."""
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def file_part(obj: dict, where: str, *, bytes_keys: tuple[str, ...] = ("bytes",)) -> dict[str, Any]:
    """A file's content and labels as A2A 0.3, 0.1 and AIP write them: exactly one of its
    bytes (base64; `bytes_keys` names the members that may hold them) or its uri, and an
    optional mimeType and name. The canonical part (tasks_app.parts)."""
    present = [k for k in (*bytes_keys, "uri") if obj.get(k) is not None]
    if len(present) != 1:
        raise InvalidParams(f"{where} must have exactly one of bytes or uri (bytes in base64)")
    key = present[0]
    value = obj[key]
    if not isinstance(value, str):
        raise InvalidParams(f"{where}.{key} must be a string")
    if key == "uri":
        if not value:
            raise InvalidParams(f"{where}.uri must not be empty")
        part: dict[str, Any] = {"type": "file", "uri": value}
    else:
        if not is_base64(value):
            raise InvalidParams(f"{where}.{key} must be base64")
        part = {"type": "file", "bytes": value}
    media_type = opt_str(obj, "mimeType", where)
    name = opt_str(obj, "name", where)
    if media_type:
        part["media_type"] = media_type
    if name:
        part["name"] = name
    return part


def typed_part(obj: Any, where: str, *, file: Callable[[dict, str], dict[str, Any]]) -> dict[str, Any]:
    """A part told apart by its `type`, as A2A 0.1 and AIP write them: text, file or data (an
    object), with optional metadata. `file` reads a file part, which the two lay out apart
    (0.1 nests it in `file`, AIP's members are the part's own). The canonical part."""
    if not isinstance(obj, dict):
        raise InvalidParams(f"{where} must be an object")
    kind = obj.get("type")
    if kind == "text":
        if not isinstance(obj.get("text"), str):
            raise InvalidParams(f"{where}.text must be a string")
        part: dict[str, Any] = {"type": "text", "text": obj["text"]}
    elif kind == "file":
        part = file(obj, where)
    elif kind == "data":
        if not isinstance(obj.get("data"), dict):
            raise InvalidParams(f"{where}.data must be an object")
        part = {"type": "data", "data": obj["data"]}
    else:
        raise InvalidParams(f'{where}.type must be "text", "file" or "data", got {storable.brief(kind)}')
    metadata = opt_obj(obj, "metadata", where)
    if metadata:
        part["metadata"] = metadata
    return part
