"""What a tenant may write into its agent's card: skills, media types and extensions are JSON a
tenant types, so each is checked against a JSON Schema when the agent is saved (the model's
validators: the admin form and create_agent run them). A card is then always one the server
can render and clients can read."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from jsonschema import Draft202012Validator

TEXT = {"type": "string", "maxLength": 2000}
LABEL = {"type": "string", "minLength": 1, "maxLength": 200}
# type/subtype, optionally with parameters; a wildcard like text/* too (RFC 6838's characters).
MEDIA_TYPE = {
    "type": "string",
    "maxLength": 200,
    "pattern": r"^[A-Za-z0-9*][A-Za-z0-9!#$&^_.+*-]*/[A-Za-z0-9*][A-Za-z0-9!#$&^_.+*-]*(\s*;.*)?$",
}
MODES = {"type": "array", "maxItems": 50, "items": MEDIA_TYPE}
STRINGS = {"type": "array", "maxItems": 50, "items": TEXT}

SKILLS = {
    "type": "array",
    "maxItems": 100,
    "items": {
        "type": "object",
        "required": ["id"],
        "additionalProperties": False,
        "properties": {
            "id": LABEL,
            "name": LABEL,
            "description": TEXT,
            "tags": {"type": "array", "maxItems": 50, "items": LABEL},
            "examples": STRINGS,
            "inputModes": MODES,
            "outputModes": MODES,
        },
    },
}

EXTENSIONS = {
    "type": "array",
    "maxItems": 50,
    "items": {
        "type": "object",
        "required": ["uri"],
        "additionalProperties": False,
        "properties": {
            "uri": {"type": "string", "minLength": 1, "maxLength": 500, "pattern": r"^\S+$"},
            "description": TEXT,
            "required": {"type": "boolean"},
            "params": {"type": "object"},
        },
    },
}


def _where(path: Any) -> str:
    return "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in path)


def _check(name: str, schema: dict[str, Any], value: Any) -> None:
    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ValidationError([f"{name}{_where(e.absolute_path)}: {e.message[:200]}" for e in errors[:10]])


# Functions, not instances: migrations refer to them by name, and a schema can change without one.
def validate_skills(value: Any) -> None:
    _check("skills", SKILLS, value)


def validate_modes(value: Any) -> None:
    _check("modes", MODES, value)


def validate_extensions(value: Any) -> None:
    _check("extensions", EXTENSIONS, value)
