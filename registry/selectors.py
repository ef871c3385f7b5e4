"""Every read of the directory: who sees which entries, search with filters, keyset pages,
versions, decisions, health history and uptime."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import orjson
from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import connection
from django.db.models import Count, F, IntegerField, Q, QuerySet, Value
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import Membership

from .models import (
    Attestation,
    CardVersion,
    ConformanceResult,
    Decision,
    Entry,
    Facet,
    FacetKind,
    Flag,
    Health,
    HealthCheck,
    ProofMethod,
    State,
)

Order = Literal["relevance", "recent"]
MAX_QUERY_LENGTH = 200
MAX_FILTER_VALUES = 10


def is_curator(user: Any) -> bool:
    return bool(user and user.is_authenticated and (user.is_superuser or user.has_perm("registry.curate_entry")))


def owned_by(user: Any) -> Q:
    """The entries `user` owns: submitted by them, or of a tenant they are a member of."""
    tenants = Membership.objects.filter(user=user).values("tenant_id")
    return Q(submitted_by=user) | Q(tenant_id__in=tenants)


def entries_visible_to(user: Any) -> QuerySet[Entry]:
    """Listed entries for everyone; a signed-in user's own entries too; every entry for a curator."""
    if is_curator(user):
        return Entry.objects.all()
    if user is not None and user.is_authenticated:
        return Entry.objects.filter(Q(pk__in=Entry.objects.listed().values("pk")) | owned_by(user))
    return Entry.objects.listed()


def can_manage(user: Any, entry: Entry) -> bool:
    """The owner's rights (prove the domain, submit, deprecate): the submitter, an operator or
    owner of the entry's tenant."""
    if not (user and user.is_authenticated):
        return False
    if entry.submitted_by_id == user.pk:
        return True
    return (
        entry.tenant_id is not None
        and Membership.objects.filter(user=user, tenant_id=entry.tenant_id, role__in=("operator", "owner")).exists()
    )


def role_of(user: Any, entry: Entry) -> Literal["curator", "owner"] | None:
    """The role `user` acts in on `entry` (registry.services.TRANSITIONS): curator, owner, or
    none (the public, and a tenant's viewers)."""
    if is_curator(user):
        return "curator"
    if can_manage(user, entry):
        return "owner"
    return None


@dataclass(frozen=True)
class Search:
    """A search of the directory. Several values of one filter must all hold (tags=a&tags=b:
    entries with both tags); filters combine with AND."""

    q: str = ""
    tags: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    bindings: tuple[str, ...] = ()
    protocol_versions: tuple[str, ...] = ()
    security: tuple[str, ...] = ()
    provider: str = ""
    verified: bool | None = None
    signed: bool | None = None
    healthy: bool | None = None
    kind: str = ""
    include_deprecated: bool = False
    order: Order | None = None  # None: relevance with a text query, else recency

    @property
    def ordering(self) -> Order:
        return self.order or ("relevance" if self.q.strip() else "recent")

    def facet_filters(self) -> list[tuple[str, tuple[str, ...]]]:
        return [
            (FacetKind.TAG, self.tags),
            (FacetKind.SKILL, self.skills),
            (FacetKind.INPUT_MODE, self.input_modes),
            (FacetKind.OUTPUT_MODE, self.output_modes),
            (FacetKind.CAPABILITY, self.capabilities),
            (FacetKind.BINDING, self.bindings),
            (FacetKind.PROTOCOL_VERSION, self.protocol_versions),
            (FacetKind.SECURITY, self.security),
        ]


def facet_value(kind: str, value: str) -> str:
    """Facet values are compared as stored: bindings upper-case (JSONRPC, HTTP+JSON), the
    rest lower-case."""
    value = str(value).strip()[:200]
    return value.upper() if kind == FacetKind.BINDING else value.lower()


# A card URL over https on port 443 (or none given), as Postgres reads it: proofs.covers_domain's
# test of an http proof. A URL with user information is taken as not covering the domain.
_HTTPS_443 = r"^[Hh][Tt][Tt][Pp][Ss]://(\[[0-9A-Fa-f:.]+\]|[^]/?#:@[]+)(:0*443)?([/?#]|$)"


def domain_proven() -> Q:
    """Entries whose card's whole domain is proven (Entry.domain_proven): by DNS, by hosting,
    or by the well-known file over https on 443; never one proven on another port or over http."""
    return Q(domain_verified_at__isnull=False) & (
        ~Q(domain_verified_by=ProofMethod.HTTP) | Q(card_url__regex=_HTTPS_443)
    )


