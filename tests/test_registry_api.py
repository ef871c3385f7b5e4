"""The directory's REST API (/api/registry/): search with filters and keyset pages over a few
hundred seeded entries, one entry's detail, its card versions, submitting a remote agent (a
real card server on loopback), proving its domain, curation moves, flags, tokens; and that no
request, however odd, gets a server error."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry import cards, proofs, services
from registry.models import CardVersion, Entry, Facet, Flag, State
from registry.tokens import token_create
from tests import registry_factories
from tests.card_server import CardServer
from tests.conftest import make_agent
from tests.registry_factories import add_checks, card_document, make_entries, make_entry, new_version

fresh_cache = registry_factories.fresh_cache  # the fixture

AGENTS = "/api/registry/agents/"
HOST = "agents.example.test"


# --- callers ------------------------------------------------------------------------------


class Api:
    """The test client as one caller: anonymous, or with a token."""

    def __init__(self, client, token: str | None = None) -> None:
        self.client = client
        self.headers = {"Authorization": f"Token {token}"} if token else {}

    def get(self, path: str, **params: Any):
        query = urlencode(params, doseq=True)
        return self.client.get(f"{path}?{query}" if query else path, headers=self.headers)

    def post(self, path: str, body: Any = None, *, raw: bytes | None = None, content_type: str = "application/json"):
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(path, data=data, content_type=content_type, headers=self.headers)


def make_user(django_user_model, name: str, *, curator: bool = False, password: str = "pw-" + "x" * 12):
    user = django_user_model.objects.create_user(name, f"{name}@example.test", password)
    if curator:
        user.user_permissions.add(Permission.objects.get(codename="curate_entry"))
    return user


@pytest.fixture
def anon(client) -> Api:
    return Api(client)


@pytest.fixture
def users(db, django_user_model) -> dict[str, Any]:
    return {
        "owner": make_user(django_user_model, "olivia"),
        "stranger": make_user(django_user_model, "sam"),
        "curator": make_user(django_user_model, "cora", curator=True),
    }


@pytest.fixture
def as_(client, users):
    """as_("owner") -> an Api with that user's token."""

    made: dict[str, str] = {}

    def caller(name: str) -> Api:
        if name not in made:
            made[name] = token_create(user=users[name])[1]
        return Api(client, made[name])

    return caller


# --- seeded directory ---------------------------------------------------------------------


