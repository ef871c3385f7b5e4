"""What a tenant may write into its agent's card: skills, media types, extensions and the
extended card are JSON a tenant types, so each is checked against a JSON Schema when the agent
is saved (the model's validators: the admin form, create_agent and the tenant API run them). A
card is then always one the server can render and clients can read.

An extended card adds to the agent's card, never replaces what the server vouches for: the
server's card key signs it (protocols.card_signing), so its url and interfaces, provider,
name, security and signatures stay the server's (EXTENDED_MEMBERS is all it may carry)."""

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


# What an extended card may carry (A2A 1.0's GetExtendedAgentCard: more skills and detail for
# authenticated callers), the same names in 0.3's card. Skills are added after the card's own;
# the others replace the agent's (the description keeps the card's sentence on who sees which
# tasks). Modes and capabilities are not here: the server enforces those, so only its own are on a card.
LINK = {"type": "string", "maxLength": 500, "pattern": r"^https?://[^\s/?#@]+[^\s]*$"}
EXTENDED_MEMBERS: dict[str, dict[str, Any]] = {
    "skills": SKILLS,
    "description": {"type": "string", "maxLength": 20000},
    "documentationUrl": LINK,
    "iconUrl": LINK,
}
# The members that say who the agent is, where it answers and how callers authenticate (1.0 and
# 0.3): named in a refusal so that a tenant learns why, and held to the server's values on every
# extended card before it is signed (protocols.cards.extended).
SERVERS = frozenset(
    {
        "name",
        "url",
        "supportedInterfaces",
        "additionalInterfaces",
        "preferredTransport",
        "protocolVersion",
        "provider",
        "securitySchemes",
        "securityRequirements",
        "security",
        "signatures",
        "capabilities",
        "supportsAuthenticatedExtendedCard",
        "version",
    }
)
_MAY_ADD = ", ".join(EXTENDED_MEMBERS)
_EXTENDED_VALIDATORS = {name: Draft202012Validator(schema) for name, schema in EXTENDED_MEMBERS.items()}


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


def extended_card_problems(value: Any) -> list[str]:
    """Every problem of an extended card, member by member ("extended_card['url']: ...")."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return ["extended_card: must be an object of card members, or null"]
    problems = []
    for name, member in value.items():
        where = f"extended_card{_where([name])}"
        validator = _EXTENDED_VALIDATORS.get(name)
        if validator is None:
            why = (
                "is the server's (where the agent answers, who provides it, how callers authenticate), never a tenant's"
                if name in SERVERS
                else "is not a member an extended card may add"
            )
            problems.append(f"{where}: {why}; an extended card may add only {_MAY_ADD}")
            continue
        errors = sorted(validator.iter_errors(member), key=lambda e: list(map(str, e.absolute_path)))
        problems.extend(f"{where}{_where(e.absolute_path)}: {e.message[:200]}" for e in errors[:10])
    return problems


def validate_extended_card(value: Any) -> None:
    problems = extended_card_problems(value)
    if problems:
        raise ValidationError(problems[:20])


def extended_content(value: Any) -> dict[str, Any]:
    """What of a stored extended card goes on a card: the members it may carry that pass their
    check. Rows saved before the check may hold others (a url, a provider): they are left out,
    never served or signed."""
    if not isinstance(value, dict):
        return {}
    return {
        name: member
        for name, member in value.items()
        if name in _EXTENDED_VALIDATORS and _EXTENDED_VALIDATORS[name].is_valid(member)
    }
