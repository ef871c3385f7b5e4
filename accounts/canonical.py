"""The RFC 8785 (JSON Canonicalization Scheme) canonical form of a JSON document and its hash:
what a directory approval pins, and what a card signature covers, ours (protocols.card_signing)
and other people's (registry.cards.signatures)."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from .storable import MAX_DEPTH


def depth(value: Any) -> int:
    """Levels of objects and lists in `value` (a scalar is 0), counted without recursion and no
    further than one past MAX_DEPTH."""
    level, current = 0, [value]
    while True:
        containers = [item for item in current if isinstance(item, dict | list)]
        if not containers or level > MAX_DEPTH:
            return level
        level += 1
        current = [child for c in containers for child in (c.values() if isinstance(c, dict) else c)]


def canonical(document: Any) -> bytes:
    """RFC 8785 canonical JSON of `document`; ValueError when it has none (an integer beyond
    2^53, a non-finite number, text that is not Unicode, nesting past MAX_DEPTH)."""
    if depth(document) > MAX_DEPTH:
        raise ValueError(f"the document nests deeper than {MAX_DEPTH} levels")
    try:
        return rfc8785.dumps(document)
    except rfc8785.CanonicalizationError as exc:
        raise ValueError(f"the document has no canonical JSON form: {exc}") from None


def card_hash(document: Any) -> str:
    """sha256 (hex) of the card's RFC 8785 canonical form: the same card hashes the same however
    it was spaced or ordered. ValueError for a document with no canonical form (`validate`
    reports each reason as a problem first)."""
    return hashlib.sha256(canonical(document)).hexdigest()


def without_empty(value: Any) -> Any:
    """`value` with empty strings, lists and objects dropped, at every level (None when nothing
    is left): the form a2a-sdk (1.x) canonicalises before it signs a card, since its protobuf
    cards cannot tell an empty member from an absent one. Called on values of bounded depth."""
    if isinstance(value, dict):
        kept = {key: cleaned for key, item in value.items() if (cleaned := without_empty(item)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [cleaned for item in value if (cleaned := without_empty(item)) is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value
