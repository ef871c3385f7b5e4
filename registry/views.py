"""The directory's pages: `/registry/` (search, filters, keyset pages), `/registry/<id>/`
(one entry) and `/registry/submit/` (how an agent is submitted, through the REST API).
Server-rendered, no JavaScript; every read goes through `registry.selectors`. The directory
lists the listed entries, for everyone alike (as the search API does without `mine`); an
entry's page shows its owners and curators the entry in any state.

Everything a card says is untrusted text: the templates print it through Django's
autoescaping only (never `|safe`), and a URL from a card becomes a link only when it is
http(s) (`Link`), with rel="nofollow noopener ugc".

Query counts are fixed: the list is one query for the page of entries and one for their tags
(plus the filter choices, kept for FACETS_CACHE_SECONDS); the entry page a fixed handful
(the entry with its card, versions, checks, uptimes, latency; decisions for its managers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import orjson
from django.conf import settings
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_safe

from . import attestations, card_hosts, cards, listing_cache, proofs, selectors
from .models import LISTED_STATES, Entry, Facet, FacetKind, Health, ProofMethod, State
from .search_params import FACET_PARAMS, BadSearch, query_from_search, search_from_query

PAGE_SIZE = 20
MAX_CURSOR_LENGTH = 400
TAGS_SHOWN = 8
VERSIONS_SHOWN = 50
DECISIONS_SHOWN = 50
CHECKS_SHOWN = 10
# The filter choices are counts over every listed entry, the same for every visitor: kept in
# each process for a minute, and dropped at once on a decision (registry/listing_cache.py).
FACETS_CACHE_SECONDS = 60

# The filter groups of the form: (query parameter, legend, how many choices at most).
FILTER_GROUPS: tuple[tuple[str, str, int], ...] = (
    ("tag", "Tags", 15),
    ("skill", "Skills", 10),
    ("input_mode", "Input modes", 8),
    ("output_mode", "Output modes", 8),
    ("capability", "Capabilities", 8),
    ("binding", "Bindings", 6),
    ("protocol_version", "Protocol versions", 6),
    ("security", "Security schemes", 6),
)
CAPABILITY_NAMES = {
    "streaming": "Streaming",
    "push_notifications": "Push notifications",
    "extended_card": "Extended card",
    "state_transition_history": "State transition history",
}
UPTIME_PERIODS = {"1d": "Last day", "7d": "Last 7 days", "30d": "Last 30 days"}


# --- values for the templates -----------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A URL from a card: `href` only when it is an absolute http(s) URL, else the text alone."""

    text: str
    href: str = ""


def link(url: Any) -> Link:
    text = url if isinstance(url, str) else ""
    return Link(text=text, href=text if cards.is_web_url(text) else "")


@dataclass(frozen=True)
class Choice:
    value: str
    count: int | None  # None: a ticked value not among the commonest
    checked: bool
    label: str


@dataclass(frozen=True)
class FilterGroup:
    param: str
    legend: str
    choices: list[Choice]


