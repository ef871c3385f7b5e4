"""Directory entries for tests (and benchmarks), made without the network.

    card = read_card(name="Weather", tags=["forecast"], capabilities=["streaming"])
    entry = make_entry(name="Weather", tags=["forecast"], state="approved")
    entries = make_entries([{"name": f"Agent {i}"} for i in range(500)])   # a few queries in all
    newer = new_version(entry, description="changed")   # as the liveness job finds a changed card

Every entry is made as `registry.services` would leave it: a card version (an A2A 1.0 card,
indexed by `registry.cards.normalise`, hashed by `registry.cards.card_hash`; not validated), the
entry's columns, facets and (on Postgres) search vector copied from the listed version, and one
decision. `make_entries` does it in bulk: the facets come from `services._facets`, the search
text from `cards.search_text` and the vector is the expression `services._reindex` writes
(tests/test_registry_api.py checks they agree), in one statement for all entries.

Spec keys (all optional): name, description, provider, url (the endpoint), tags, skills (ids, or
dicts with id/name/description/tags/examples), examples (added to the first skill),
input_modes, output_modes, capabilities (streaming, push_notifications, extended_card),
bindings, protocol_versions, security (scheme types), signed_kid (a valid signature by that
key id), state (default approved), approved (default: approved, deprecated and suspended have
an approved version), verified (default: approved or has an approved version), kind (remote, or
hosted with `agent`), agent, tenant, submitted_by, listed_at, health, last_checked_at,
latency_ms, card_url.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest
from django.db import connection, transaction
from django.utils import timezone

from registry import cards, services
from registry.models import CardVersion, Decision, Entry, Facet, Health, HealthCheck, Kind, ProofMethod, State

_serial = itertools.count(1)
_run = uuid.uuid4().hex[:8]

_CAPABILITY_MEMBERS = {
    "streaming": "streaming",
    "push_notifications": "pushNotifications",
    "extended_card": "extendedAgentCard",
}
_SCHEMES = {
    "apiKey": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}},
    "http": {"httpAuthSecurityScheme": {"scheme": "Bearer"}},
    "oauth2": {
        "oauth2SecurityScheme": {
            "flows": {"clientCredentials": {"tokenUrl": "https://id.example.test/token", "scopes": {}}}
        }
    },
    "openIdConnect": {
        "openIdConnectSecurityScheme": {"openIdConnectUrl": "https://id.example.test/.well-known/openid-configuration"}
    },
    "mutualTLS": {"mtlsSecurityScheme": {}},
}


def _skills(spec: dict[str, Any]) -> list[dict[str, Any]]:
    given = spec.get("skills")
    if given is None:
        given = [{"id": "main", "name": f"{spec.get('name', 'Agent')} skill"}]
    skills = []
    for i, skill in enumerate(given):
        skill = {"id": skill, "name": skill} if isinstance(skill, str) else dict(skill)
        skill.setdefault("name", skill["id"])
        skill.setdefault("description", f"What {skill['name']} does.")
        skill.setdefault("tags", list(spec.get("tags", ())) if i == 0 else [])
        if i == 0 and spec.get("examples"):
            skill["examples"] = list(spec["examples"])
        skills.append(skill)
    return skills


def card_document(**spec: Any) -> dict[str, Any]:
    """A valid A2A 1.0 card with what `spec` says (see the module's docstring)."""
    url = spec.get("url") or "https://agents.example.test/rpc"
    bindings = list(spec.get("bindings") or ["JSONRPC"])
    versions = list(spec.get("protocol_versions") or ["1.0"])
    capabilities = set(spec.get("capabilities", ()))
    document: dict[str, Any] = {
        "name": spec.get("name", "Agent"),
        "description": spec.get("description", f"The {spec.get('name', 'Agent')} agent."),
        "supportedInterfaces": [
            {"url": url, "protocolBinding": binding, "protocolVersion": versions[i % len(versions)]}
            for i, binding in enumerate(bindings)
        ],
        "version": "1.0.0",
        "capabilities": {member: key in capabilities for key, member in _CAPABILITY_MEMBERS.items()},
        "defaultInputModes": list(spec.get("input_modes") or ["text/plain"]),
        "defaultOutputModes": list(spec.get("output_modes") or ["text/plain"]),
        "skills": [
            {k: v for k, v in s.items() if k in ("id", "name", "description", "tags", "examples")}
            for s in _skills(spec)
        ],
    }
    if spec.get("provider"):
        document["provider"] = {"organization": spec["provider"], "url": "https://provider.example.test"}
    if spec.get("security"):
        document["securitySchemes"] = {f"s{i}": _SCHEMES[kind] for i, kind in enumerate(spec["security"])}
    return document


def card_index(**spec: Any) -> cards.CardIndex:
    """The index of `card_document(**spec)`, as `registry.cards.normalise` makes it."""
    return cards.normalise(card_document(**spec), "1.0")


def read_card(
    *, card_url: str = "https://agents.example.test/.well-known/agent-card.json", **spec: Any
) -> services.ReadCard:
    """What `services.read_remote_card` would return for a card made of `spec` (a signed_kid
    stands for a signature that verified)."""
    document = card_document(**spec)
    signatures = (
        [{"kid": spec["signed_kid"], "alg": "ES256", "jku": "", "valid": True, "reason": "verified"}]
        if spec.get("signed_kid")
        else []
    )
    return services.ReadCard(
        fetched_from=card_url,
        raw=orjson.dumps(document).decode(),
        document=document,
        dialect="1.0",
        index=cards.normalise(document, "1.0"),
        hash=cards.card_hash(document),
        etag="",
        signatures=signatures,
    )


def _unique_url() -> str:
    return f"https://a{next(_serial)}-{_run}.agents.example.test/.well-known/agent-card.json"


def make_entries(specs: list[dict[str, Any]], *, now: datetime | None = None) -> list[Entry]:
    """Entries as `services` leaves them, in bulk (a handful of statements for any number)."""
    now = now or timezone.now()
    rows: list[tuple[Entry, services.ReadCard, cards.CardIndex, bool]] = []
    for spec in specs:
        state = spec.get("state", State.APPROVED)
        approved = spec.get("approved", state in (State.APPROVED, State.DEPRECATED, State.SUSPENDED))
        verified = spec.get("verified", approved or state == State.PENDING)
        kind = spec.get("kind", Kind.HOSTED if spec.get("agent") else Kind.REMOTE)
        card_url = spec.get("card_url") or _unique_url()
        card = read_card(**{**spec, "card_url": card_url})
        index = card.index
        valid = [s for s in card.signatures if s.get("valid")]
        entry = Entry(
            kind=kind,
            tenant=spec.get("tenant") or (spec["agent"].tenant if spec.get("agent") else None),
            agent=spec.get("agent"),
            submitted_by=spec.get("submitted_by"),
            card_url=card_url,
            domain=card_url.split("/")[2].split(":")[0],
            state=state,
            state_changed_at=now,
            proof_token=uuid.uuid4().hex + uuid.uuid4().hex if kind == Kind.REMOTE else "",
            domain_verified_at=now if verified else None,
            domain_verified_by=(ProofMethod.HOSTED if kind == Kind.HOSTED else ProofMethod.HTTP) if verified else "",
            name=index.name[:300],
            description=index.description,
            provider=index.provider_organization[:300],
            endpoint_url=index.url,
            dialect=card.dialect,
            signed=bool(valid),
            signing_kid=str(valid[0]["kid"]) if valid else "",
            health=spec.get("health", Health.UNKNOWN),
            last_checked_at=spec.get("last_checked_at"),
            latency_ms=spec.get("latency_ms"),
            listed_at=spec.get("listed_at", now if approved else None),
            next_check_at=now + timedelta(days=1),
        )
        rows.append((entry, card, index, approved))
    with transaction.atomic():
        entries = Entry.objects.bulk_create([r[0] for r in rows])
        versions = CardVersion.objects.bulk_create(
            [
                CardVersion(
                    entry=entry,
                    number=1,
                    hash=card.hash,
                    dialect=card.dialect,
                    fetched_from=card.fetched_from,
                    raw=card.raw,
                    document=card.document,
                    index=dataclasses.asdict(index),
                    signatures=card.signatures,
                    fetched_at=now,
                )
                for entry, (_, card, index, _) in zip(entries, rows, strict=True)
            ]
        )
        for entry, version, (_, _, _, approved) in zip(entries, versions, rows, strict=True):
            entry.current_version = version
            entry.approved_version = version if approved else None
        Entry.objects.bulk_update(entries, ["current_version", "approved_version"])
        Facet.objects.bulk_create(
            [
                Facet(entry=entry, kind=kind, value=value)
                for entry, (_, _, index, _) in zip(entries, rows, strict=True)
                for kind, value in services._facets(dataclasses.asdict(index))
            ]
        )
        Decision.objects.bulk_create(
            [
                Decision(
                    entry=entry,
                    from_state="",
                    to_state=entry.state,
                    actor=entry.submitted_by,
                    reason="seeded",
                    version=entry.current_version,
                    at=now,
                )
                for entry in entries
            ]
        )
        if connection.vendor == "postgresql" and entries:
            _search_vectors([(entry.pk, index) for entry, (_, _, index, _) in zip(entries, rows, strict=True)])
    return entries


def _search_vectors(rows: list[tuple[int, cards.CardIndex]]) -> None:
    """Each entry's weighted vector, as services._reindex writes it, in one statement."""
    values, params = [], []
    for pk, index in rows:
        blocks = cards.search_text(index)
        values.append("(%s, %s, %s, %s, %s)")
        params += [pk, blocks["A"], blocks["B"], blocks["C"], blocks["D"]]
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE registry_entry AS e SET search = "
            " setweight(to_tsvector('english'::regconfig, COALESCE(v.a, '')), 'A')"
            " || setweight(to_tsvector('english'::regconfig, COALESCE(v.b, '')), 'B')"
            " || setweight(to_tsvector('english'::regconfig, COALESCE(v.c, '')), 'C')"
            " || setweight(to_tsvector('english'::regconfig, COALESCE(v.d, '')), 'D')"
            f" FROM (VALUES {', '.join(values)}) AS v(id, a, b, c, d) WHERE e.id = v.id",
            params,
        )