def entry_search(search: Search, *, base: QuerySet[Entry] | None = None) -> QuerySet[Entry]:
    """Entries matching `search`, annotated with `rank` (an integer: relevance times 10^6)
    and ordered for keyset paging: (-rank, -id) or (-listed_at, -id)."""
    qs = base if base is not None else Entry.objects.listed()
    if not search.include_deprecated:
        qs = qs.exclude(state=State.DEPRECATED)
    for kind, values in search.facet_filters():
        for value in values[:MAX_FILTER_VALUES]:
            value = facet_value(kind, value)
            qs = qs.filter(pk__in=Facet.objects.filter(kind=kind, value=value).values("entry_id"))
    if search.provider.strip():
        qs = qs.filter(provider__iexact=search.provider.strip())
    if search.verified is not None:
        qs = qs.filter(domain_proven()) if search.verified else qs.exclude(domain_proven())
    if search.signed is not None:
        qs = qs.filter(signed=search.signed)
    if search.healthy is not None:
        qs = qs.filter(health=Health.HEALTHY) if search.healthy else qs.exclude(health=Health.HEALTHY)
    if search.kind:
        qs = qs.filter(kind=search.kind)
    text = search.q.strip()[:MAX_QUERY_LENGTH]
    if text and connection.vendor == "postgresql":
        query = SearchQuery(text, search_type="websearch", config="english")
        qs = qs.filter(search=query).annotate(
            rank=Cast(SearchRank(F("search"), query, cover_density=False) * 1_000_000, IntegerField())
        )
    else:
        if text:
            qs = qs.filter(
                Q(name__icontains=text)
                | Q(description__icontains=text)
                | Q(pk__in=Facet.objects.filter(value__icontains=text).values("entry_id"))
            )
        qs = qs.annotate(rank=Value(0, output_field=IntegerField()))
    if search.ordering == "relevance":
        return qs.order_by("-rank", "-id")
    return qs.order_by(F("listed_at").desc(nulls_last=True), "-id")


# --- keyset pages ---------------------------------------------------------------------


class BadCursor(ValueError):
    """A cursor this server did not make, or made for another ordering."""


@dataclass(frozen=True)
class Page:
    entries: list[Entry]
    next_cursor: str | None
    previous_cursor: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _encode(order: Order, key: list[Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"o": order, "k": key})).decode().rstrip("=")


def _decode(cursor: str, order: Order) -> list[Any]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        key = data["k"]
        if data["o"] != order or not isinstance(key, list) or len(key) != 2 or not isinstance(key[1], int):
            raise ValueError
    except (ValueError, TypeError, KeyError, orjson.JSONDecodeError):
        raise BadCursor("the cursor is not one this server gave for this ordering: start again without it") from None
    return key