def _strings(value: Any) -> list[str]:
    """The strings of a list from a card's index (anything else left out)."""
    if not isinstance(value, list | tuple):
        return []
    return [v for v in value if isinstance(v, str)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


# --- the directory ------------------------------------------------------------------------


@require_safe
def directory(request: HttpRequest) -> HttpResponse:
    try:
        search = search_from_query(request.GET)
    except BadSearch as error:
        return _bad_request(request, str(error))
    cursor = request.GET.get("cursor", "").strip()
    if len(cursor) > MAX_CURSOR_LENGTH:
        return _bad_request(request, "cursor: not one this server gave: start again without it")
    entries = (
        selectors.entry_search(search, base=Entry.objects.listed())
        .defer("search")
        .prefetch_related(
            Prefetch(
                "facets",
                queryset=Facet.objects.filter(kind=FacetKind.TAG).order_by("value"),
                to_attr="tag_facets",
            )
        )
    )
    try:
        found = selectors.page(entries, order=search.ordering, cursor=cursor or None, size=PAGE_SIZE)
    except ValueError as error:  # selectors.BadCursor, or a cursor's date that is no date
        message = str(error) if isinstance(error, selectors.BadCursor) else "the cursor is damaged"
        return _bad_request(request, f"cursor: {message}")
    query = query_from_search(search)
    context = {
        "search": search,
        "filters": _filter_groups(search),
        "results": [_result(entry) for entry in found.entries],
        "first_page": bool(cursor),
        "first_url": "?" + urlencode(query) if query else "?",
        "next_url": "?" + urlencode([*query, ("cursor", found.next_cursor)]) if found.next_cursor else "",
        "searching": bool(query),
        "trust_filters": [
            ("verified", "Domain proven", search.verified),
            ("signed", "Signed card", search.signed),
            ("healthy", "Healthy", search.healthy),
        ],
        "orders": [
            ("", "Best first (relevance with a text query, else newest)"),
            ("relevance", "Relevance"),
            ("recent", "Newest listed"),
        ],
        "nav": "directory",
    }
    return render(request, "registry/directory.html", context)


def _bad_request(request: HttpRequest, message: str) -> HttpResponse:
    return render(
        request,
        "registry/error.html",
        {"title": "This search cannot be run", "message": message, "nav": "directory"},
        status=400,
    )


def _count_facets() -> dict[str, list[tuple[str, int]]]:
    listed = Entry.objects.listed().exclude(state=State.DEPRECATED)
    return {
        param: selectors.facet_counts(listed, FACET_PARAMS[param][1], limit=limit)
        for param, _legend, limit in FILTER_GROUPS
    }


FACETS: listing_cache.Kept[dict[str, list[tuple[str, int]]]] = listing_cache.Kept(FACETS_CACHE_SECONDS)


def _facet_counts() -> dict[str, list[tuple[str, int]]]:
    return FACETS.get(_count_facets)


def _filter_groups(search: selectors.Search) -> list[FilterGroup]:
    counts = _facet_counts()
    groups = []
    for param, legend, _limit in FILTER_GROUPS:
        field, kind = FACET_PARAMS[param]
        chosen = {selectors.facet_value(kind, v) for v in getattr(search, field)}
        choices = [
            Choice(value=value, count=n, checked=value in chosen, label=_facet_label(param, value))
            for value, n in counts.get(param, [])
        ]
        shown = {c.value for c in choices}
        # A ticked value stays on the form (and can be unticked) even when it is not common.
        choices += [
            Choice(value=value, count=None, checked=True, label=_facet_label(param, value))
            for value in sorted(chosen - shown)
        ]
        if choices:
            groups.append(FilterGroup(param=param, legend=legend, choices=choices))
    return groups


def _facet_label(param: str, value: str) -> str:
    return CAPABILITY_NAMES.get(value, value) if param == "capability" else value


def _result(entry: Entry) -> dict[str, Any]:
    tags = [f.value for f in getattr(entry, "tag_facets", [])]
    return {
        "entry": entry,
        "tags": tags[:TAGS_SHOWN],
        "more_tags": max(0, len(tags) - TAGS_SHOWN),
        "deprecated": entry.state == State.DEPRECATED,
        "health_class": _health_class(entry.health),
    }


HEALTH_CLASSES: dict[str, str] = {Health.HEALTHY: "good", Health.DEGRADED: "bad", Health.STALE: "bad"}


def _health_class(health: str) -> str:
    return HEALTH_CLASSES.get(health, "neutral")


# --- submitting ----------------------------------------------------------------------------


@require_safe
def submit(request: HttpRequest) -> HttpResponse:
    """How an agent gets into the directory: the REST API's steps, with this server's URLs."""
    base = request.build_absolute_uri("/").rstrip("/")
    context = {
        "base": base,
        "token_url": base + reverse("registry-api:token"),
        "agents_url": base + reverse("registry-api:agents"),
        "methods": [ProofMethod.HTTP.value, ProofMethod.DNS.value],
        "proof_path": proofs.WELL_KNOWN_PATH,
        "dns_label": proofs.DNS_LABEL,
        "draft_days": f"{settings.REGISTRY_DRAFT_LIFETIME / 86400:g}",
        "docs_url": reverse("api-docs"),
        "nav": "submit",
    }
    return render(request, "registry/submit.html", context)


# --- one entry ------------------------------------------------------------------------------


@require_safe
def entry_detail(request: HttpRequest, pk: int) -> HttpResponse:
    user = request.user
    entry = (
        selectors.entries_visible_to(user)
        .select_related("current_version", "approved_version")
        .defer("search", "current_version__raw", "approved_version__raw")
        .filter(pk=pk)
        .first()
    )
    if entry is None:
        return render(
            request,
            "registry/error.html",
            {"title": "No such agent", "message": f"There is no agent {pk} in the directory.", "nav": "directory"},
            status=404,
        )
    manager = selectors.sees_everything_of(user, entry)
    version = selectors.shown_version(entry, user=user if manager else None)
    versions = list(
        selectors.versions_of(entry, user=user if manager else None).only(
            "id", "entry_id", "number", "hash", "dialect", "fetched_at"
        )[:VERSIONS_SHOWN]
    )
    decisions = list(selectors.decisions_of(entry)[:DECISIONS_SHOWN]) if manager else []
    index = version.index if version is not None and isinstance(version.index, dict) else {}
    context = {
        "entry": entry,
        "version": version,
        "versions": versions,
        "manager": manager,
        "decisions": decisions,
        "card": _card(index, entry),
        "signatures": _signatures(version.signatures if version is not None else []),
        "card_json": orjson.dumps(version.document, option=orjson.OPT_INDENT_2).decode() if version else "",
        "state": _public_state(entry) if not manager else entry.get_state_display(),
        "unapproved": bool(manager and version and version.pk != entry.approved_version_id),
        "checks": selectors.checks_of(entry, limit=CHECKS_SHOWN),
        "uptimes": [(UPTIME_PERIODS.get(k, k), v) for k, v in selectors.uptimes(entry).items()],
        "latency_median": selectors.latency_median(entry),
        "health_class": _health_class(entry.health),
        "card_url": link(entry.card_url),
        "flags": card_hosts.host_flags(entry, version),
        "conformance": selectors.conformance_of(entry),
        "attestation": _attestation(entry),
        "nav": "directory",
    }
    return render(request, "registry/entry.html", context)


def _attestation(entry: Entry) -> dict[str, Any] | None:
    found = selectors.attestation_of(entry)
    if found is None:
        return None
    status = attestations.status_of(found)
    return {
        "attestation": found,
        "state": status.state,
        "reason": status.reason,
        "url": reverse("registry:attestation", args=[entry.pk]),
        "status_url": reverse("registry:attestation-status", args=[found.jti]),
        "jwks_url": reverse("registry:jwks"),
    }


def _public_state(entry: Entry) -> str:
    """What the public is told: a listed entry whose changed card waits for review is still
    its approved self."""
    if entry.state == State.DEPRECATED:
        return State.DEPRECATED.label
    if entry.state in LISTED_STATES and entry.approved_version_id:
        return State.APPROVED.label
    return entry.get_state_display()


def _card(index: dict[str, Any], entry: Entry) -> dict[str, Any]:
    """What the page shows of a card's normalised index (registry.cards.CardIndex as JSON),
    each value type-checked: an index is data, the template must not trip on it."""
    skills = []
    for skill in index.get("skills") or []:
        if not isinstance(skill, dict):
            continue
        skills.append(
            {
                "id": _text(skill.get("id")),
                "name": _text(skill.get("name")) or _text(skill.get("id")),
                "description": _text(skill.get("description")),
                "tags": _strings(skill.get("tags")),
                "examples": _strings(skill.get("examples")),
                "input_modes": _strings(skill.get("input_modes")),
                "output_modes": _strings(skill.get("output_modes")),
            }
        )
    endpoints = [
        {
            "url": link(e.get("url")),
            "binding": _text(e.get("binding")),
            "protocol_version": _text(e.get("protocol_version")),
            "tenant": _text(e.get("tenant")),
        }
        for e in index.get("endpoints") or []
        if isinstance(e, dict)
    ]
    if not endpoints and _text(index.get("url")):
        endpoints = [{"url": link(index["url"]), "binding": "", "protocol_version": "", "tenant": ""}]
    return {
        "name": _text(index.get("name")) or entry.name,
        "description": _text(index.get("description")) or entry.description,
        "card_version": _text(index.get("card_version")),
        "dialect": _text(index.get("dialect")),
        "provider": _text(index.get("provider_organization")),
        "provider_url": link(index.get("provider_url")),
        "documentation_url": link(index.get("documentation_url")),
        "skills": skills,
        "endpoints": endpoints,
        "input_modes": _strings(index.get("input_modes")),
        "output_modes": _strings(index.get("output_modes")),
        "capabilities": [CAPABILITY_NAMES.get(c, c) for c in _strings(index.get("capabilities"))],
        "security_schemes": _strings(index.get("security_schemes")),
        "extensions": [link(u) for u in _strings(index.get("extensions"))],
    }


def _signatures(checks: Any) -> list[dict[str, Any]]:
    if not isinstance(checks, list):
        return []
    return [
        {
            "valid": c.get("valid") is True,
            "kid": _text(c.get("kid")),
            "alg": _text(c.get("alg")),
            "reason": _text(c.get("reason")),
        }
        for c in checks
        if isinstance(c, dict)
    ]
