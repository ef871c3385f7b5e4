"""Checking a card against its format: one JSON Schema per format (schemas/*.json, Draft
2020-12, written for this registry), a structural pass before it (depth, characters,
numbers: what no schema can say and what must hold before anything recurses), and the rules
a schema cannot state (skill ids repeated, requirements naming undeclared schemes). Every
violation is one Problem with a JSON pointer and a sentence; `validate` never raises for a
JSON value."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, FormatChecker, ValidationError

from accounts.storable import MAX_DEPTH

from .types import VERSIONS, Problem, Version

SCHEMA_FILES: dict[Version, str] = {
    "1.0": "a2a-1.0.json",
    "0.3": "a2a-0.3.json",
    "0.1": "a2a-0.1.json",
    "acs": "acs.json",
}
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
MAX_PROBLEMS = 1000  # listed one by one; past that, one more problem says how many were left out
SHOWN = 60  # characters of a value quoted in a message
SAFE_INTEGER = 2**53 - 1  # beyond it a number has no exact JSON (RFC 8785, I-JSON) form

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_URL_UNSAFE = re.compile(r'[\s\x00-\x1f\x7f\\<>"`{}|^]')
_URL_UNSAFE_AMQP = re.compile(r'[\s\x00-\x1f\x7f\\<>"`|^]')  # ACS AMQP URLs carry an {AIC} placeholder
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


# --- formats: checked here, not by jsonschema's optional format libraries ---------------

formats = FormatChecker(formats=())


def _url_parts(value: str, unsafe: re.Pattern[str]) -> Any:
    if not value or unsafe.search(value):
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.password is not None:
        return None
    return parts


def is_web_url(value: object) -> bool:
    """An absolute http(s) URL with a host, no credentials, nothing a page or a shell could
    misread (no whitespace or control characters: browsers drop them, "java\tscript:")."""
    if not isinstance(value, str) or not value or len(value) > 2048:
        return False
    parts = _url_parts(value, _URL_UNSAFE)
    return parts is not None and parts.scheme in ("http", "https")


@formats.checks("http-url")
def is_http_url(value: object) -> bool:
    if not isinstance(value, str) or not value:
        return True  # another rule says what is wrong with a value that is not text, or empty
    return is_web_url(value)


@formats.checks("grpc-target")
def is_grpc_target(value: object) -> bool:
    """A gRPC interface's address: `host:port` as gRPC clients take it (A2A's suite and SDKs dial
    the card's url as is), or an http(s) URL."""
    if not isinstance(value, str) or not value:
        return True  # another rule says what is wrong with a value that is not text, or empty
    if "://" in value:
        return is_web_url(value)
    if _URL_UNSAFE.search(value) or "/" in value or "@" in value:
        return False
    host, colon, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return bool(colon and host and port.isdigit() and 0 < int(port) < 65536)


@formats.checks("amqp-url")
def is_amqp_url(value: object) -> bool:
    if not isinstance(value, str) or not value:
        return True  # another rule says what is wrong with a value that is not text, or empty
    parts = _url_parts(value, _URL_UNSAFE_AMQP)
    return parts is not None and parts.scheme in ("amqp", "amqps")


@formats.checks("absolute-uri")
def is_absolute_uri(value: object) -> bool:
    if not isinstance(value, str) or not value:
        return True  # another rule says what is wrong with a value that is not text, or empty
    scheme, colon, rest = value.partition(":")
    return bool(colon and rest and _SCHEME.fullmatch(scheme)) and not _URL_UNSAFE.search(value)


@formats.checks("date-time")
def is_date_time(value: object) -> bool:
    if not isinstance(value, str) or not value:
        return True  # another rule says what is wrong with a value that is not text, or empty
    if len(value) < 16 or value[10] not in "Tt ":
        return False
    try:
        return datetime.fromisoformat(value.replace("z", "Z")).tzinfo is not None
    except ValueError:
        return False


# --- the schemas --------------------------------------------------------------------------


@cache
def schema(version: Version) -> dict[str, Any]:
    if version not in SCHEMA_FILES:
        raise ValueError(f"unknown card version {version!r}; one of {', '.join(VERSIONS)}")
    loaded: dict[str, Any] = json.loads((SCHEMA_DIR / SCHEMA_FILES[version]).read_text(encoding="utf-8"))
    return loaded


@cache
def _validator(version: Version) -> Draft202012Validator:
    return Draft202012Validator(schema(version), format_checker=formats)


# --- messages -------------------------------------------------------------------------------