def page(qs: QuerySet[Entry], *, order: Order, cursor: str | None, size: int) -> Page:
    """One page of `qs` (ordered by `entry_search`) after `cursor`: stable under inserts, as
    each page continues from the last entry's sort key rather than from an offset."""
    if cursor:
        first, last_id = _decode(cursor, order)
        if order == "relevance":
            if not isinstance(first, int):
                raise BadCursor("the cursor is damaged: start again without it")
            qs = qs.filter(Q(rank__lt=first) | Q(rank=first, pk__lt=last_id))
        else:
            try:
                at = parse_datetime(first) if isinstance(first, str) else None
            except ValueError:  # well formed, but no such moment (month 13)
                at = None
            # Cursors made here carry UTC (listed_at is stored so): any other offset is forged,
            # and some (year 9999 at -23:59) Postgres cannot even compare.
            if first is not None and (at is None or at.utcoffset() != timedelta(0)):
                raise BadCursor("the cursor is damaged: start again without it")
            if at is None:
                qs = qs.filter(listed_at__isnull=True, pk__lt=last_id)
            else:
                qs = qs.filter(Q(listed_at__lt=at) | Q(listed_at=at, pk__lt=last_id) | Q(listed_at__isnull=True))
    rows = list(qs[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    next_cursor = None
    if more and rows:
        last = rows[-1]
        first_key: Any = last.rank if order == "relevance" else (last.listed_at.isoformat() if last.listed_at else None)  # type: ignore[attr-defined]
        next_cursor = _encode(order, [first_key, last.pk])
    return Page(entries=rows, next_cursor=next_cursor)


# --- one entry --------------------------------------------------------------------------


def sees_everything_of(user: Any, entry: Entry) -> bool:
    """Whether `user` sees all of an entry (every version, its decisions): curators, its
    submitter and every member of its tenant, viewers included (as entries_visible_to)."""
    if not (user and user.is_authenticated):
        return False
    if is_curator(user) or entry.submitted_by_id == user.pk:
        return True
    return entry.tenant_id is not None and Membership.objects.filter(user=user, tenant_id=entry.tenant_id).exists()


def shown_version(entry: Entry, *, user: Any = None) -> CardVersion | None:
    """The card a caller sees: the approved one for the public, the latest for its owners and
    curators."""
    if entry.approved_version_id and not sees_everything_of(user, entry):
        return entry.approved_version
    return entry.current_version or entry.approved_version


def versions_of(entry: Entry, *, user: Any = None) -> QuerySet[CardVersion]:
    """Card versions a caller may see: all for owners and curators, up to the approved one
    for the public (a newer card not yet approved is not public)."""
    qs = CardVersion.objects.filter(entry=entry).order_by("-number")
    if not sees_everything_of(user, entry):
        approved = entry.approved_version.number if entry.approved_version else 0
        qs = qs.filter(number__lte=approved)
    return qs


def decisions_of(entry: Entry) -> QuerySet[Decision]:
    return Decision.objects.filter(entry=entry).select_related("actor", "version").order_by("-at", "-id")


def checks_of(entry: Entry, *, limit: int = 50) -> list[HealthCheck]:
    return list(HealthCheck.objects.filter(entry=entry).order_by("-at")[:limit])


def uptime(entry: Entry, *, days: int, now: datetime | None = None) -> float | None:
    """The share of good checks over the last `days` days (None: no check then)."""
    since = (now or timezone.now()) - timedelta(days=days)
    counts = HealthCheck.objects.filter(entry=entry, at__gte=since).aggregate(
        total=Count("pk"), good=Count("pk", filter=Q(ok=True))
    )
    if not counts["total"]:
        return None
    return round(100.0 * counts["good"] / counts["total"], 2)


def uptimes(entry: Entry, *, now: datetime | None = None) -> dict[str, float | None]:
    """`uptime` over the last 1, 7 and 30 days, in one query."""
    now = now or timezone.now()
    windows = (1, 7, 30)
    counts = HealthCheck.objects.filter(entry=entry, at__gte=now - timedelta(days=max(windows))).aggregate(
        **{
            f"{kind}{d}": Count(
                "pk", filter=Q(at__gte=now - timedelta(days=d), **({"ok": True} if kind == "good" else {}))
            )
            for d in windows
            for kind in ("total", "good")
        }
    )
    return {
        f"{d}d": round(100.0 * counts[f"good{d}"] / counts[f"total{d}"], 2) if counts[f"total{d}"] else None
        for d in windows
    }


def latency_median(entry: Entry, *, days: int = 1) -> float | None:
    since = timezone.now() - timedelta(days=days)
    values = sorted(
        v
        for v in HealthCheck.objects.filter(entry=entry, at__gte=since, latency_ms__isnull=False).values_list(
            "latency_ms", flat=True
        )
        if v is not None
    )
    return float(values[len(values) // 2]) if values else None


def review_queue() -> QuerySet[Entry]:
    """Entries waiting for a curator, oldest first."""
    return Entry.objects.filter(state=State.PENDING).order_by("state_changed_at", "id")


def open_flags() -> QuerySet[Flag]:
    return Flag.objects.filter(resolved_at__isnull=True).select_related("entry", "user").order_by("created_at")


def facet_counts(qs: QuerySet[Entry], kind: str, *, limit: int = 30) -> list[tuple[str, int]]:
    """The commonest values of one facet among `qs` (the directory page's filter choices)."""
    rows = (
        Facet.objects.filter(kind=kind, entry_id__in=qs.order_by().values("pk"))
        .values("value")
        .annotate(n=Count("entry_id"))
        .order_by("-n", "value")[:limit]
    )
    return [(r["value"], r["n"]) for r in rows]


def conformance_of(entry: Entry) -> list[ConformanceResult]:
    """The results of the entry's latest conformance run, in the order they were asked."""
    return list(ConformanceResult.objects.filter(entry=entry).order_by("id"))


def attestation_of(entry: Entry) -> Attestation | None:
    """The entry's newest attestation, standing or withdrawn."""
    return Attestation.objects.filter(entry=entry).order_by("-issued_at", "-id").first()


def attestation_by_jti(jti: str) -> Attestation | None:
    if not isinstance(jti, str) or not 1 <= len(jti) <= 64:
        return None
    return Attestation.objects.filter(jti=jti).first()
