"""A search of the directory from a query string, in one place: the directory page
(`/registry/?...`) and the search API (`/api/registry/agents/?...`) read the same parameters the
same way, and refuse the same bad values with the same messages.

    q                 text, at most 200 characters (names, descriptions, skills, examples)
    tag, skill, input_mode, output_mode, capability, binding, protocol_version, security
                      repeatable (tag=a&tag=b: entries with both), at most 10 values each;
                      an empty value is no filter (a form's "any")
    provider          the provider's organisation, exactly (case-insensitive)
    capability        one of streaming, push_notifications (or push), extended_card,
                      state_transition_history
    verified, signed, healthy
                      true/false (also 1/0, yes/no, on/off); empty: either
    kind              hosted or remote
    deprecated        true: deprecated entries too (left out by default)
    order             relevance or recent (default: relevance with a text query, else recent)

Other parameters (`cursor`; the API's `page_size`, `mine`, `state`...) are not the search's and
are left alone: the caller reads them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from .models import FacetKind, Kind
from .selectors import MAX_FILTER_VALUES, MAX_QUERY_LENGTH, Search

MAX_VALUE_LENGTH = 200
MAX_PROVIDER_LENGTH = 300

# Query parameter -> (Search field, facet kind): the repeatable filters.
FACET_PARAMS: dict[str, tuple[str, str]] = {
    "tag": ("tags", FacetKind.TAG),
    "skill": ("skills", FacetKind.SKILL),
    "input_mode": ("input_modes", FacetKind.INPUT_MODE),
    "output_mode": ("output_modes", FacetKind.OUTPUT_MODE),
    "capability": ("capabilities", FacetKind.CAPABILITY),
    "binding": ("bindings", FacetKind.BINDING),
    "protocol_version": ("protocol_versions", FacetKind.PROTOCOL_VERSION),
    "security": ("security", FacetKind.SECURITY),
}
BOOLEAN_PARAMS = ("verified", "signed", "healthy", "deprecated")
ORDERS = ("relevance", "recent")
PARAMS = ("q", *FACET_PARAMS, "provider", *BOOLEAN_PARAMS, "kind", "order")

TRUE = frozenset({"true", "1", "yes", "on"})
FALSE = frozenset({"false", "0", "no", "off"})
# The capabilities registry.cards indexes, and shorter names for them ("capability=push").
CAPABILITIES = ("streaming", "push_notifications", "extended_card", "state_transition_history")
CAPABILITY_ALIASES = {"push": "push_notifications", "extended": "extended_card", "history": "state_transition_history"}


class BadSearch(ValueError):
    """A query string that is not a search: the message says which parameter and why, for a
    person to read (the page shows it; the API answers 400 with it). `param` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param


def search_from_query(query: Any) -> Search:
    """The `Search` a query string asks for (a Django QueryDict, DRF's `query_params`, or a
    plain mapping of names to a string or a list of strings). Raises BadSearch."""
    q = _one(query, "q").strip()
    if len(q) > MAX_QUERY_LENGTH:
        raise BadSearch("q", f"a text query is at most {MAX_QUERY_LENGTH} characters (this one has {len(q)})")
    facets: dict[str, tuple[str, ...]] = {}
    for param, (field, _kind) in FACET_PARAMS.items():
        values = [v.strip() for v in _many(query, param) if v.strip()]
        if len(values) > MAX_FILTER_VALUES:
            raise BadSearch(param, f"at most {MAX_FILTER_VALUES} values (got {len(values)})")
        for value in values:
            if len(value) > MAX_VALUE_LENGTH:
                raise BadSearch(param, f"a value is at most {MAX_VALUE_LENGTH} characters")
        if param == "capability":
            values = [CAPABILITY_ALIASES.get(v.lower(), v.lower()) for v in values]
            for value in values:
                if value not in CAPABILITIES:
                    raise BadSearch(param, f"must be one of {', '.join(CAPABILITIES)}, not {_shown(value)}")
        facets[field] = tuple(dict.fromkeys(values))  # in order, once each
    provider = _one(query, "provider").strip()
    if len(provider) > MAX_PROVIDER_LENGTH:
        raise BadSearch("provider", f"at most {MAX_PROVIDER_LENGTH} characters")
    kind = _one(query, "kind").strip().lower()
    if kind and kind not in Kind.values:
        raise BadSearch("kind", f"must be {' or '.join(Kind.values)}, not {_shown(kind)}")
    order = _one(query, "order").strip().lower()
    if order and order not in ORDERS:
        raise BadSearch("order", f"must be {' or '.join(ORDERS)}, not {_shown(order)}")
    flags = {name: _boolean(query, name) for name in BOOLEAN_PARAMS}
    return Search(
        q=q,
        provider=provider,
        verified=flags["verified"],
        signed=flags["signed"],
        healthy=flags["healthy"],
        include_deprecated=bool(flags["deprecated"]),
        kind=kind,
        order=order or None,  # type: ignore[arg-type]
        **facets,
    )


def query_from_search(search: Search) -> list[tuple[str, str]]:
    """The query string's pairs for `search` (the page's links: next page, a filter removed),
    such that search_from_query of them gives `search` back."""
    pairs: list[tuple[str, str]] = []
    if search.q:
        pairs.append(("q", search.q))
    for param, (field, _kind) in FACET_PARAMS.items():
        pairs += [(param, value) for value in getattr(search, field)]
    if search.provider:
        pairs.append(("provider", search.provider))
    for name in ("verified", "signed", "healthy"):
        value = getattr(search, name)
        if value is not None:
            pairs.append((name, "true" if value else "false"))
    if search.include_deprecated:
        pairs.append(("deprecated", "true"))
    if search.kind:
        pairs.append(("kind", search.kind))
    if search.order:
        pairs.append(("order", search.order))
    return pairs


def _many(query: Any, name: str) -> list[str]:
    if hasattr(query, "getlist"):
        values = query.getlist(name)
    elif isinstance(query, Mapping):
        value = query.get(name)
        values = [] if value is None else list(value) if isinstance(value, list | tuple) else [value]
    else:
        raise TypeError(f"a query string is a QueryDict or a mapping, not {type(query).__name__}")
    for value in values:
        _check_text(name, value)
    return values


def _one(query: Any, name: str) -> str:
    values = _many(query, name)
    if len(values) > 1:
        raise BadSearch(name, "give it once")
    return values[0] if values else ""


def _boolean(query: Any, name: str) -> bool | None:
    value = _one(query, name).strip().lower()
    if not value:
        return None
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise BadSearch(name, f"must be true or false, not {_shown(value)}")


def _check_text(name: str, value: Any) -> None:
    """Text a database can hold: no NUL (Postgres refuses it in a string, which would be a
    500) and no other control character or lone surrogate."""
    if not isinstance(value, str):
        raise BadSearch(name, "must be text")
    for char in value:
        if unicodedata.category(char) in ("Cc", "Cs") and char not in "\t\n\r":
            raise BadSearch(name, f"contains a control character (U+{ord(char):04X})")


def _shown(value: str) -> str:
    """A refused value quoted in a message, clipped."""
    return repr(value if len(value) <= 40 else value[:40] + "…")