def _clean(text: str) -> str:
    """Text fit for a message or a pointer: a lone surrogate or NUL written as its escape."""
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def shown(value: Any) -> str:
    """A value as a message quotes it: JSON, cut to SHOWN characters; containers by kind."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = type(value).__name__
    text = _clean(text)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "a " + type(value).__name__


_TYPE_NAMES = {
    "string": ("a string", "strings"),
    "boolean": ("true or false", "booleans"),
    "integer": ("a whole number", "whole numbers"),
    "number": ("a number", "numbers"),
    "object": ("an object", "objects"),
    "array": ("a list", "lists"),
    "null": ("null", "nulls"),
}


def _resolve(node: Any, root: dict[str, Any]) -> dict[str, Any]:
    """A subschema with its local $ref followed (the schemas use only #/$defs/... refs)."""
    for _ in range(10):
        if not isinstance(node, dict):
            return {}
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
            return node
        node = root.get("$defs", {}).get(ref[len("#/$defs/") :], {})
    return node if isinstance(node, dict) else {}


def expected(node: Any, root: dict[str, Any]) -> str:
    """What a subschema asks for, in a few words: "a list of strings", "an http or https URL"."""
    node = _resolve(node, root)
    if "x-what" in node:
        return str(node["x-what"])
    if "enum" in node:
        return "one of " + ", ".join(str(v) for v in node["enum"])
    kind_name = node.get("type")
    if kind_name == "array":
        items = _resolve(node.get("items"), root)
        if "x-what" not in items and isinstance(items.get("type"), str) and items["type"] in _TYPE_NAMES:
            return f"a list of {_TYPE_NAMES[items['type']][1]}"
        return "a list"
    if isinstance(kind_name, str) and kind_name in _TYPE_NAMES:
        return _TYPE_NAMES[kind_name][0]
    return "a value"


def pointer(parts: Iterable[str | int]) -> str:
    return "".join("/" + _clean(str(part).replace("~", "~0").replace("/", "~1")) for part in parts)


def _problems_of(error: ValidationError, root: dict[str, Any]) -> Iterator[Problem]:
    keyword = str(error.validator)
    node = error.schema if isinstance(error.schema, dict) else {}
    custom = (node.get("x-messages") or {}).get(keyword)
    path = pointer(error.absolute_path)
    value = error.instance
    limit = error.validator_value
    if "propertyNames" in error.absolute_schema_path:
        # The error is about a member's name: point at the member.
        path = f"{path}/{pointer([value])[1:]}"
        if custom:
            yield Problem(path, str(custom))
        elif keyword == "maxLength":
            yield Problem(path, f"is a member name longer than {limit} characters")
        elif keyword == "minLength":
            yield Problem(path, "is an empty member name")
        else:
            yield Problem(path, "is not an allowed member name here")
        return
    if keyword == "required":
        properties = node.get("properties") or {}
        for name in limit:
            if isinstance(value, dict) and name not in value:
                what = custom or f"is missing (required: {expected(properties.get(name), root)})"
                yield Problem(f"{path}/{pointer([name])[1:]}", str(what))
        return
    if custom:
        suffix = f", not {shown(value)}" if keyword in ("format", "pattern", "enum") else ""
        yield Problem(path, f"{custom}{suffix}")
        return
    if keyword == "type":
        message = f"must be {expected(node, root)}, not {kind(value)}"
    elif keyword == "minLength":
        message = "must not be empty" if limit == 1 else f"must be at least {limit} characters long"
    elif keyword == "maxLength":
        message = f"is too long: {len(value)} characters, at most {limit}"
    elif keyword == "minItems":
        message = "must not be empty" if limit == 1 else f"must have at least {limit} items"
    elif keyword == "maxItems":
        message = f"has too many items: {len(value)}, at most {limit}"
    elif keyword == "minProperties":
        message = "must not be empty" if limit == 1 else f"must have at least {limit} members"
    elif keyword == "maxProperties":
        message = f"has too many members: {len(value)}, at most {limit}"
    elif keyword == "enum":
        message = f"must be one of {', '.join(str(v) for v in limit)}, not {shown(value)}"
    elif keyword == "const":
        message = f"must be {shown(limit)}, not {shown(value)}"
    elif keyword == "format":
        message = f"is not a valid {limit}: {shown(value)}"
    elif keyword == "pattern":
        message = f"does not have the expected form: {shown(value)}"
    elif keyword == "minimum":
        message = f"must be at least {limit}, not {shown(value)}"
    elif keyword == "maximum":
        message = f"must be at most {limit}, not {shown(value)}"
    else:  # a keyword the schemas do not use today
        message = f"is not valid here ({keyword})"
    yield Problem(path, message)


# --- the structural pass ---------------------------------------------------------------------


def _structure(document: Any) -> tuple[list[Problem], bool]:
    """Problems no schema states, and whether they make the schema pass unsafe (a value that
    is not JSON, a name that is not a string, nesting past MAX_DEPTH). Iterative: nothing
    recurses over the document before its depth is known."""
    problems: list[Problem] = []
    fatal = False
    todo: list[tuple[Any, int, str]] = [(document, 1, "")]
    while todo:
        value, depth, path = todo.pop()
        if isinstance(value, dict):
            if depth > MAX_DEPTH:
                problems.append(Problem(path, f"nests deeper than {MAX_DEPTH} levels of objects and lists"))
                fatal = True
                continue
            duplicate = getattr(value, "duplicate", None)
            if type(value) is not dict and isinstance(duplicate, str):
                problems.append(Problem(f"{path}/{pointer([duplicate])[1:]}", "is given more than once"))
            for key, child in value.items():
                if not isinstance(key, str):
                    problems.append(Problem(path, f"has a member name that is not a string ({shown(key)})"))
                    fatal = True
                    continue
                where = f"{path}/{pointer([key])[1:]}"
                if _UNSTORABLE.search(key):
                    problems.append(
                        Problem(where, "has a name containing U+0000 or a lone surrogate, which is not text")
                    )
                todo.append((child, depth + 1, where))
        elif isinstance(value, list):
            if depth > MAX_DEPTH:
                problems.append(Problem(path, f"nests deeper than {MAX_DEPTH} levels of objects and lists"))
                fatal = True
                continue
            todo.extend((child, depth + 1, f"{path}/{index}") for index, child in enumerate(value))
        elif isinstance(value, str):
            found = _UNSTORABLE.search(value)
            if found:
                what = "U+0000" if found.group() == "\x00" else f"a lone surrogate (U+{ord(found.group()):04X})"
                problems.append(Problem(path, f"contains {what}, which is not text this registry keeps"))
        elif value is None or isinstance(value, bool):
            continue
        elif isinstance(value, int):
            if not -SAFE_INTEGER <= value <= SAFE_INTEGER:
                problems.append(Problem(path, "is an integer too large to exchange exactly (beyond ±2^53)"))
        elif isinstance(value, float):
            if not math.isfinite(value):
                problems.append(Problem(path, "is not a finite number"))
        else:
            problems.append(Problem(path, f"is not a JSON value ({type(value).__name__})"))
            fatal = True
    return problems, fatal


# --- rules a schema cannot state ---------------------------------------------------------------


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _repeated_skill_ids(document: dict[str, Any]) -> Iterator[Problem]:
    first: dict[str, int] = {}
    for index, skill in enumerate(_list(document.get("skills"))):
        skill_id = _dict(skill).get("id")
        if not isinstance(skill_id, str):
            continue
        if skill_id in first:
            yield Problem(f"/skills/{index}/id", f"repeats the id of /skills/{first[skill_id]} ({shown(skill_id)})")
        else:
            first[skill_id] = index


def _requirements(document: dict[str, Any], version: Version) -> Iterator[tuple[str, Any]]:
    """(pointer, requirement object) of every security requirement the card states."""
    if version == "1.0":
        places = [("/securityRequirements", document.get("securityRequirements"))]
        places += [
            (f"/skills/{i}/securityRequirements", _dict(s).get("securityRequirements"))
            for i, s in enumerate(_list(document.get("skills")))
        ]
        for where, requirements in places:
            for index, requirement in enumerate(_list(requirements)):
                yield f"{where}/{index}/schemes", _dict(requirement).get("schemes")
    elif version == "0.3":
        places = [("/security", document.get("security"))]
        places += [
            (f"/skills/{i}/security", _dict(s).get("security")) for i, s in enumerate(_list(document.get("skills")))
        ]
        for where, requirements in places:
            for index, requirement in enumerate(_list(requirements)):
                yield f"{where}/{index}", requirement
    elif version == "acs":
        for i, endpoint in enumerate(_list(document.get("endPoints"))):
            for index, requirement in enumerate(_list(_dict(endpoint).get("security"))):
                yield f"/endPoints/{i}/security/{index}", requirement


def _undeclared_schemes(document: dict[str, Any], version: Version) -> Iterator[Problem]:
    declared = _dict(document.get("securitySchemes"))
    for where, requirement in _requirements(document, version):
        for name in _dict(requirement):
            if name not in declared:
                yield Problem(
                    f"{where}/{pointer([name])[1:]}",
                    f"names the security scheme {shown(name)}, which securitySchemes does not declare",
                )


# --- the entry point ---------------------------------------------------------------------------


def _sort_key(problem: Problem) -> tuple[list[tuple[int, int, str]], str]:
    parts = [(0, int(token), "") if token.isdecimal() else (1, 0, token) for token in problem.path.split("/")[1:]]
    return parts, problem.message


def validate(document: Any, version: Version) -> list[Problem]:
    """Every way `document` breaks the rules of `version`, sorted by path ([] if none).
    Never raises for a JSON value (ValueError only for an unknown `version`)."""
    root = schema(version)
    if not isinstance(document, dict):
        return [Problem("", f"must be a JSON object (an agent card), not {kind(document)}")]
    problems, fatal = _structure(document)
    if not fatal:
        for error in _validator(version).iter_errors(document):
            problems.extend(_problems_of(error, root))
        problems.extend(_repeated_skill_ids(document))
        problems.extend(_undeclared_schemes(document, version))
    unique = sorted(set(problems), key=_sort_key)
    if len(unique) > MAX_PROBLEMS:
        left = len(unique) - MAX_PROBLEMS
        unique = [*unique[:MAX_PROBLEMS], Problem("", f"has {left} more problems, not listed")]
    return unique