def spec(i: int, now) -> dict[str, Any]:
    """The i-th seeded entry: every filter splits the directory differently."""
    state = State.APPROVED
    approved = True
    if i % 25 == 0:
        state = State.DEPRECATED
    elif i % 30 == 1:
        state, approved = State.PENDING, False  # never approved: not listed
    elif i % 40 == 3:
        state, approved = State.REJECTED, False
    return {
        "name": f"Agent {i:03d}",
        "description": f"Seeded agent number {i}.",
        "tags": [["weather"], ["finance"], ["travel", "weather"]][i % 3],
        "skills": [f"skill-{i % 5}"],
        "input_modes": ["text/plain", "image/png"] if i % 4 == 0 else ["text/plain"],
        "output_modes": ["application/json"] if i % 2 else ["text/plain"],
        "capabilities": (["streaming"] if i % 2 == 0 else []) + (["push_notifications"] if i % 6 == 0 else []),
        "bindings": ["JSONRPC", "HTTP+JSON"] if i % 5 == 0 else ["JSONRPC"],
        "protocol_versions": ["1.0"] if i % 7 else ["0.3.0"],
        "security": [["apiKey"], ["oauth2"], []][i % 3],
        "provider": f"Provider {i % 4}",
        "signed_kid": "key-1" if i % 10 == 0 else None,
        "health": "healthy" if i % 2 == 0 else "stale",
        "state": state,
        "approved": approved,
        "verified": True,
        # Pairs of entries share a moment: ties are broken by id.
        "listed_at": now - timedelta(minutes=i // 2) if approved else None,
    }


SEEDED = 300


@pytest.fixture
def seeded(db, tenant) -> dict[int, dict[str, Any]]:
    """300 remote entries and 4 hosted ones: entry id -> its spec."""
    now = timezone.now()
    specs = [spec(i, now) for i in range(SEEDED)]
    specs += [
        {**spec(1000 + i, now), "agent": make_agent(tenant, f"hosted{i}", "echo"), "state": State.APPROVED}
        for i in range(4)
    ]
    for s in specs[SEEDED:]:
        s["approved"] = True
        s["listed_at"] = now
    entries = make_entries(specs, now=now)
    return {e.pk: s for e, s in zip(entries, specs, strict=True)}


def listed(seeded, *, deprecated: bool = False) -> dict[int, dict[str, Any]]:
    return {pk: s for pk, s in seeded.items() if s["approved"] and (s["state"] != State.DEPRECATED or deprecated)}


def walk(api: Api, **params: Any) -> list[int]:
    """Every id the search finds, following `next` page by page; pages must not overlap."""
    ids: list[int] = []
    response = api.get(AGENTS, **params)
    pages = 0
    while True:
        assert response.status_code == 200, response.content
        body = response.json()
        page = [r["id"] for r in body["results"]]
        assert not set(page) & set(ids), "pages overlap"
        ids += page
        pages += 1
        assert pages < 1000
        if body["next"] is None:
            return ids
        assert body["next"].startswith("http://testserver/api/registry/agents/?")
        response = api.client.get(body["next"], headers=api.headers)


FILTERS = {
    "tag=weather": ({"tag": "weather"}, lambda s: "weather" in s["tags"]),
    "tag=WEATHER (any case)": ({"tag": "WEATHER"}, lambda s: "weather" in s["tags"]),
    "tag=travel&tag=weather (both)": ({"tag": ["travel", "weather"]}, lambda s: "travel" in s["tags"]),
    "skill": ({"skill": "skill-3"}, lambda s: s["skills"] == ["skill-3"]),
    "input_mode": ({"input_mode": "image/png"}, lambda s: "image/png" in s["input_modes"]),
    "output_mode": ({"output_mode": "application/json"}, lambda s: "application/json" in s["output_modes"]),
    "capability=streaming": ({"capability": "streaming"}, lambda s: "streaming" in s["capabilities"]),
    "capability=push_notifications": (
        {"capability": "push_notifications"},
        lambda s: "push_notifications" in s["capabilities"],
    ),
    "binding (any case)": ({"binding": "http+json"}, lambda s: "HTTP+JSON" in s["bindings"]),
    "protocol_version": ({"protocol_version": "0.3.0"}, lambda s: s["protocol_versions"] == ["0.3.0"]),
    "security": ({"security": "oauth2"}, lambda s: s["security"] == ["oauth2"]),
    "provider": ({"provider": "provider 2"}, lambda s: s["provider"] == "Provider 2"),
    "signed=true": ({"signed": "true"}, lambda s: bool(s["signed_kid"])),
    "signed=0": ({"signed": "0"}, lambda s: not s["signed_kid"]),
    "healthy=1": ({"healthy": "1"}, lambda s: s["health"] == "healthy"),
    "healthy=false": ({"healthy": "false"}, lambda s: s["health"] != "healthy"),
    "verified=true": ({"verified": "true"}, lambda s: True),
    "verified=false": ({"verified": "false"}, lambda s: False),  # nothing unproven is listed
    "kind=hosted": ({"kind": "hosted"}, lambda s: "agent" in s),
    "kind=remote": ({"kind": "remote"}, lambda s: "agent" not in s),
    "several filters": (
        {"tag": "weather", "capability": "streaming", "healthy": "true", "output_mode": "text/plain"},
        lambda s: "weather" in s["tags"] and "streaming" in s["capabilities"] and s["health"] == "healthy",
    ),
}


@pytest.mark.parametrize("name", list(FILTERS))
def test_each_filter_narrows_the_directory_to_the_listed_entries_that_match(anon, seeded, name):
    params, matches = FILTERS[name]
    expected = {pk for pk, s in listed(seeded).items() if matches(s)}
    found = walk(anon, page_size=100, **params)
    assert set(found) == expected
    assert len(found) == len(expected)
    assert name.startswith("verified=false") or expected, "the seed should give every filter something to find"


def test_the_unfiltered_directory_is_every_listed_entry_newest_first_ties_by_id(anon, seeded):
    found = walk(anon, page_size=100)
    expected = sorted(listed(seeded), key=lambda pk: (seeded[pk]["listed_at"], pk), reverse=True)
    assert found == expected


@pytest.mark.parametrize("page_size", [1, 7, 20, 100])
def test_pages_are_disjoint_cover_everything_and_keep_the_order_of_one_long_page(anon, seeded, page_size):
    whole = anon.get(AGENTS, page_size=100, tag="weather").json()["results"]
    found = walk(anon, page_size=page_size, tag="weather")
    assert len(whole) == 100 and found[:100] == [r["id"] for r in whole]
    assert len(found) == len({pk for pk, s in listed(seeded).items() if "weather" in s["tags"]})


def test_relevance_pages_follow_the_ranking_and_cover_every_match(anon, seeded):
    found = walk(anon, q="seeded agent", page_size=9)
    assert set(found) == set(listed(seeded))
    ranks = [r["rank"] for r in anon.get(AGENTS, q="seeded agent", page_size=100).json()["results"]]
    assert ranks == sorted(ranks, reverse=True) and all(isinstance(r, int) for r in ranks)


def test_an_entry_listed_while_a_client_pages_does_not_shift_the_pages(anon, seeded):
    first = anon.get(AGENTS, page_size=10).json()
    make_entries([{"name": "Newcomer", "listed_at": timezone.now() + timedelta(hours=1)}])
    rest = walk_from(anon, first["next"])
    ids = [r["id"] for r in first["results"]] + rest
    assert len(ids) == len(set(ids)) == len(listed(seeded))


def walk_from(api: Api, url: str | None) -> list[int]:
    ids: list[int] = []
    while url:
        body = api.client.get(url).json()
        ids += [r["id"] for r in body["results"]]
        url = body["next"]
    return ids


def test_relevance_ranks_a_name_match_above_a_description_match(anon, db):
    in_description = make_entry(name="Helper", description="Knows everything about kestrels.")
    in_name = make_entry(name="Kestrel", description="A bird-watching helper.")
    make_entry(name="Unrelated", description="Nothing to see.")
    body = anon.get(AGENTS, q="kestrel").json()
    assert [r["id"] for r in body["results"]] == [in_name.pk, in_description.pk]
    assert body["results"][0]["rank"] > body["results"][1]["rank"] > 0
    recent = anon.get(AGENTS, q="kestrel", order="recent").json()["results"]
    assert [r["id"] for r in recent] == [in_name.pk, in_description.pk] and recent[0]["rank"] is None


def test_the_text_query_finds_skills_tags_and_examples(anon, db):
    by_tag = make_entry(name="One", tags=["astronomy"])
    by_example = make_entry(name="Two", examples=["When does the next comet pass?"])
    make_entry(name="Three")
    assert {r["id"] for r in anon.get(AGENTS, q="astronomy").json()["results"]} == {by_tag.pk}
    assert {r["id"] for r in anon.get(AGENTS, q="comets").json()["results"]} == {by_example.pk}


def test_deprecated_entries_are_left_out_unless_asked_for(anon, seeded):
    with_them = set(walk(anon, page_size=100, deprecated="true"))
    assert with_them == set(listed(seeded, deprecated=True))
    assert with_them - set(walk(anon, page_size=100)) == {
        pk for pk, s in seeded.items() if s["state"] == State.DEPRECATED
    }


def test_a_summary_says_what_the_entry_can_do_and_how_far_to_trust_it(anon, db):
    entry = make_entry(
        name="Weather",
        provider="Acme Weather",
        tags=["forecast"],
        skills=[{"id": "forecast", "name": "Forecast"}],
        capabilities=["streaming"],
        security=["apiKey"],
        signed_kid="key-7",
        health="healthy",
        latency_ms=42,
    )
    (result,) = anon.get(AGENTS).json()["results"]
    assert result == {
        "id": entry.pk,
        "url": f"http://testserver/api/registry/agents/{entry.pk}/",
        "page_url": f"http://testserver/registry/{entry.pk}/",
        "name": "Weather",
        "description": "The Weather agent.",
        "provider": "Acme Weather",
        "kind": "remote",
        "state": "approved",
        "dialect": "1.0",
        "protocol_versions": ["1.0"],
        "bindings": ["JSONRPC"],
        "endpoint_url": "https://agents.example.test/rpc",
        "tags": ["forecast"],
        "skills": [{"id": "forecast", "name": "Forecast"}],
        "capabilities": ["streaming"],
        "input_modes": ["text/plain"],
        "output_modes": ["text/plain"],
        "security": ["apiKey"],
        "verified": True,
        "proven": entry.domain,
        "verified_by": "http",
        "signed": True,
        "signing_kid": "key-7",
        "health": "healthy",
        "last_checked_at": None,
        "latency_ms": 42,
        "listed_at": result["listed_at"],
        "rank": None,
    }


def test_entries_not_approved_yet_are_not_in_the_public_directory(anon, users, db):
    make_entry(name="Draft", state=State.DRAFT, submitted_by=users["owner"])
    make_entry(name="Waiting", state=State.PENDING, submitted_by=users["owner"])
    make_entry(name="Refused", state=State.REJECTED, submitted_by=users["owner"])
    make_entry(name="Suspended", state=State.SUSPENDED, submitted_by=users["owner"])
    shown = make_entry(name="Shown")
    assert [r["id"] for r in anon.get(AGENTS).json()["results"]] == [shown.pk]


def test_mine_lists_the_caller_s_own_entries_in_every_state(anon, as_, users, tenant, db):
    from accounts.services import member_add

    member_add(tenant=tenant, user=users["owner"], role="viewer")
    own = {
        make_entry(name=f"Own {state}", state=state, submitted_by=users["owner"]).pk
        for state in (State.DRAFT, State.PENDING, State.REJECTED, State.DEPRECATED, State.APPROVED)
    }
    own.add(make_entry(name="The tenant's", state=State.DRAFT, tenant=tenant).pk)
    make_entry(name="Someone else's", state=State.DRAFT, submitted_by=users["stranger"])
    make_entry(name="Listed, not mine")
    assert set(walk(as_("owner"), mine="true")) == own
    assert walk(as_("stranger"), mine="true") != []
    response = anon.get(AGENTS, mine="true")
    assert response.status_code == 401 and response.json()["detail"] == "sign in to list your own entries"


def test_curators_may_list_entries_in_any_state_and_others_only_those_they_see(anon, as_, users, db):
    draft = make_entry(name="Someone's draft", state=State.DRAFT, submitted_by=users["stranger"])
    pending = make_entry(name="Waiting", state=State.PENDING, submitted_by=users["stranger"])
    approved = make_entry(name="Listed")
    assert set(walk(as_("curator"), state=["draft", "pending"])) == {draft.pk, pending.pk}
    assert walk(as_("curator")) == [approved.pk]  # without `state`: the public directory
    assert walk(as_("owner"), state="draft") == []
    assert walk(anon, state="draft") == []
    assert walk(as_("stranger"), state="draft") == [draft.pk]


def test_a_page_costs_the_same_number_of_queries_for_1_and_50_results(client, as_, users, db):
    def cost(api: Api, **params: Any) -> int:
        with CaptureQueriesContext(connection) as queries:
            response = api.get(AGENTS, page_size=50, **params)
        assert response.status_code == 200
        return len(queries)

    make_entries([{"name": "Lone kestrel", "tags": ["birds"], "capabilities": ["streaming"]}])
    callers = [Api(client), as_("owner")]
    queries = [{}, {"q": "kestrel"}, {"tag": "birds", "capability": "streaming"}]
    one = [cost(api, **q) for api in callers for q in queries]
    make_entries(
        [
            {"name": f"Kestrel {i}", "tags": ["birds"], "capabilities": ["streaming"], "signed_kid": "k"}
            for i in range(60)
        ]
    )
    many = [cost(api, **q) for api in callers for q in queries]
    assert one == many
    assert max(many) <= 2  # the page (and the token's user)


# --- bad queries ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, field, says",
    [
        ({"kind": "robot"}, "kind", "use one of: hosted, remote"),
        ({"order": "best"}, "order", "use one of: relevance, recent"),
        ({"capability": "telepathy"}, "capability", "use one of: streaming, push_notifications"),
        ({"state": "limbo"}, "state", "use one of: draft, pending, approved"),
        ({"page_size": "0"}, "page_size", "greater than or equal to 1"),
        ({"page_size": "101"}, "page_size", "less than or equal to 100"),
        ({"page_size": "ten"}, "page_size", "valid integer"),
        ({"healthy": "perhaps"}, "healthy", "valid boolean"),
        ({"tag": [f"t{i}" for i in range(11)]}, "tag", "no more than 10"),
        ({"q": "x" * 1001}, "q", "no more than 1000"),
        ({"q": "a\x00b"}, "q", "Null characters are not allowed"),
        ({"cursor": "bm9wZQ"}, "cursor", "start again without it"),
    ],
)
def test_a_bad_query_is_400_naming_the_parameter_and_what_is_allowed(anon, db, params, field, says):
    response = anon.get(AGENTS, **params)
    assert response.status_code == 400
    body = response.json()
    assert field in body["errors"] and body["detail"].startswith(f"{field}"), body
    assert says in json.dumps(body["errors"]), body


