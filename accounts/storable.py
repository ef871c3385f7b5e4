"""What the stores can hold (tasks, agents, the directory), decided in one place, at the bottom of
the layers so that every app checks with it.

Every JSON value a client sends (a whole request body, in any dialect) and every value an
agent reports (parts, metadata) passes `check` before it reaches anything that recurses
over it, stores it or encodes it; so whatever is stored can be read back and encoded by
every reader. The rules:

- **Nesting**: at most `MAX_DEPTH` (64) levels of arrays and objects. A request body counts
  itself as the first level; an agent's part counts from the part. Readers wrap stored
  values in a few levels of their own, far below what any encoder refuses (orjson: 254).
- **Strings and member names**: no U+0000 (Postgres `text` and `jsonb` cannot hold it) and
  no lone surrogate (not UTF-8). They are refused, not rewritten: what is stored is exactly
  what was sent. Binary content belongs in a file part's base64 bytes.
- **Numbers**: integers within 64 bits (-2^63 … 2^64-1), finite floats; JSON's NaN and
  Infinity are not JSON and do not parse.
- **Objects**: member names are unique (as I-JSON, RFC 7493, requires): a name given twice
  means different things to different parsers, so it is refused rather than guessed.
- **Lengths** of the values that go into columns (ids, names, URLs) are the columns' own,
  below; each dialect's codec checks them where it reads the field, so the error names it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, NamedTuple

import orjson

MAX_DEPTH = 64
ID_LENGTH = 200  # message, context, artifact and push config ids; a client's task id
NAME_LENGTH = 300  # an artifact's name
URL_LENGTH = 2048  # a push notification URL
SCHEME_LENGTH = 64  # a push config's authentication scheme

_SHOWN_KEYS = 8
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_UNSTORABLE_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


class Refused(ValueError):
    """A value the store cannot hold; the message names where it is and which rule it breaks,
    `path` holds the member names and indexes from `where` down to it."""

    def __init__(self, message: str, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.path = path


class Malformed(ValueError):
    """Bytes that are not JSON (or not UTF-8); the message says where."""


class _Duplicated(dict):
    """An object that named a member twice (the last value kept); `check` refuses it where
    it knows the object's path."""

    duplicate: str


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    duplicated = _Duplicated(obj)
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            duplicated.duplicate = name
            break
        seen.add(name)
    return duplicated


def _constant(name: str) -> Any:
    raise Malformed(f"{name} is not a JSON value")


def _integer(digits: str) -> int | float:
    # Twenty characters hold every 64-bit integer; anything longer is out of range, and
    # Python would refuse to convert more than 4,300 digits at all. An infinite value
    # makes `check` say so with the number's path.
    return int(digits) if len(digits) <= 20 else math.copysign(math.inf, -1 if digits[0] == "-" else 1)


_decoder = json.JSONDecoder(object_pairs_hook=_object, parse_constant=_constant, parse_int=_integer)