def make_entry(**spec: Any) -> Entry:
    """One entry (see the module's docstring for `spec`), read back as the ORM gives it."""
    entry = make_entries([spec])[0]
    return Entry.objects.select_related("approved_version", "current_version").get(pk=entry.pk)


def new_version(entry: Entry, *, at: datetime | None = None, **spec: Any) -> CardVersion:
    """A changed card, found as the liveness job finds one (services._apply_card): kept as a
    new version; an approved entry goes back to review while its approved version stays listed."""
    card = read_card(**{**spec, "card_url": entry.card_url})
    with transaction.atomic():
        locked = (
            Entry.objects.select_for_update(of=("self",))
            .select_related("current_version", "approved_version")
            .get(pk=entry.pk)
        )
        version = services._apply_card(locked, card, at=at or timezone.now())
    assert version is not None, "the card did not change"
    entry.refresh_from_db()
    return version


def add_checks(entry: Entry, oks: list[bool], *, every: timedelta = timedelta(hours=1)) -> list[HealthCheck]:
    """Liveness checks, the last one now and each earlier one `every` before."""
    now = timezone.now()
    return HealthCheck.objects.bulk_create(
        [
            HealthCheck(
                entry=entry,
                at=now - every * (len(oks) - 1 - i),
                ok=ok,
                card_ok=True,
                endpoint_ok=ok,
                status=200 if ok else 503,
                latency_ms=20 + i,
                detail="" if ok else "endpoint: HTTP 503",
            )
            for i, ok in enumerate(oks)
        ]
    )


@pytest.fixture
def fresh_cache(settings) -> Any:
    """Django's cache (Redis) under a key prefix of this test's own, and the directory's filter
    choices this process kept dropped: throttles, login counts and filter counts start from
    nothing, and no other test (or test run) shares them.
    Nothing is flushed: the Redis database also holds the broker's queues."""
    from django.core.cache import cache

    from accounts import changes
    from registry.views import FACETS

    FACETS.clear()
    # The filter choices are kept only while this process hears of every change (as a server
    # does): wait for the listener, so that a test sees them kept.
    deadline = time.monotonic() + 5
    while not changes.hears_every_change():
        assert time.monotonic() < deadline, "the accounts change listener never subscribed"
        time.sleep(0.01)
    settings.CACHES = {
        name: {**config, "KEY_PREFIX": f"{config.get('KEY_PREFIX', '')}-{uuid.uuid4().hex[:12]}"}
        for name, config in settings.CACHES.items()
    }
    return cache