def test_a_cursor_from_another_ordering_or_damaged_is_400(anon, db):
    make_entries([{"name": f"Kestrel {i}"} for i in range(3)])
    recent = anon.get(AGENTS, page_size=1).json()["next"].split("cursor=")[1]
    relevant = anon.get(AGENTS, page_size=1, q="kestrel").json()["next"].split("cursor=")[1]
    for params in ({"q": "kestrel", "cursor": recent}, {"cursor": relevant}, {"cursor": recent[:-3]}):
        response = anon.get(AGENTS, **params)
        assert response.status_code == 400, params
        assert "start again without it" in response.json()["detail"]


def _cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


_json_scalar = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text()
_date_text = st.datetimes(timezones=st.timezones() | st.none()).map(lambda d: d.isoformat()) | st.sampled_from(
    ["2026-13-45T00:00:00", "9999-12-31T23:59:59.999999-23:59", "0001-01-01T00:00:00+23:59", "2026-01-01T00:00+99:00"]
)


@pytest.mark.django_db
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    order=st.sampled_from(["recent", "relevance", "other"]),
    first=_json_scalar | _date_text,
    last=_json_scalar,
)
def test_no_cursor_a_client_makes_up_makes_the_search_answer_500(client, order, first, last):
    if not Entry.objects.exists():
        make_entries([{"name": f"Kestrel {i}"} for i in range(3)])
    q = {"q": "kestrel"} if order == "relevance" else {}
    response = Api(client).get(AGENTS, cursor=_cursor({"o": order, "k": [first, last]}), **q)
    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert "start again without it" in response.json()["detail"]


