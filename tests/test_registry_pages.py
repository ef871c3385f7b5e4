"""The directory's HTML pages (registry/views.py): /registry/ searches, filters and pages
through a few hundred seeded entries; /registry/<id>/ shows an entry's skills, examples,
endpoints, trust signals and uptime; hostile cards are escaped; bad query strings get a 400
that says what is wrong, never a 500; query counts do not grow with the results.

The entries are made here without any network: a card document (A2A 1.0) normalised by
registry.cards, kept as a version, approved by setting the columns a curator's decision sets,
and indexed by registry.services._reindex (what every write of the registry does)."""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from html import unescape
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck as HypothesisHealthCheck
from hypothesis import given, settings
from hypothesis import strategies as st

from registry import cards, services
from registry.models import CardVersion, Decision, Entry, Health, HealthCheck, Kind, ProofMethod, State
from registry.search_params import BadSearch, query_from_search, search_from_query
from registry.views import PAGE_SIZE, link
from tests import registry_factories

fresh_cache = registry_factories.fresh_cache  # the fixture

DIRECTORY = "/registry/"
SUBMIT = "/registry/submit/"
PROVIDERS = ("Acme Robotics", "Globex", "Initech", "Umbrella Labs", "Hooli", "Stark Industries")
TOPICS = ("weather", "translation", "invoices", "travel", "recipes", "contracts", "music", "chess")
SEEDED = 300


# --- making entries -------------------------------------------------------------------------