def loads(body: bytes) -> Any:
    """A request body as JSON (UTF-8, RFC 8259), or Malformed. Then `check` it.

    A body nested so deep that the parser gives up (about 1,000 levels) is read no further
    than MAX_DEPTH: each value that opens a level past it is read as `[]`, which `check`
    refuses with its path, so the answer still names the place and echoes the request's id."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(f"the body is not UTF-8 (byte {exc.start} is {body[exc.start]:#04x})") from None
    try:
        try:
            return _decoder.decode(text)
        except RecursionError:
            return _decoder.decode(_cut_below_max_depth(text))
    except json.JSONDecodeError as exc:
        raise Malformed(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None


# A string, or a run of openers, or a run of closers: a deep body is a few long runs.
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[{]+|[\]}]+', re.S)


def _cut_below_max_depth(text: str) -> str:
    """`text` with every value that opens level MAX_DEPTH + 1 replaced by `[]`."""
    pieces: list[str] = []
    depth, kept_from, cutting = 0, 0, False
    for run in _STRUCTURE.finditer(text):
        first = text[run.start()]
        if first == '"':
            continue
        size = run.end() - run.start()
        if first in "[{":
            if not cutting and depth + size > MAX_DEPTH:
                cut_at = run.start() + MAX_DEPTH - depth
                pieces += (text[kept_from:cut_at], "[]")
                cutting = True
            depth += size
        else:
            if cutting and depth - size <= MAX_DEPTH:
                kept_from = run.start() + depth - MAX_DEPTH
                cutting = False
            depth -= size
    if not cutting:
        pieces.append(text[kept_from:])
    return "".join(pieces)


class _At(NamedTuple):
    """Where a value sits, for the error message only (built when one is needed)."""

    parent: _At | None
    key: str | int


def _refused(where: str, at: _At | None, rule: str) -> Refused:
    keys: list[str | int] = []
    while at is not None:
        keys.append(at.key)
        at = at.parent
    keys.reverse()
    path = where
    # A path through a deep value would repeat itself for a whole line: its head says where.
    shown = keys if len(keys) <= _SHOWN_KEYS else keys[:_SHOWN_KEYS]
    for key in shown:
        if isinstance(key, int):
            path += f"[{key}]"
        elif key.isidentifier():
            path += f".{key}" if path else key
        else:
            path += f"[{brief(key)}]"
    if len(shown) < len(keys):
        path += f"… ({len(keys)} levels down)"
    return Refused(f"{path or 'the value'} {rule}", tuple(keys))


def _describe(text: str) -> str:
    found = _UNSTORABLE.search(text)
    assert found is not None
    char = found.group()
    what = "U+0000" if char == "\x00" else f"a lone surrogate (U+{ord(char):04X})"
    return f"contains {what}, which this server does not accept"


def check(value: Any, *, where: str = "", depth: int = 1, strings: bool = True) -> None:
    """Refused unless the store can hold `value` and every reader can give it back (the
    rules above). `where` names it in messages; `depth` is the level `value` sits at;
    `strings=False` skips the look at every string, for a body `escapes_unstorable` cleared.
    Iterative, so that no recursion runs on a value before its depth is known."""
    if not _clean(value, depth, strings):
        _explain(value, where, depth)


def escapes_unstorable(body: bytes) -> bool:
    """Whether a JSON text may hold a string `check` refuses: only a \\u escape can put
    U+0000 or a lone surrogate into a parsed string (raw control characters are not JSON,
    raw surrogates not UTF-8), so a body without one needs no look at its strings."""
    return _UNSTORABLE_ESCAPE.search(body) is not None


def _clean(value: Any, depth: int, strings: bool) -> bool:
    """True when `value` passes: one level at a time, no path kept. The pass every request
    takes (~4 times faster than `_explain`, which runs only to say what failed)."""
    level = [value]
    while level:
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is str:
                if strings and _UNSTORABLE.search(item):
                    return False
            elif kind is dict:
                if depth > MAX_DEPTH:
                    return False
                if strings:
                    try:  # one search over every member name (and a TypeError for a name not a string)
                        if _UNSTORABLE.search("".join(item)):
                            return False
                    except TypeError:
                        return False
                below.extend(item.values())
            elif kind is list or kind is tuple:
                if depth > MAX_DEPTH:
                    return False
                below.extend(item)
            elif kind is int:
                if not _INT_MIN <= item <= _INT_MAX:
                    return False
            elif kind is float:
                if not math.isfinite(item):
                    return False
            elif item is not None and kind is not bool:
                return False  # not a JSON value, or an object with a member given twice
        level = below
        depth += 1
    return True


def _explain(value: Any, where: str, depth: int) -> None:
    """Refused, naming where `value` breaks which rule."""
    deep = f"nests deeper than {MAX_DEPTH} levels of arrays and objects"
    todo: list[tuple[Any, int, _At | None]] = [(value, depth, None)]
    while todo:
        item, level, at = todo.pop()
        if isinstance(item, str):
            if _UNSTORABLE.search(item):
                raise _refused(where, at, _describe(item))
        elif isinstance(item, dict):
            if level > MAX_DEPTH:
                raise _refused(where, at, deep)
            if isinstance(item, _Duplicated):
                raise _refused(where, _At(at, item.duplicate), "is given more than once")
            for key, child in item.items():
                if not isinstance(key, str):
                    raise _refused(where, at, f"has a member name that is not a string: {brief(key)}")
                if _UNSTORABLE.search(key):
                    raise _refused(where, at, f"has a member name that {_describe(key)}")
                todo.append((child, level + 1, _At(at, key)))
        elif isinstance(item, (list, tuple)):
            if level > MAX_DEPTH:
                raise _refused(where, at, deep)
            todo.extend((child, level + 1, _At(at, index)) for index, child in enumerate(item))
        elif item is None or isinstance(item, bool):
            continue
        elif isinstance(item, int):
            if not _INT_MIN <= item <= _INT_MAX:
                raise _refused(where, at, "is an integer out of range (at most 64 bits)")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise _refused(where, at, "is a number out of range")
        else:
            raise _refused(where, at, f"is a {type(item).__name__}, which is not a JSON value")


def check_text(value: str, *, where: str, max_length: int) -> str:
    """A string bound for a column: storable (as `check`) and at most `max_length` long."""
    if len(value) > max_length:
        raise Refused(f"{where} is longer than {max_length} characters ({len(value)})")
    if _UNSTORABLE.search(value):
        raise Refused(f"{where} {_describe(value)}")
    return value


def dumps(value: Any) -> bytes:
    """`value` as JSON, for an answer. Only rows stored before `check` refused what orjson
    cannot write (nesting past 254 levels, integers past 64 bits) need the standard library's
    encoder: they still read, more slowly."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def brief(value: Any, limit: int = 60) -> str:
    """A client's value as error messages quote it: repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