_odd = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["\x00", "'", "(", "!", "&|", ":*", "x" * 3000, "-1", "99999999999999999999", "true", "", "%", "\\"]
)
_param = st.sampled_from(
    ["q", "tag", "skill", "capability", "binding", "provider", "verified", "healthy", "kind", "order", "cursor"]
    + ["page_size", "mine", "state", "deprecated", "protocol_version", "security", "input_mode", "format"]
)


@pytest.mark.django_db
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(_param | _odd, _odd), max_size=6), raw=_odd)
def test_no_query_string_makes_the_search_answer_500(client, pairs, raw):
    if not Entry.objects.exists():
        make_entries([{"name": "Kestrel", "tags": ["birds"]}, {"name": "Falcon"}])
    for url in (f"{AGENTS}?{urlencode(pairs)}", f"{AGENTS}?{raw}", f"{AGENTS}?cursor={urlencode({'': raw})[1:]}"):
        response = client.get(url)
        assert response.status_code < 500, url
        assert "detail" in response.json() or "results" in response.json()


# --- one entry ------------------------------------------------------------------------------


def test_the_detail_shows_the_card_versions_health_and_trust_and_no_history_to_the_public(anon, db):
    entry = make_entry(name="Weather", signed_kid="key-7", health="healthy")
    add_checks(entry, [True, False, True, True])
    response = anon.get(f"{AGENTS}{entry.pk}/")
    assert response.status_code == 200
    body = response.json()
    assert body["card"] == card_document(name="Weather", signed_kid="key-7")
    assert body["card_version"] == 1
    assert body["versions"] == [
        {
            "number": 1,
            "hash": entry.current_version.hash,
            "dialect": "1.0",
            "fetched_at": body["versions"][0]["fetched_at"],
            "url": f"http://testserver/api/registry/agents/{entry.pk}/versions/1/",
        }
    ]
    health = body["health"]
    assert health["state"] == "healthy" and health["uptime"] == {"1d": 75.0, "7d": 75.0, "30d": 75.0}
    assert [c["ok"] for c in health["checks"]] == [True, True, False, True]  # newest first
    assert set(health["checks"][0]) == {"at", "ok", "card_ok", "endpoint_ok", "status", "latency_ms", "detail"}
    assert body["trust"] == {
        "domain": entry.domain,
        "verified": True,
        "proven": entry.domain,
        "verified_by": "http",
        "verified_at": body["trust"]["verified_at"],
        "signed": True,
        "signing_kid": "key-7",
        "signatures": [{"kid": "key-7", "alg": "ES256", "valid": True, "reason": "verified"}],
        "proof_checked_at": None,
        "proof_lapsed_at": None,
        # The factory's endpoint (agents.example.test) is not on the card's own host.
        "flags": [
            {
                "code": "endpoint_host",
                "host": "agents.example.test",
                "detail": f"an endpoint is on agents.example.test, not on the proven card host {entry.domain}",
            }
        ],
    }
    assert body["conformance"] == {"at": None, "results": []} and body["attestation"] is None
    assert body["decisions"] is None and body["proof"] is None and body["allowed_transitions"] is None