def card(
    name: str,
    *,
    description: str = "",
    provider: str = "Acme Robotics",
    skills: list[dict[str, Any]] | None = None,
    bindings: tuple[str, ...] = ("JSONRPC",),
    host: str = "agents.example.test",
    streaming: bool = False,
    push: bool = False,
    input_modes: tuple[str, ...] = ("text/plain",),
    output_modes: tuple[str, ...] = ("text/plain",),
    security: bool = False,
) -> dict[str, Any]:
    """An A2A 1.0 card."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "agent"
    document: dict[str, Any] = {
        "name": name,
        "description": description or f"{name}: an agent for the directory's tests.",
        "supportedInterfaces": [
            {
                "url": f"https://{host}/{slug}/{b.lower().replace('+', '-')}",
                "protocolBinding": b,
                "protocolVersion": "1.0",
            }
            for b in bindings
        ],
        "provider": {"organization": provider, "url": f"https://{host}/"},
        "version": "1.0.0",
        "documentationUrl": f"https://{host}/{slug}/docs",
        "capabilities": {"streaming": streaming, "pushNotifications": push},
        "defaultInputModes": list(input_modes),
        "defaultOutputModes": list(output_modes),
        "skills": skills
        or [{"id": "answer", "name": "Answer", "description": "Answers questions.", "tags": ["general"]}],
    }
    if security:
        document["securitySchemes"] = {"key": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}}
        document["securityRequirements"] = [{"schemes": {"key": {"list": []}}}]
    return document


def make_entry(
    document: dict[str, Any],
    *,
    state: str = State.APPROVED,
    approved: bool = True,
    health: str = Health.HEALTHY,
    kid: str = "",
    listed_at: datetime | None = None,
    index: dict[str, Any] | None = None,
    submitted_by: Any = None,
    domain: str = "agents.example.test",
) -> Entry:
    """An entry whose card is `document` (its index: `index` when given, else normalised),
    approved (listed) unless `approved` is false."""
    now = timezone.now()
    entry = Entry.objects.create(
        kind=Kind.REMOTE,
        card_url=f"https://{domain}/{Entry.objects.count()}-{abs(hash(document['name'])) % 10**8}"
        "/.well-known/agent-card.json",
        domain=domain,
        state=state,
        state_changed_at=now,
        domain_verified_at=now - timedelta(days=3) if approved or state != State.DRAFT else None,
        domain_verified_by=ProofMethod.HTTP if approved or state != State.DRAFT else "",
        submitted_by=submitted_by,
        health=health,
        last_checked_at=now - timedelta(minutes=2),
        latency_ms=42,
        listed_at=(listed_at or now) if approved else None,
    )
    add_version(entry, document, index=index, kid=kid, approve=approved)
    return entry


def add_version(
    entry: Entry, document: dict[str, Any], *, index: dict[str, Any] | None = None, kid: str = "", approve: bool
) -> CardVersion:
    number = (entry.versions.order_by("-number").values_list("number", flat=True).first() or 0) + 1
    version = CardVersion.objects.create(
        entry=entry,
        number=number,
        hash=cards.card_hash(document),
        dialect="1.0",
        fetched_from=entry.card_url,
        raw=orjson.dumps(document).decode(),
        document=document,
        index=index if index is not None else dataclasses.asdict(cards.normalise(document, "1.0")),
        signatures=[{"kid": kid, "alg": "ES256", "jku": "", "valid": True, "reason": "verified"}] if kid else [],
        fetched_at=timezone.now(),
    )
    entry.current_version = version
    if approve:
        entry.approved_version = version
    entry.save(update_fields=["current_version", "approved_version"])
    services._reindex(entry)
    return version


def seeded_card(i: int) -> dict[str, Any]:
    topic = TOPICS[i % len(TOPICS)]
    other = TOPICS[(i // len(TOPICS)) % len(TOPICS)]
    bindings = tuple(
        b for b, on in (("JSONRPC", i % 3 != 0), ("HTTP+JSON", i % 2 == 0), ("GRPC", i % 5 == 0)) if on
    ) or ("HTTP+JSON",)
    return card(
        f"{topic.title()} helper {i}",
        description=f"Helps with {topic} and sometimes {other}.",
        provider=PROVIDERS[i % len(PROVIDERS)],
        bindings=bindings,
        streaming=i % 2 == 1,
        push=i % 7 == 0,
        input_modes=("text/plain", "application/json") if i % 4 == 0 else ("text/plain",),
        security=i % 3 == 0,
        skills=[
            {
                "id": f"{topic}-main",
                "name": f"{topic.title()} questions",
                "description": f"Answers questions about {topic}.",
                "tags": [topic, "assistant"] + (["beta"] if i % 10 == 0 else []),
                "examples": [f"Tell me about {topic} number {i}"],
            },
            {
                "id": f"{other}-side",
                "name": f"{other.title()} notes",
                "description": f"Notes on {other}.",
                "tags": [other],
                "examples": [],
            },
        ],
    )


@dataclasses.dataclass
class Seeded:
    listed: list[int]  # listed and not deprecated: what the directory shows by default
    deprecated: list[int]
    hidden: list[int]  # not listed
    facts: dict[int, dict[str, Any]]  # entry id -> what the filters look at


def seed(n: int = SEEDED) -> Seeded:
    base = timezone.now() - timedelta(days=1)
    out = Seeded([], [], [], {})
    for i in range(n):
        document = seeded_card(i)
        hidden = i % 30 == 1
        state = State.DRAFT if hidden else State.DEPRECATED if i % 25 == 0 else State.APPROVED
        health = Health.HEALTHY if i % 4 else (Health.DEGRADED if i % 8 == 0 else Health.STALE)
        entry = make_entry(
            document,
            state=state,
            approved=not hidden,
            health=health,
            kid=f"key-{i}" if i % 6 == 0 else "",
            # Two entries per minute: ties in listed_at, which the keyset must page through.
            listed_at=base + timedelta(minutes=i // 2),
        )
        index = entry.approved_version.index if entry.approved_version else {}
        out.facts[entry.pk] = {
            "i": i,
            "tags": set(index.get("tags", ())),
            "bindings": set(index.get("bindings", ())),
            "provider": document["provider"]["organization"],
            "healthy": health == Health.HEALTHY,
            "signed": i % 6 == 0,
            "streaming": "streaming" in index.get("capabilities", ()),
            "text": " ".join([document["name"], document["description"]]),
        }
        (out.hidden if hidden else out.deprecated if state == State.DEPRECATED else out.listed).append(entry.pk)
    return out


def truncate_registry() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE registry_entry, registry_cardversion, registry_decision, registry_flag, "
            "registry_healthcheck, registry_facet CASCADE"
        )


@pytest.fixture(scope="module")
def seeded(django_db_setup, django_db_blocker) -> Iterator[Seeded]:
    """A few hundred entries, made once for the module (committed) and dropped after it."""
    with django_db_blocker.unblock():
        truncate_registry()
        made = seed()
    yield made
    with django_db_blocker.unblock():
        truncate_registry()


@pytest.fixture(autouse=True)
def _fresh_filter_choices(fresh_cache):
    yield


# --- reading the pages ------------------------------------------------------------------------

ENTRY_LINK = re.compile(r'<h3 id="entry-(\d+)"><a href="/registry/(\d+)/">')
NEXT_LINK = re.compile(r'<a href="([^"]*)" rel="next">Next page</a>')


def listed_ids(html: str) -> list[int]:
    return [int(m.group(2)) for m in ENTRY_LINK.finditer(html)]


def next_url(html: str) -> str | None:
    found = NEXT_LINK.search(html)
    return DIRECTORY + unescape(found.group(1)) if found else None


def walk(client, url: str, *, limit: int = 100) -> list[int]:
    """Every entry id the directory lists for `url`, following "Next page" to the end."""
    ids: list[int] = []
    for _ in range(limit):
        response = client.get(url)
        assert response.status_code == 200, response.content[:500]
        html = response.content.decode()
        page_ids = listed_ids(html)
        assert len(page_ids) <= PAGE_SIZE
        ids += page_ids
        following = next_url(html)
        if following is None:
            return ids
        assert len(page_ids) == PAGE_SIZE
        url = following
    raise AssertionError("the pages do not end")


# --- the directory -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_directory_lists_listed_entries_newest_first_and_pages_through_all_of_them(client, seeded):
    response = client.get(DIRECTORY)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<html lang="en">' in html and html.count("<h1") == 1
    assert 'href="#main"' in html and '<main id="main"' in html and "<nav" in html and "<header" in html
    first = listed_ids(html)
    assert len(first) == PAGE_SIZE
    newest = sorted(seeded.listed, key=lambda pk: (seeded.facts[pk]["i"] // 2, pk), reverse=True)
    assert first == newest[:PAGE_SIZE]
    every = walk(client, DIRECTORY)
    assert every == newest  # each listed entry once, in order, across the ties in listed_at
    assert not set(every) & set(seeded.hidden + seeded.deprecated)


@pytest.mark.django_db
def test_a_text_query_with_two_filters_narrows_the_results_and_keeps_them_across_pages(client, seeded):
    query = {"q": "weather", "tag": "assistant", "binding": "jsonrpc"}
    expected = {
        pk
        for pk in seeded.listed
        if "weather" in seeded.facts[pk]["text"].lower()
        and "assistant" in seeded.facts[pk]["tags"]
        and "JSONRPC" in seeded.facts[pk]["bindings"]
    }
    assert 1 < len(expected) < len(seeded.listed)
    found = walk(client, DIRECTORY + "?" + urlencode(query))
    assert len(found) == len(set(found)) and set(found) == expected
    # The form shows the search back: the text, the ticked filters.
    html = client.get(DIRECTORY + "?" + urlencode(query)).content.decode()
    assert 'value="weather"' in html
    assert re.search(r'name="binding" value="JSONRPC" checked', html), "the binding filter is not ticked"
    assert re.search(r'name="tag" value="assistant" checked', html)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "holds"),
    [
        ({"healthy": "true"}, lambda f: f["healthy"]),
        ({"healthy": "false"}, lambda f: not f["healthy"]),
        ({"signed": "true"}, lambda f: f["signed"]),
        ({"signed": "no"}, lambda f: not f["signed"]),
        ({"provider": "globex"}, lambda f: f["provider"] == "Globex"),
        ({"capability": "streaming"}, lambda f: f["streaming"]),
        ({"tag": ["chess", "beta"]}, lambda f: {"chess", "beta"} <= f["tags"]),
        ({"binding": "GRPC", "healthy": "true"}, lambda f: "GRPC" in f["bindings"] and f["healthy"]),
        ({"kind": "remote", "verified": "true"}, lambda f: True),
        ({"kind": "hosted"}, lambda f: False),
        ({"order": "recent", "q": "recipes"}, lambda f: "recipes" in f["text"].lower()),
    ],
)
def test_each_filter_gives_exactly_the_entries_it_describes(client, seeded, query, holds):
    expected = {pk for pk in seeded.listed if holds(seeded.facts[pk])}
    found = walk(client, DIRECTORY + "?" + urlencode(query, doseq=True))
    assert len(found) == len(set(found))
    assert set(found) == expected


@pytest.mark.django_db
def test_deprecated_entries_are_left_out_unless_asked_for_and_then_say_so(client, seeded):
    found = set(walk(client, DIRECTORY + "?deprecated=true"))
    assert found == set(seeded.listed) | set(seeded.deprecated)
    html = client.get(DIRECTORY + "?" + urlencode({"deprecated": "true", "q": seeded_card(0)["name"]})).content
    assert b'<li class="badge badge-warn">Deprecated</li>' in html


@pytest.mark.django_db
def test_the_filter_choices_are_the_commonest_values_with_their_counts(client, seeded):
    html = client.get(DIRECTORY).content.decode()
    weather = sum(1 for pk in seeded.listed if "weather" in seeded.facts[pk]["tags"])
    assert re.search(rf'value="weather">\s*<label for="f-tag-\d+">weather <span class="count">\({weather}\)', html)
    for legend in ("Tags", "Skills", "Input modes", "Output modes", "Capabilities", "Bindings", "Trust and health"):
        assert f"<legend>{legend}</legend>" in html
    # Every control has its label.
    for control in re.findall(r'<(?:input|select)[^>]*\sid="([^"]+)"', html):
        assert f'<label for="{control}"' in html, control
    # A ticked value that is not among the commonest stays on the form, ticked.
    html = client.get(DIRECTORY + "?tag=rare-one").content.decode()
    assert re.search(r'name="tag" value="rare-one" checked', html)
    assert "No agents match this search" in html


@pytest.mark.django_db
def test_a_result_shows_name_provider_description_tags_and_badges(client, seeded):
    pk = next(pk for pk in seeded.listed if seeded.facts[pk]["signed"] and not seeded.facts[pk]["healthy"])
    entry = Entry.objects.get(pk=pk)
    html = client.get(DIRECTORY + "?" + urlencode({"q": entry.name, "order": "relevance"})).content.decode()
    assert listed_ids(html)[0] == pk
    block = html[html.index(f'id="entry-{pk}"') :].split("</article>")[0]
    assert entry.name in block and entry.provider in block and entry.description in block
    assert "Domain proven" in block and "Signed" in block
    assert f"Health: {entry.get_health_display()}" in block
    assert '<li class="tag">assistant</li>' in block


# --- one entry -------------------------------------------------------------------------------------


@pytest.fixture
def planner(db) -> Entry:
    document = card(
        "Route Planner",
        description="Plans cycling routes between two places.",
        provider="Example Mobility",
        bindings=("JSONRPC", "HTTP+JSON"),
        streaming=True,
        security=True,
        skills=[
            {
                "id": "plan-route",
                "name": "Plan a route",
                "description": "A route between two places, avoiding busy roads.",
                "tags": ["cycling", "routes"],
                "examples": ["From the station to the lake, please", "Quiet roads to Utrecht"],
                "outputModes": ["application/gpx+xml"],
            }
        ],
    )
    entry = make_entry(document, kid="mobility-2026", health=Health.HEALTHY)
    now = timezone.now()
    # Uptime: the last day 3 good of 4; the week 5 of 7; the month 6 of 9.
    checks = [(1, True), (2, True), (3, True), (5, False), (30, True), (40, True), (60, False), (24 * 10, True)]
    checks += [(24 * 20, False)]
    HealthCheck.objects.bulk_create(
        HealthCheck(
            entry=entry,
            at=now - timedelta(hours=h),
            ok=ok,
            card_ok=True,
            endpoint_ok=ok,
            status=200 if ok else 503,
            latency_ms=100 + h,
            detail="" if ok else "endpoint: 503 Service Unavailable",
        )
        for h, ok in checks
    )
    return entry


@pytest.mark.django_db
def test_an_entry_page_shows_skills_examples_endpoints_trust_and_uptime(client, planner):
    response = client.get(f"/registry/{planner.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count("<h1") == 1 and "<h1>Route Planner</h1>" in html
    assert "Example Mobility" in html and "Plans cycling routes between two places." in html
    assert "Plan a route" in html and "<q>From the station to the lake, please</q>" in html
    assert '<li class="tag">cycling</li>' in html
    # Endpoints, linked (http(s)), with their binding and version; modes, capabilities, security.
    assert re.search(r'<a href="https://agents.example.test/route-planner/jsonrpc" rel="nofollow noopener ugc">', html)
    assert "<td>HTTP+JSON</td>" in html and "<td>1.0</td>" in html
    assert "Streaming" in html and "apiKey" in html and "application/gpx+xml" in html
    # Trust: the domain and how it was proven, the signature's key id, the state.
    assert "Proven</span> agents.example.test: a token at a well-known path" in html
    assert "key id <code>mobility-2026</code>" in html
    assert ">Approved</span>" in html
    # Health: uptime over a day, a week, a month; the latest checks in a table with headers.
    assert "75 %" in html and re.search(r"71\.43 %", html) and re.search(r"66\.67 %", html)
    assert '<th scope="col">HTTP status</th>' in html and "endpoint: 503 Service Unavailable" in html
    assert "median 103 ms" in html
    # The card itself, pretty-printed, in a <details>.
    assert "<details>" in html and "&quot;supportedInterfaces&quot;: [" in html
    assert "Card versions" in html


@pytest.mark.django_db
def test_the_public_sees_the_approved_card_and_its_owner_the_newer_one_with_the_decisions(client, django_user_model):
    owner = django_user_model.objects.create_user("owner")
    entry = make_entry(card("Old Name"), submitted_by=owner)
    add_version(entry, card("New Name"), approve=False)
    Entry.objects.filter(pk=entry.pk).update(state=State.PENDING)
    Decision.objects.create(
        entry=entry, from_state=State.APPROVED, to_state=State.PENDING, reason="the card changed", at=timezone.now()
    )
    public = client.get(f"/registry/{entry.pk}/").content.decode()
    assert "<h1>Old Name</h1>" in public and "New Name" not in public
    assert ">Approved</span>" in public and "the card changed" not in public and "Decisions" not in public
    client.force_login(owner)
    own = client.get(f"/registry/{entry.pk}/").content.decode()
    assert "<h1>New Name</h1>" in own and "You see version 2 of the card, not approved yet" in own
    assert "The public sees version 1" in own
    assert "Decisions" in own and "the card changed" in own and ">Pending review</span>" in own


@pytest.mark.django_db
def test_an_entry_nobody_may_see_is_not_found_like_a_missing_one(client, django_user_model):
    owner = django_user_model.objects.create_user("drafter")
    draft = make_entry(card("Secret Draft"), state=State.DRAFT, approved=False, submitted_by=owner)
    for url in (f"/registry/{draft.pk}/", f"/registry/{draft.pk + 1000}/", "/registry/99999999999999999999/"):
        response = client.get(url)
        assert response.status_code == 404, url
        assert b"Secret Draft" not in response.content
    assert b"No such agent" in client.get(f"/registry/{draft.pk}/").content
    client.force_login(django_user_model.objects.create_user("stranger"))
    assert client.get(f"/registry/{draft.pk}/").status_code == 404
    by_name = DIRECTORY + "?q=secret+draft"
    assert draft.pk not in listed_ids(client.get(by_name).content.decode())
    client.force_login(owner)
    assert client.get(f"/registry/{draft.pk}/").status_code == 200
    assert draft.pk not in listed_ids(client.get(by_name).content.decode())  # the directory lists listed entries
    curator = django_user_model.objects.create_superuser("curator", "c@example.com")
    client.force_login(curator)
    html = client.get(f"/registry/{draft.pk}/").content.decode()
    assert "Secret Draft" in html and ">Draft</span>" in html


# --- hostile cards ------------------------------------------------------------------------------------

SCRIPT = "<script>alert(1)</script>"


@pytest.mark.django_db
def test_a_hostile_card_is_escaped_everywhere_and_its_javascript_urls_are_not_linked(client):
    document = card(
        f"Evil {SCRIPT}",
        description=f'Desc {SCRIPT} <img src=x onerror="alert(2)">',
        provider=f"Prov {SCRIPT}",
        skills=[
            {
                "id": f"id-{SCRIPT}",
                "name": f"Skill {SCRIPT}",
                "description": f"Skill desc {SCRIPT}",
                "tags": [f"tag{SCRIPT}"],
                "examples": [f"Example {SCRIPT}", '"><svg onload=alert(3)>'],
            }
        ],
    )
    index = orjson.loads(orjson.dumps(dataclasses.asdict(cards.normalise(document, "1.0"))))  # as stored
    # What a normaliser might let through: the index is shown as stored, so the page must cope.
    index["endpoints"] = [
        {"url": "javascript:alert(1)", "binding": f"B{SCRIPT}", "protocol_version": SCRIPT, "tenant": ""},
        {"url": " JavaScript:alert(1)", "binding": "JSONRPC", "protocol_version": "1.0", "tenant": ""},
        {"url": "java\tscript:alert(1)", "binding": "JSONRPC", "protocol_version": "1.0", "tenant": ""},
        {"url": 'https://ok.example.test/" onmouseover="alert(4)', "binding": "JSONRPC", "protocol_version": "1.0"},
        {"url": "data:text/html,<script>alert(5)</script>", "binding": "JSONRPC", "protocol_version": "1.0"},
        {"url": {"not": "a string"}, "binding": 7},
    ]
    index["provider_url"] = "javascript:alert(6)"
    index["documentation_url"] = "vbscript:msgbox(7)"
    index["extensions"] = ["javascript:alert(8)", "https://ext.example.test/x", 9]
    index["capabilities"] = [SCRIPT]
    index["skills"].append("not a skill")
    entry = make_entry(document, kid=f"kid{SCRIPT}")
    CardVersion.objects.filter(entry=entry).update(index=index)
    for url in (f"/registry/{entry.pk}/", DIRECTORY, DIRECTORY + "?" + urlencode({"q": "Evil"})):
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert "<script" not in html.lower(), url
        assert "<img" not in html and "<svg" not in html
        assert not re.search(r"<[a-z][^>]*\son\w+\s*=", html, re.I), "an event handler attribute"
        assert not re.search(r'href="\s*(javascript|vbscript|data):', html, re.I), url
        for anchor in re.findall(r"<a\s[^>]*>", html):  # no attribute but ours on any link
            assert re.fullmatch(r'<a(\s[\w-]+="[^"]*")+>', anchor), anchor
            assert set(re.findall(r'\s([\w-]+)="', anchor)) <= {"href", "rel", "class", "aria-current"}, anchor
    detail = client.get(f"/registry/{entry.pk}/").content.decode()
    assert "Evil &lt;script&gt;alert(1)&lt;/script&gt;" in detail
    assert "Example &lt;script&gt;alert(1)&lt;/script&gt;" in detail
    assert '<span class="not-linked">javascript:alert(1)</span>' in detail
    assert "https://ok.example.test/&quot; onmouseover=&quot;alert(4)" in detail
    assert '<a href="https://ext.example.test/x" rel="nofollow noopener ugc">' in detail


def test_only_absolute_http_urls_become_links():
    for url in ("https://a.example/x", "http://a.example", "HTTPS://A.EXAMPLE/"):
        assert link(url).href == url
    for url in (
        "javascript:alert(1)",
        "//a.example/x",
        "/relative",
        "https://",
        "ftp://a.example/",
        " https://a.b",
        "https://a.b/\nx",
        "mailto:a@b",
        "",
        None,
        5,
        "http://[::1",
    ):
        assert link(url).href == "", url


# --- bad input -------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "says"),
    [
        ({"order": "sideways"}, "order: must be relevance or recent, not &#x27;sideways&#x27;"),
        ({"verified": "maybe"}, "verified: must be true or false"),
        ({"kind": "alien"}, "kind: must be hosted or remote"),
        ({"capability": "telepathy"}, "capability: must be one of streaming, push_notifications, extended_card"),
        ({"q": "x" * 201}, "q: a text query is at most 200 characters (this one has 201)"),
        ({"tag": [f"t{n}" for n in range(11)]}, "tag: at most 10 values (got 11)"),
        ({"skill": "s" * 201}, "skill: a value is at most 200 characters"),
        ({"q": "a\x00b"}, "q: contains a control character (U+0000)"),
        ({"order": ["recent", "relevance"]}, "order: give it once"),
        ({"cursor": "not-a-cursor"}, "cursor: the cursor is not one this server gave"),
        ({"cursor": "x" * 500}, "cursor: not one this server gave"),
    ],
)
def test_a_bad_query_string_gets_a_400_page_that_says_what_is_wrong(client, query, says):
    response = client.get(DIRECTORY + "?" + urlencode(query, doseq=True))
    assert response.status_code == 400
    html = response.content.decode()
    assert says in html, html
    assert "<h1>This search cannot be run</h1>" in html and "Back to the directory" in html


@pytest.mark.django_db
def test_the_submit_page_explains_the_api_steps_with_this_server_s_urls(client):
    directory = client.get(DIRECTORY).content.decode()
    assert directory.count(f'href="{SUBMIT}"') == 2  # the site's navigation, and the page's own words
    page = client.get(SUBMIT)
    assert page.status_code == 200
    html = unescape(page.content.decode())
    steps = re.findall(r"<h2>([^<]+)</h2>", html)
    assert steps == [
        "Get a token",
        "Submit the agent",
        "Publish the proof on the card's host",
        "Ask the server to check",
        "Wait for a curator",
    ]
    assert "curl -s http://testserver/api/registry/token/" in html
    assert "curl -s http://testserver/api/registry/agents/ -H" in html
    assert "http://testserver/api/registry/agents/$ID/verify/" in html and """-d '{"method": "http"}'""" in html
    assert "<code>method</code> is required: <code>http</code> or <code>dns</code>" in html
    assert "/.well-known/agentserver-verification.txt" in html and "_agentserver-verification.<host>" in html
    assert 'href="/api/docs/"' in html and 'aria-current="page">Submit an agent</a>' in html


@pytest.mark.django_db
def test_the_pages_are_read_only(client, planner):
    for url in (DIRECTORY, f"/registry/{planner.pk}/", SUBMIT):
        assert client.post(url).status_code == 405
        assert client.head(url).status_code == 200


def _cursor(order: str, first: Any, last: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"o": order, "k": [first, last]})).decode().rstrip("=")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "status"),
    [
        ({"cursor": _cursor("recent", "2026-13-45T00:00:00", 5)}, 400),  # a date that is no date
        ({"cursor": _cursor("recent", "2026-01-01T00:00:00+00:00", 2**64 - 1)}, 200),
        ({"cursor": _cursor("recent", None, -(2**63))}, 200),
        ({"q": "weather", "cursor": _cursor("relevance", 2**64 - 1, 2**64 - 1)}, 200),
        ({"q": "weather", "cursor": _cursor("relevance", -(2**63), 1)}, 200),
        ({"q": "weather", "cursor": _cursor("relevance", 1.5, 1)}, 400),
    ],
)
def test_a_forged_cursor_gets_a_page_or_a_400(client, seeded, query, status):
    assert client.get(DIRECTORY + "?" + urlencode(query)).status_code == status


@pytest.mark.django_db
def test_a_cursor_of_one_ordering_is_refused_for_the_other(client, seeded):
    following = next_url(client.get(DIRECTORY).content.decode())
    assert following is not None
    cursor = dict(parse_qsl(urlsplit(following).query))["cursor"]
    response = client.get(DIRECTORY + "?" + urlencode({"q": "weather", "order": "relevance", "cursor": cursor}))
    assert response.status_code == 400 and b"start again without it" in response.content


def test_a_search_survives_the_round_trip_through_its_query_string():
    query = {
        "q": "plan routes",
        "tag": ["cycling", "maps"],
        "capability": "push",
        "binding": "jsonrpc",
        "verified": "yes",
        "healthy": "0",
        "deprecated": "on",
        "kind": "Remote",
        "order": "recent",
        "provider": "Example Mobility",
        "cursor": "ignored",
    }
    search = search_from_query(query)
    assert search.tags == ("cycling", "maps") and search.capabilities == ("push_notifications",)
    assert search.verified is True and search.healthy is False and search.signed is None
    assert search.kind == "remote" and search.order == "recent" and search.include_deprecated
    assert search_from_query(dict(_group(query_from_search(search)))) == search
    assert search_from_query({}) == search_from_query({"q": "", "tag": ["", " "], "signed": ""})
    with pytest.raises(BadSearch) as refused:
        search_from_query({"signed": "perhaps"})
    assert refused.value.param == "signed" and isinstance(refused.value, ValueError)


def _group(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    return grouped


_odd = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["\x00", "'", "&|!", ":*", "x" * 3000, "2026-13-45", "-1", "99999999999999999999", "true", "JSONRPC", "%", "\\"]
)
_params = st.sampled_from(
    [
        "q",
        "tag",
        "skill",
        "input_mode",
        "output_mode",
        "capability",
        "binding",
        "protocol_version",
        "security",
        "provider",
        "verified",
        "signed",
        "healthy",
        "include_deprecated",
        "kind",
        "order",
        "cursor",
        "other",
    ]
)
_int64 = st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.sampled_from([0, 2**31, -(2**63), 2**64 - 1])
_cursors = st.builds(
    lambda order, first, last: base64.urlsafe_b64encode(orjson.dumps({"o": order, "k": [first, last]})).decode(),
    st.sampled_from(["recent", "relevance", "x"]),
    st.one_of(_int64, st.text(max_size=30), st.none(), st.floats(allow_nan=False), st.just("2026-13-45")),
    st.one_of(_int64, st.text(max_size=5)),
)


@pytest.mark.django_db
@settings(max_examples=150, deadline=None, suppress_health_check=[HypothesisHealthCheck.function_scoped_fixture])
@given(
    pairs=st.lists(st.tuples(_params, _odd), max_size=6),
    cursor=st.none() | _cursors,
    raw=st.text(max_size=80),
)
def test_no_query_string_makes_the_directory_answer_500(client, seeded, pairs, cursor, raw):
    """Whatever a person types or a link carries: a page or a 400, never a server error."""
    if cursor is not None:
        pairs = [*pairs, ("cursor", cursor)]
    for url in (DIRECTORY + "?" + urlencode(pairs), DIRECTORY + "?" + raw):
        response = client.get(url)
        assert response.status_code in (200, 400), (url, response.status_code)
    for url in (SUBMIT + "?" + urlencode(pairs), SUBMIT + "?" + raw):  # it reads no query at all
        assert client.get(url).status_code == 200, url
    for url in ("/?" + urlencode(pairs), "/?" + raw):  # the site's root leads to the directory
        answer = client.get(url)
        assert answer.status_code == 302 and answer["Location"].startswith(DIRECTORY), url


# --- queries ----------------------------------------------------------------------------------------------


def count_queries(client, url: str, expect: int = 200) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == expect, url
    return len(queries)


@pytest.mark.django_db
def test_the_directory_makes_as_many_queries_for_one_result_as_for_a_full_page(
    client, seeded, django_user_model, django_assert_max_num_queries
):
    one = (
        DIRECTORY + "?" + urlencode({"q": seeded_card(seeded.facts[seeded.listed[0]]["i"])["name"], "tag": "assistant"})
    )
    full = DIRECTORY + "?deprecated=true"
    cold = count_queries(client, full)  # the filter choices are counted once, then cached
    assert cold <= 2 + 8
    counts = {url: count_queries(client, url) for url in (one, full, full + "&binding=JSONRPC&healthy=true")}
    assert len(listed_ids(client.get(one).content.decode())) == 1
    assert len(listed_ids(client.get(full).content.decode())) == PAGE_SIZE
    assert set(counts.values()) == {2}, counts  # the page of entries, their tags
    second = next_url(client.get(full).content.decode())
    with django_assert_max_num_queries(2):
        client.get(second)
    client.force_login(django_user_model.objects.create_user("reader"))
    signed_in = {count_queries(client, url) for url in (one, full)}
    assert signed_in == {2 + 2}  # and the session and the user


@pytest.mark.django_db
def test_an_entry_page_makes_a_fixed_number_of_queries(client, planner, django_user_model):
    bare = make_entry(card("Bare"))
    assert count_queries(client, f"/registry/{planner.pk}/") == count_queries(client, f"/registry/{bare.pk}/") <= 7
    owner = django_user_model.objects.create_user("planner-owner")
    Entry.objects.filter(pk__in=[planner.pk, bare.pk]).update(submitted_by=owner)
    for n in range(2, 30):
        add_version(planner, card(f"Route Planner v{n}"), approve=False)
    client.force_login(owner)
    assert count_queries(client, f"/registry/{planner.pk}/") == count_queries(client, f"/registry/{bare.pk}/") <= 12