def test_owners_see_the_history_the_domain_proof_and_the_moves_they_may_make(as_, users, db):
    entry = make_entry(name="Mine", state=State.APPROVED, submitted_by=users["owner"])
    body = as_("owner").get(f"{AGENTS}{entry.pk}/").json()
    assert body["decisions"] == [
        {
            "from_state": "",
            "to_state": "approved",
            "actor": "olivia",
            "reason": "seeded",
            "at": body["decisions"][0]["at"],
            "version": 1,
        }
    ]
    assert body["allowed_transitions"] == ["deprecated"]
    assert body["proof"] == {
        "token": entry.proof_token,
        "verified": True,
        "methods": ["http", "dns"],
        "instructions": proofs.instructions(card_url=entry.card_url, token=entry.proof_token),
        "expires_at": None,  # proven: it does not expire
    }
    curator = as_("curator").get(f"{AGENTS}{entry.pk}/").json()
    assert curator["allowed_transitions"] == ["suspended", "deprecated"]


def test_a_changed_card_awaiting_review_is_shown_to_its_owners_not_to_the_public(anon, as_, users, db):
    entry = make_entry(name="Weather", submitted_by=users["owner"])
    new_version(entry, name="Weather", description="Now with hail.")
    public = anon.get(f"{AGENTS}{entry.pk}/").json()
    assert public["state"] == "pending" and public["card_version"] == 1
    assert public["card"]["description"] == "The Weather agent."
    assert [v["number"] for v in public["versions"]] == [1]
    assert anon.get(f"{AGENTS}{entry.pk}/versions/2/").status_code == 404
    assert [r["id"] for r in anon.get(AGENTS).json()["results"]] == [entry.pk]  # still listed
    owner = as_("owner").get(f"{AGENTS}{entry.pk}/").json()
    assert owner["card_version"] == 2 and owner["card"]["description"] == "Now with hail."
    assert [v["number"] for v in owner["versions"]] == [2, 1]
    assert as_("owner").get(f"{AGENTS}{entry.pk}/versions/2/").status_code == 200
    assert as_("curator").get(f"{AGENTS}{entry.pk}/versions/2/").status_code == 200


def test_a_version_is_the_card_as_served_parsed_and_indexed(anon, db):
    entry = make_entry(name="Weather", tags=["forecast"])
    response = anon.get(f"{AGENTS}{entry.pk}/versions/1/")
    assert response.status_code == 200
    body = response.json()
    version = CardVersion.objects.get(entry=entry, number=1)
    assert body == {
        "entry": entry.pk,
        "number": 1,
        "hash": version.hash,
        "dialect": "1.0",
        "fetched_from": entry.card_url,
        "fetched_at": body["fetched_at"],
        "etag": "",
        "approved": True,
        "raw": version.raw,
        "document": version.document,
        "index": version.index,
        "signatures": [],
    }
    assert anon.get(f"{AGENTS}{entry.pk}/versions/9/").json()["detail"].startswith("no version 9")


def test_an_entry_no_one_may_see_is_404_as_one_that_does_not_exist(anon, users, as_, db):
    draft = make_entry(name="Draft", state=State.DRAFT, submitted_by=users["owner"])
    hidden = anon.get(f"{AGENTS}{draft.pk}/")
    missing = anon.get(f"{AGENTS}{draft.pk + 1000}/")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json() == missing.json() == {"detail": "no entry with this id (or not one you may see)"}
    assert as_("owner").get(f"{AGENTS}{draft.pk}/").status_code == 200


# --- submitting ---------------------------------------------------------------------------


@pytest.fixture
def site(dns):
    """A remote agent's web server on 127.0.0.1, as agents.example.test, serving a valid card."""
    dns[HOST] = ["127.0.0.1"]
    server = CardServer().start()
    server.serve(
        "/.well-known/agent-card.json",
        card_document(name="Route Planner", url=server.url("/rpc", host=HOST), tags=["cycling"], provider="Example"),
    )
    yield server
    server.stop()


def test_submitting_a_card_url_answers_201_with_the_entry_and_its_proof_instructions(as_, site, users):
    response = as_("owner").post(AGENTS, {"url": site.url("/", host=HOST)})
    assert response.status_code == 201, response.content
    body = response.json()
    entry = Entry.objects.get(pk=body["id"])
    assert response["Location"] == body["url"] == f"http://testserver/api/registry/agents/{entry.pk}/"
    assert body["state"] == "draft" and body["name"] == "Route Planner" and body["tags"] == ["cycling"]
    assert body["card_url"] == site.url("/.well-known/agent-card.json", host=HOST)
    # Nothing to do but prove the domain: review comes after.
    assert body["verified"] is False and body["allowed_transitions"] == []
    assert body["proof"]["verified"] is False and body["proof"]["token"] == entry.proof_token
    assert body["proof"]["instructions"]["http_url"] == site.url(proofs.WELL_KNOWN_PATH, host=HOST)
    assert body["proof"]["instructions"]["http_content"] == f"{proofs.TOKEN_PREFIX}{entry.proof_token}"
    assert body["proof"]["instructions"]["dns_name"] == f"{proofs.DNS_LABEL}.{HOST}"
    assert entry.submitted_by == users["owner"]
    assert body["decisions"][0]["actor"] == "olivia" and body["decisions"][0]["to_state"] == "draft"


def test_a_submitted_entry_is_proven_reviewed_approved_and_then_listed(anon, as_, site):
    owner, curator = as_("owner"), as_("curator")
    entry = owner.post(AGENTS, {"url": site.url("/", host=HOST)}).json()
    verify = f"{AGENTS}{entry['id']}/verify/"
    assert anon.get(AGENTS, q="route planner").json()["results"] == []

    nothing = owner.post(verify, {"method": "http"})
    assert nothing.status_code == 200
    assert nothing.json()["verified"] is False and nothing.json()["state"] == "draft"
    assert nothing.json()["detail"]

    site.serve(
        proofs.WELL_KNOWN_PATH, entry["proof"]["instructions"]["http_content"].encode(), Content_Type="text/plain"
    )
    proven = owner.post(verify, {"method": "http"}).json()
    assert proven["verified"] is True and proven["method"] == "http" and proven["state"] == "pending"

    assert owner.post(f"{AGENTS}{entry['id']}/transition/", {"to": "approved"}).status_code == 403
    approve = {"to": "approved", "reason": "looks right", "version_hash": entry["versions"][0]["hash"]}
    approved = curator.post(f"{AGENTS}{entry['id']}/transition/", approve)
    assert approved.status_code == 200, approved.content
    assert approved.json()["state"] == "approved" and approved.json()["listed_at"]
    found = anon.get(AGENTS, q="route planner").json()["results"]
    assert [r["id"] for r in found] == [entry["id"]] and found[0]["verified_by"] == "http"


def test_a_proof_over_http_on_an_unprivileged_port_is_shown_as_that_host_and_port_never_the_domain(
    anon, as_, site, client
):
    owner, curator = as_("owner"), as_("curator")
    entry = owner.post(AGENTS, {"url": site.url("/", host=HOST)}).json()
    assert entry["proof"]["instructions"]["http_proves"] == f"{HOST}:{site.port} only, not the domain {HOST}"
    site.serve(
        proofs.WELL_KNOWN_PATH, entry["proof"]["instructions"]["http_content"].encode(), Content_Type="text/plain"
    )
    proven = owner.post(f"{AGENTS}{entry['id']}/verify/", {"method": "http"}).json()
    assert proven["verified"] is True and f"{HOST}:{site.port} is proven, not the domain" in proven["detail"]
    reasons = [d["reason"] for d in owner.get(f"{AGENTS}{entry['id']}/").json()["decisions"]]
    assert any(r.startswith(f"{HOST}:{site.port} proven (") for r in reasons), reasons
    approve = {"to": "approved", "reason": "looks right", "version_hash": entry["versions"][0]["hash"]}
    assert curator.post(f"{AGENTS}{entry['id']}/transition/", approve).status_code == 200
    trust = anon.get(f"{AGENTS}{entry['id']}/").json()["trust"]
    assert (trust["domain"], trust["verified"], trust["proven"], trust["verified_by"]) == (
        HOST,
        False,
        f"{HOST}:{site.port}",
        "http",
    )
    (found,) = anon.get(AGENTS, q="route planner").json()["results"]
    assert (found["verified"], found["proven"]) == (False, f"{HOST}:{site.port}")
    assert anon.get(AGENTS, q="route planner", verified="true").json()["results"] == []
    assert [r["id"] for r in anon.get(AGENTS, q="route planner", verified="false").json()["results"]] == [entry["id"]]
    page = client.get(f"/registry/{entry['id']}/").content.decode()
    assert "Domain not proven" in page and f"{HOST}:{site.port} proven" in page
    listing = client.get("/registry/", {"q": "route planner"}).content.decode()
    assert f"{HOST}:{site.port} proven" in listing and "Domain proven</li>" not in listing


def test_a_proof_over_https_on_443_or_by_dns_proves_the_domain_in_search(db, anon):
    https = make_entry(name="Https agent", card_url="https://a.example.test:443/card.json", approved=True)
    dns = make_entry(name="Dns agent", card_url="http://b.example.test:8080/card.json", approved=True)
    Entry.objects.filter(pk=dns.pk).update(domain_verified_by="dns")
    port = make_entry(name="Port agent", card_url="https://c.example.test:8443/card.json", approved=True)
    found = {r["id"]: r for r in anon.get(AGENTS, verified="true").json()["results"]}
    assert set(found) == {https.pk, dns.pk}
    assert (found[https.pk]["proven"], found[dns.pk]["proven"]) == ("a.example.test", "b.example.test")
    assert [r["id"] for r in anon.get(AGENTS, verified="false").json()["results"]] == [port.pk]


def test_submitting_an_invalid_card_is_400_with_its_problems_itemised(as_, site):
    site.serve("/.well-known/agent-card.json", {**card_document(name="Broken"), "name": 7, "skills": "none"})
    response = as_("owner").post(AGENTS, {"url": site.url("/", host=HOST)})
    assert response.status_code == 400
    body = response.json()
    assert body["detail"].startswith("the card has")
    assert body["problems"] and all(set(p) == {"path", "message"} for p in body["problems"])
    assert {"/name", "/skills"} <= {p["path"] for p in body["problems"]}
    assert not Entry.objects.exists()


def test_submitting_a_card_already_in_the_directory_is_409(as_, site):
    url = site.url("/", host=HOST)
    first = as_("owner").post(AGENTS, {"url": url})
    assert first.status_code == 201
    twice = as_("owner").post(AGENTS, {"url": url})
    assert twice.status_code == 409 and "you submitted this card already" in twice.json()["detail"]
    Entry.objects.filter(pk=first.json()["id"]).update(domain_verified_at=timezone.now())
    again = as_("stranger").post(AGENTS, {"url": url})
    assert again.status_code == 409 and "in the directory already" in again.json()["detail"]


def test_a_card_that_cannot_be_read_is_502_saying_why(as_, site, dns):
    unknown = as_("owner").post(AGENTS, {"url": "http://nowhere.example.test/"})
    assert unknown.status_code == 502 and unknown.json()["detail"].startswith("the card could not be read")
    site.serve("/.well-known/agent-card.json", b"oops", status=500)
    broken = as_("owner").post(AGENTS, {"url": site.url("/", host=HOST)})
    assert broken.status_code == 502 and "500" in broken.json()["detail"]


@pytest.mark.parametrize("url", ["", "not a url", "ftp://agents.example.test/card.json", "javascript:alert(1)"])
def test_a_url_that_is_no_http_url_is_400(as_, db, users, url):
    response = as_("owner").post(AGENTS, {"url": url})
    assert response.status_code == 400 and "url" in response.json()["errors"]


def test_an_entry_is_submitted_for_a_tenant_only_by_its_operators(as_, users, site, tenant):
    from accounts.services import member_add

    member_add(tenant=tenant, user=users["stranger"], role="viewer")
    member_add(tenant=tenant, user=users["owner"], role="operator")
    url = site.url("/", host=HOST)
    for who, slug in (("stranger", "acme"), ("owner", "no-such-tenant")):
        refused = as_(who).post(AGENTS, {"url": url, "tenant": slug})
        assert refused.status_code == 403 and "operator or owner" in refused.json()["detail"]
    made = as_("owner").post(AGENTS, {"url": url, "tenant": "acme"})
    assert made.status_code == 201 and Entry.objects.get(pk=made.json()["id"]).tenant == tenant


# --- curation moves -----------------------------------------------------------------------


def test_who_may_move_an_entry_where(as_, users, db):
    entry = make_entry(name="Weather", submitted_by=users["owner"])
    move = f"{AGENTS}{entry.pk}/transition/"
    stranger = as_("stranger").post(move, {"to": "deprecated", "reason": "old"})
    assert stranger.status_code == 403 and stranger.json()["detail"].startswith("only the entry's owners and curators")
    assert as_("owner").post(move, {"to": "suspended", "reason": "x"}).status_code == 403
    no_reason = as_("owner").post(move, {"to": "deprecated"})
    assert no_reason.status_code == 400 and "reason is required" in no_reason.json()["detail"]
    impossible = as_("owner").post(move, {"to": "draft"})
    assert impossible.status_code == 409 and "cannot go from approved to draft" in impossible.json()["detail"]
    unknown = as_("owner").post(move, {"to": "limbo"})
    assert unknown.status_code == 400 and "use one of: draft, pending" in unknown.json()["detail"]
    deprecated = as_("owner").post(move, {"to": "deprecated", "reason": "a new agent replaces it"})
    assert deprecated.status_code == 200 and deprecated.json()["state"] == "deprecated"
    assert deprecated.json()["allowed_transitions"] == ["approved"]
    suspended = as_("curator").post(move, {"to": "suspended", "reason": "spam"})
    assert suspended.status_code == 200 and suspended.json()["decisions"][0]["actor"] == "cora"
    assert as_("owner").post(move, {"to": "approved"}).status_code == 403


def test_approving_a_card_that_changed_since_the_curator_looked_is_409(as_, users, db):
    entry = make_entry(name="Weather", submitted_by=users["owner"])
    seen = entry.current_version.hash
    new_version(entry, name="Weather", description="changed")
    move = f"{AGENTS}{entry.pk}/transition/"
    stale = as_("curator").post(move, {"to": "approved", "version_hash": seen})
    assert stale.status_code == 409 and "changed since" in stale.json()["detail"]
    current = Entry.objects.get(pk=entry.pk).current_version.hash
    assert as_("curator").post(move, {"to": "approved", "version_hash": current}).status_code == 200
    assert as_("stranger").get(f"{AGENTS}{entry.pk}/").json()["card"]["description"] == "changed"


def test_verifying_is_for_owners_and_curators_and_not_for_hosted_entries(as_, users, tenant, db):
    entry = make_entry(name="Listed", submitted_by=users["owner"])
    assert as_("stranger").post(f"{AGENTS}{entry.pk}/verify/", {"method": "http"}).status_code == 403
    bad = as_("owner").post(f"{AGENTS}{entry.pk}/verify/", {"method": "carrier pigeon"})
    assert bad.status_code == 400 and "use one of: http, dns" in bad.json()["detail"]
    for raw in (b"", b"{}", b'{"method": null}', b'{"how": "http"}'):
        unsaid = as_("owner").post(f"{AGENTS}{entry.pk}/verify/", raw=raw)
        assert unsaid.status_code == 400 and unsaid.json()["detail"].startswith("method: this field ")
        assert unsaid.json()["detail"].endswith("use one of: http, dns"), unsaid.json()
    hosted = make_entry(name="Hosted", agent=make_agent(tenant, "helper", "echo"))
    refused = as_("curator").post(f"{AGENTS}{hosted.pk}/verify/", {"method": "http"})
    assert refused.status_code == 400 and "hosted" in refused.json()["detail"]


# --- flags --------------------------------------------------------------------------------


def test_anyone_signed_in_may_flag_an_entry_once_until_it_is_resolved(anon, as_, db):
    entry = make_entry(name="Weather")
    flag = f"{AGENTS}{entry.pk}/flag/"
    made = as_("stranger").post(flag, {"reason": "pretends to be the met office"})
    assert made.status_code == 201
    assert made.json() == {
        "id": Flag.objects.get().pk,
        "entry": entry.pk,
        "reason": "pretends to be the met office",
        "created_at": made.json()["created_at"],
    }
    again = as_("stranger").post(flag, {"reason": "still"})
    assert again.status_code == 409 and "flagged this entry already" in again.json()["detail"]
    assert as_("owner").post(flag, {"reason": "me too"}).status_code == 201
    services.flag_resolve(flag=Flag.objects.get(reason="pretends to be the met office"), user=None, resolution="ok")
    assert as_("stranger").post(flag, {"reason": "again"}).status_code == 201
    assert as_("stranger").post(flag, {"reason": "   "}).status_code == 400
    assert as_("stranger").post(flag, {}).json()["errors"] == {"reason": ["This field is required."]}
    assert anon.post(flag, {"reason": "x"}).status_code == 401


# --- authentication -------------------------------------------------------------------------


def test_a_token_is_obtained_with_username_and_password_and_then_used(client, users, site):
    response = Api(client).post("/api/registry/token/", {"username": "olivia", "password": "pw-" + "x" * 12})
    assert response.status_code == 200
    token = response.json()["token"]
    assert response.json()["expires_at"]
    assert Api(client, token).post(AGENTS, {"url": site.url("/", host=HOST)}).status_code == 201
    wrong = Api(client).post("/api/registry/token/", {"username": "olivia", "password": "guess"})
    assert wrong.status_code == 400 and wrong.json()["detail"] == "Unable to log in with provided credentials."
    bad = Api(client, "0" * 40).get(AGENTS)
    assert bad.status_code == 401 and bad.json()["detail"] == "Invalid token." and bad["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("path", ["", "1/verify/", "1/transition/", "1/flag/"])
def test_an_anonymous_post_is_401_before_its_body_is_read(anon, db, path):
    response = anon.post(f"{AGENTS}{path}", raw=b"\x00 not json at all")
    assert response.status_code == 401
    assert response.json() == {"detail": "Authentication credentials were not provided."}
    assert response["WWW-Authenticate"] == "Token"


def test_a_session_post_needs_the_csrf_token(client, users, db):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(users["owner"])
    response = browser.post(AGENTS, data="{}", content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]


# --- hostile bodies -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, status, says",
    [
        (b"{", 400, "not usable JSON"),
        (b'{"url": NaN}', 400, "not usable JSON"),
        (b'{"url": "a", "url": "b"}', 400, "not usable JSON"),
        (b'{"url": "http://x.test/\\u0000"}', 400, "not usable JSON"),
        (b'{"url": "\\ud800"}', 400, "not usable JSON"),
        (b"\xff\xfe", 400, "not UTF-8"),
        (b"[" * 5000 + b"]" * 5000, 400, "not usable JSON"),
        (b"[1, 2]", 400, "Invalid data"),
        (b'"just a string"', 400, "Invalid data"),
        (b'{"url": true}', 400, "Not a valid string"),
        (b'{"url": "http://x.test/' + b"a" * 70_000 + b'"}', 413, "larger than"),
    ],
)
def test_a_hostile_body_is_refused_with_a_json_detail(as_, db, users, raw, status, says):
    response = as_("owner").post(AGENTS, raw=raw)
    assert response.status_code == status, response.content
    assert says in json.dumps(response.json()), response.json()


def test_a_body_that_is_not_json_is_415(as_, db, users):
    response = as_("owner").post(AGENTS, raw=b"url=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415 and "Unsupported media type" in response.json()["detail"]


def test_paths_that_are_not_the_api_s_are_404_in_json(anon, db):
    for path in ("/api/registry/", "/api/registry/agents/x/", "/api/registry/agents", "/api/nothing/"):
        response = anon.get(path)
        assert response.status_code == 404 and response.json()["detail"].startswith("nothing at"), path


# --- the factory agrees with the services -------------------------------------------------


def test_seeded_entries_are_valid_cards_indexed_as_the_services_index_them(db):
    spec_ = {"name": "Kestrel", "tags": ["birds"], "capabilities": ["streaming"], "examples": ["Where do they nest?"]}
    full = {**spec_, "bindings": ["JSONRPC", "HTTP+JSON"], "protocol_versions": ["1.0", "0.3.0"]}
    assert cards.validate(card_document(**full, security=["apiKey", "oauth2", "mutualTLS"]), "1.0") == []
    seeded = make_entry(**spec_, provider="Raptors")
    redone = make_entry(**spec_, provider="Raptors")
    services._reindex(redone)

    def facets(entry):
        return sorted(Facet.objects.filter(entry=entry).values_list("kind", "value"))

    def vector(entry):
        with connection.cursor() as cursor:
            cursor.execute("SELECT search::text FROM registry_entry WHERE id = %s", [entry.pk])
            return cursor.fetchone()[0]

    columns = ("name", "description", "provider", "endpoint_url", "dialect", "signed", "signing_kid")
    a, b = Entry.objects.get(pk=seeded.pk), Entry.objects.get(pk=redone.pk)
    assert [getattr(a, c) for c in columns] == [getattr(b, c) for c in columns]
    assert facets(a) == facets(b) and facets(a)
    assert vector(a) == vector(b) and vector(a)


@pytest.mark.django_db
def test_writes_are_rationed_per_user_with_retry_after_and_reads_are_not(client, settings, fresh_cache):
    settings.REGISTRY_WRITE_RATE = "2/min"
    user = get_user_model().objects.create_user("rationed")
    headers = {"Authorization": f"Token {token_create(user=user)[1]}"}
    answers = [
        client.post("/api/registry/agents/", data=b"{}", content_type="application/json", headers=headers)
        for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [400, 400, 429]
    assert int(answers[-1]["Retry-After"]) > 0 and "detail" in answers[-1].json()
    assert client.get("/api/registry/agents/", headers=headers).status_code == 200
