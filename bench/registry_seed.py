"""Seed a database with many listed directory entries for the registry benchmark
(bench/registry_bench.py).

    .venv/bin/python bench/registry_seed.py                   # 10,000 entries
    .venv/bin/python bench/registry_seed.py --entries 2000    # fewer
    REGISTRY_BENCH_DB=postgres://postgres@127.0.0.1:5432/other .venv/bin/python bench/registry_seed.py

The database (default `agentserver_registry_bench` on the server of DATABASE_URL, or
127.0.0.1) is created if missing and migrated; the registry's tables are emptied and filled
again (so a second run gives the same directory: the cards come from a seeded random
generator). Nothing goes through the network.

Each entry is a remote agent with an A2A 1.0 card normalised by registry.cards, one card
version, approved (a decision) and indexed the way registry.services._reindex indexes it: the
columns, the facets (services._facets) and the weighted search vector (cards.search_text,
turned into a tsvector by the same SQL SearchVector renders), all by bulk inserts and one
UPDATE per batch. The mix: 30 topics (invoices, translation, weather...), 400 providers,
1-4 skills a card with tags and examples, modes, bindings (JSONRPC 75%, HTTP+JSON 50%, GRPC
15%), protocol versions, capabilities and security schemes; 80% healthy, 20% signed, 4%
deprecated, 4% with a changed card waiting for review; 24 liveness checks each (the last day).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from admin_seed import database_ensure, setup_django  # noqa: E402

DEFAULT_DB = "agentserver_registry_bench"
BATCH = 2000
CHECKS_PER_ENTRY = 24

# topic -> (tags, skills: (id, name, description, examples))
TOPICS: dict[str, tuple[list[str], list[tuple[str, str, str, list[str]]]]] = {
    "invoice": (
        ["finance", "invoices", "accounting"],
        [
            (
                "extract-invoice",
                "Extract invoice data",
                "Reads totals, dates and VAT from invoices.",
                ["What is the total on this invoice?", "Extract the VAT number"],
            ),
            (
                "chase-payment",
                "Chase late payments",
                "Drafts reminders for overdue invoices.",
                ["Remind ACME about invoice 2291"],
            ),
        ],
    ),
    "translation": (
        ["language", "translation", "localisation"],
        [
            (
                "translate",
                "Translate text",
                "Translates between 40 languages, keeping the tone.",
                ["Translate this email into German", "How do you say invoice in Japanese?"],
            ),
            ("detect-language", "Detect a language", "Names the language of a text.", ["Which language is this?"]),
        ],
    ),
    "weather": (
        ["weather", "forecast", "climate"],
        [
            (
                "forecast",
                "Weather forecast",
                "Hourly and ten-day forecasts for any place.",
                ["Will it rain in Lisbon tomorrow?", "Forecast for the weekend in Oslo"],
            ),
            ("storm-alerts", "Storm alerts", "Warns of storms along a route.", ["Any storms on the A7 tonight?"]),
        ],
    ),
    "travel": (
        ["travel", "booking", "flights"],
        [
            (
                "book-flight",
                "Book a flight",
                "Finds and books flights within a budget.",
                ["Cheapest flight Paris to Rome in May"],
            ),
            ("plan-trip", "Plan a trip", "Builds a day-by-day itinerary.", ["Three days in Kyoto with kids"]),
        ],
    ),
    "code-review": (
        ["developer-tools", "code", "review"],
        [
            (
                "review-diff",
                "Review a pull request",
                "Comments on a diff: bugs, style, tests.",
                ["Review this diff for race conditions"],
            ),
            ("explain-code", "Explain code", "Explains what a function does.", ["What does this regex match?"]),
        ],
    ),
    "support": (
        ["customer-support", "helpdesk", "tickets"],
        [
            (
                "triage-ticket",
                "Triage a ticket",
                "Sorts support tickets by urgency and team.",
                ["Who should handle this refund request?"],
            ),
            (
                "answer-faq",
                "Answer questions",
                "Answers from the help centre's articles.",
                ["How do I reset my password?"],
            ),
        ],
    ),
    "legal": (
        ["legal", "contracts", "compliance"],
        [
            ("review-contract", "Review a contract", "Flags unusual clauses in contracts.", ["Is this NDA one-sided?"]),
            (
                "gdpr-check",
                "GDPR check",
                "Checks a process against the GDPR.",
                ["Can we keep these logs for two years?"],
            ),
        ],
    ),
    "recipes": (
        ["cooking", "recipes", "food"],
        [
            (
                "suggest-recipe",
                "Suggest a recipe",
                "Recipes from what is in the fridge.",
                ["Dinner with leeks and lentils"],
            ),
            ("meal-plan", "Plan meals", "A week of meals within a budget.", ["Vegetarian meal plan for four"]),
        ],
    ),
    "music": (
        ["music", "playlists", "audio"],
        [
            ("make-playlist", "Make a playlist", "Playlists for a mood or an event.", ["Songs for a rainy Sunday"]),
            ("identify-song", "Identify a song", "Names a song from a hummed tune.", ["What song goes da-da-dum?"]),
        ],
    ),
    "chess": (
        ["games", "chess", "puzzles"],
        [
            (
                "analyse-position",
                "Analyse a position",
                "Best moves for a chess position (FEN).",
                ["Best move in this endgame?"],
            ),
        ],
    ),
    "hr": (
        ["hr", "recruiting", "people"],
        [
            (
                "screen-cv",
                "Screen CVs",
                "Ranks CVs against a job description.",
                ["Shortlist five for the data engineer role"],
            ),
            (
                "draft-offer",
                "Draft an offer letter",
                "Offer letters from a template.",
                ["Offer letter for a junior designer"],
            ),
        ],
    ),
    "sales": (
        ["sales", "crm", "leads"],
        [
            ("qualify-lead", "Qualify a lead", "Scores leads from the CRM.", ["Is this lead worth a call?"]),
            (
                "write-outreach",
                "Write outreach",
                "Personal first emails to prospects.",
                ["Intro email to a logistics CTO"],
            ),
        ],
    ),
    "data": (
        ["data", "analytics", "sql"],
        [
            ("write-sql", "Write SQL", "SQL from a question about your schema.", ["Monthly revenue by region as SQL"]),
            ("chart", "Make a chart", "Charts from a CSV.", ["Plot sales per week"]),
        ],
    ),
    "security": (
        ["security", "vulnerabilities", "devsecops"],
        [
            (
                "scan-deps",
                "Scan dependencies",
                "Known vulnerabilities in a lock file.",
                ["Is this requirements.txt safe?"],
            ),
            ("threat-model", "Threat model", "A STRIDE threat model of a design.", ["Threats of a public upload form"]),
        ],
    ),
    "health": (
        ["health", "fitness", "wellbeing"],
        [
            ("training-plan", "Training plan", "Running plans for a race.", ["Plan for a first half marathon"]),
        ],
    ),
    "education": (
        ["education", "tutoring", "math"],
        [
            (
                "tutor-math",
                "Math tutor",
                "Step-by-step help with algebra and calculus.",
                ["Explain integration by parts"],
            ),
            ("quiz", "Make a quiz", "Quizzes from a text.", ["Ten questions on the French revolution"]),
        ],
    ),
    "real-estate": (
        ["real-estate", "housing", "mortgages"],
        [
            (
                "value-home",
                "Value a home",
                "Estimates a price from comparable sales.",
                ["What is a flat in Leeds worth?"],
            ),
        ],
    ),
    "logistics": (
        ["logistics", "shipping", "routes"],
        [
            ("track-parcel", "Track a parcel", "Status of a parcel across carriers.", ["Where is parcel JD0142?"]),
            (
                "optimise-routes",
                "Optimise routes",
                "Delivery routes with fewer miles.",
                ["Routes for 40 stops in Lyon"],
            ),
        ],
    ),
    "news": (
        ["news", "summaries", "media"],
        [
            (
                "summarise-news",
                "Summarise the news",
                "A morning briefing on chosen topics.",
                ["Today's news on batteries"],
            ),
        ],
    ),
    "images": (
        ["images", "vision", "design"],
        [
            ("describe-image", "Describe an image", "Alt text and captions for images.", ["Alt text for this photo"]),
            ("remove-background", "Remove a background", "Cuts out the subject of a photo.", ["Remove the background"]),
        ],
    ),
    "calendar": (
        ["calendar", "scheduling", "productivity"],
        [
            (
                "find-slot",
                "Find a meeting slot",
                "A time that suits everyone's calendar.",
                ["Find an hour for five people next week"],
            ),
        ],
    ),
    "email": (
        ["email", "productivity", "writing"],
        [
            ("triage-inbox", "Triage an inbox", "Sorts and summarises unread email.", ["What needs an answer today?"]),
            ("draft-reply", "Draft a reply", "Polite replies in your voice.", ["Decline this meeting politely"]),
        ],
    ),
    "energy": (
        ["energy", "sustainability", "climate"],
        [
            (
                "carbon-footprint",
                "Carbon footprint",
                "Estimates emissions of a trip or a purchase.",
                ["CO2 of a flight to Madrid"],
            ),
        ],
    ),
    "insurance": (
        ["insurance", "claims", "finance"],
        [
            (
                "file-claim",
                "File a claim",
                "Collects what an insurer needs for a claim.",
                ["My bike was stolen: what now?"],
            ),
        ],
    ),
    "research": (
        ["research", "papers", "science"],
        [
            (
                "find-papers",
                "Find papers",
                "Finds and summarises papers on a question.",
                ["Recent papers on protein folding"],
            ),
            ("cite", "Format citations", "Citations in any style.", ["This DOI in APA style"]),
        ],
    ),
    "gardening": (
        ["gardening", "plants", "outdoors"],
        [
            ("plant-care", "Plant care", "When to water, prune and feed.", ["Why are my basil leaves yellow?"]),
        ],
    ),
    "pets": (
        ["pets", "animals", "vets"],
        [
            ("pet-advice", "Pet advice", "Everyday questions about cats and dogs.", ["Can dogs eat grapes?"]),
        ],
    ),
    "accessibility": (
        ["accessibility", "a11y", "design"],
        [
            (
                "audit-page",
                "Audit a web page",
                "WCAG problems of a page, with fixes.",
                ["Check the contrast of our sign-up page"],
            ),
        ],
    ),
    "ops": (
        ["devops", "incidents", "monitoring"],
        [
            (
                "explain-alert",
                "Explain an alert",
                "What an alert means and what to try first.",
                ["Why is disk latency high on db-2?"],
            ),
            (
                "postmortem",
                "Draft a postmortem",
                "A blameless postmortem from a timeline.",
                ["Postmortem for Tuesday's outage"],
            ),
        ],
    ),
    "shopping": (
        ["shopping", "e-commerce", "deals"],
        [
            ("compare-prices", "Compare prices", "The same product across shops.", ["Cheapest price for this kettle"]),
        ],
    ),
}
ADJECTIVES = "Swift Clever Quiet Bright Steady Nimble Friendly Careful Open Tiny Grand Simple Smart Handy Keen".split()
ROLES = "Assistant Agent Helper Bot Copilot Desk Scout Pilot Buddy Expert".split()
SYLLABLES = "ac me glo bex ini tech umb rel la hoo li sta rk vo lta ne xo ra zen ta qui ka mo ri".split()
GENERIC_TAGS = ["beta", "enterprise", "free", "open-source", "multilingual", "realtime", "gdpr", "eu", "us", "api"]
MODES_IN = ["text/plain", "application/json", "image/png", "application/pdf", "audio/wav", "text/csv"]
MODES_OUT = ["text/plain", "application/json", "text/markdown", "image/png", "text/csv"]
HEALTH = (("healthy", 80), ("degraded", 10), ("stale", 7), ("unknown", 3))


def bench_database_url() -> str:
    if url := os.environ.get("REGISTRY_BENCH_DB"):
        return url
    base = urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/agentserver"))
    return urlunsplit(base._replace(path=f"/{DEFAULT_DB}"))


def providers(rng: random.Random, n: int = 400) -> list[tuple[str, str]]:
    """(organisation, domain) pairs."""
    out = []
    for i in range(n):
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))
        suffix = rng.choice(["Labs", "AI", "Systems", "Inc", "GmbH", "Cloud", "Works", "Studio"])
        out.append((f"{word.title()} {suffix}", f"{word}{i}.example.com"))
    return out


def card(rng: random.Random, i: int, provider: tuple[str, str]) -> dict[str, Any]:
    """A realistic A2A 1.0 card for entry number `i`."""
    topic = rng.choice(list(TOPICS))
    tags, templates = TOPICS[topic]
    second = rng.choice(list(TOPICS)) if rng.random() < 0.35 else None
    organisation, domain = provider
    name = f"{rng.choice(ADJECTIVES)} {topic.replace('-', ' ').title()} {rng.choice(ROLES)}"
    if rng.random() < 0.5:
        name += f" {i}"
    chosen = rng.sample(templates, k=rng.randint(1, len(templates)))
    if second:
        chosen += rng.sample(TOPICS[second][1], k=1)
    skills = []
    for sid, sname, sdesc, examples in chosen:
        skill_topic = next(t for t, (_tags, tpl) in TOPICS.items() if any(s[0] == sid for s in tpl))
        skill_tags = TOPICS[skill_topic][0][: rng.randint(1, 3)]
        if rng.random() < 0.3:
            skill_tags = [*skill_tags, rng.choice(GENERIC_TAGS)]
        skill: dict[str, Any] = {"id": sid, "name": sname, "description": sdesc, "tags": skill_tags}
        if rng.random() < 0.85:
            skill["examples"] = examples
        if rng.random() < 0.2:
            skill["outputModes"] = rng.sample(MODES_OUT, k=1)
        skills.append(skill)
    bindings = [b for b, share in (("JSONRPC", 0.75), ("HTTP+JSON", 0.5), ("GRPC", 0.15)) if rng.random() < share]
    bindings = bindings or ["JSONRPC"]
    version = "1.0" if rng.random() < 0.8 else "0.3"
    slug = f"{topic}-{i}"
    document: dict[str, Any] = {
        "name": name,
        "description": f"{name} by {organisation}: {chosen[0][2]} "
        + rng.choice(["Fast and private.", "Used by 200 teams.", "Works in any language.", "Answers in seconds.", ""]),
        "supportedInterfaces": [
            {
                "url": f"https://{domain}/agents/{slug}/{b.lower().replace('+', '-')}",
                "protocolBinding": b,
                "protocolVersion": version,
            }
            for b in bindings
        ],
        "provider": {"organization": organisation, "url": f"https://{domain}/"},
        "version": f"{rng.randint(0, 3)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}",
        "documentationUrl": f"https://{domain}/docs/{slug}",
        "capabilities": {"streaming": rng.random() < 0.5, "pushNotifications": rng.random() < 0.3},
        "defaultInputModes": ["text/plain", *rng.sample(MODES_IN[1:], k=rng.randint(0, 2))],
        "defaultOutputModes": ["text/plain", *rng.sample(MODES_OUT[1:], k=rng.randint(0, 2))],
        "skills": skills,
    }
    if rng.random() < 0.6:
        document["securitySchemes"] = {"key": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}}
        document["securityRequirements"] = [{"schemes": {"key": {"list": []}}}]
    return document


def _weighted(rng: random.Random, choices: tuple[tuple[str, int], ...]) -> str:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def seed(count: int) -> None:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from registry import cards, services
    from registry.models import CardVersion, Entry, Facet, Kind, ProofMethod, State

    started = time.monotonic()

    def step(what: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s  {what}", flush=True)

    call_command("migrate", verbosity=0)
    step("migrated")
    user_model = get_user_model()
    if not user_model.objects.filter(username="bench").exists():
        user_model.objects.create_superuser("bench", "bench@example.com", "bench")
    tables = [m._meta.db_table for m in (Entry, CardVersion, Facet)]
    with connection.cursor() as cur:
        cur.execute(
            "TRUNCATE registry_entry, registry_cardversion, registry_decision, registry_flag, registry_healthcheck, "
            "registry_facet RESTART IDENTITY CASCADE"
        )
    step("registry emptied")
    rng = random.Random(21)
    makers = providers(rng)
    now = timezone.now()
    for first in range(0, count, BATCH):
        size = min(BATCH, count - first)
        documents, indexes, entries, texts = [], [], [], []
        for i in range(first, first + size):
            provider = makers[int(rng.paretovariate(1.2)) % len(makers)]  # a few big providers, a long tail
            document = card(rng, i, provider)
            normalised = cards.normalise(document, "1.0")
            index = dataclasses.asdict(normalised)
            texts.append(cards.search_text(normalised))
            signed = rng.random() < 0.2
            state = _weighted(rng, ((State.APPROVED, 92), (State.DEPRECATED, 4), (State.PENDING, 4)))
            health = _weighted(rng, HEALTH)
            listed_at = now - timedelta(days=365) + timedelta(seconds=int(365 * 86400 * (i + rng.random()) / count))
            documents.append(document)
            indexes.append(index)
            entries.append(
                Entry(
                    kind=Kind.REMOTE,
                    card_url=f"https://{provider[1]}/agents/{i}/.well-known/agent-card.json",
                    domain=provider[1],
                    state=state,
                    state_changed_at=listed_at,
                    domain_verified_at=listed_at - timedelta(hours=2),
                    domain_verified_by=rng.choice([ProofMethod.HTTP, ProofMethod.DNS]),
                    name=index["name"][:300],
                    description=index["description"],
                    provider=index["provider_organization"][:300],
                    endpoint_url=index["url"][:2048],
                    dialect="1.0",
                    signed=signed,
                    signing_kid=f"{provider[1]}#key-{rng.randint(1, 4)}" if signed else "",
                    health=health,
                    last_checked_at=now - timedelta(minutes=rng.randint(1, 10)) if health != "unknown" else None,
                    last_ok_at=now - timedelta(minutes=rng.randint(1, 600)) if health != "unknown" else None,
                    latency_ms=rng.randint(40, 900) if health != "unknown" else None,
                    next_check_at=now + timedelta(days=3650),  # no beat job runs here; keep it so
                    listed_at=listed_at,
                )
            )
        with transaction.atomic():
            Entry.objects.bulk_create(entries)
            CardVersion.objects.bulk_create(
                CardVersion(
                    entry=entry,
                    number=1,
                    hash=cards.card_hash(document),
                    dialect="1.0",
                    fetched_from=entry.card_url,
                    raw="",  # the bytes served: not read by any page or search; left out to seed faster
                    document=document,
                    index=index,
                    signatures=[
                        {"kid": entry.signing_kid, "alg": "ES256", "jku": "", "valid": True, "reason": "seeded"}
                    ]
                    if entry.signed
                    else [],
                    fetched_at=entry.listed_at,
                )
                for entry, document, index in zip(entries, documents, indexes, strict=True)
            )
            Facet.objects.bulk_create(
                Facet(entry=entry, kind=kind, value=value)
                for entry, index in zip(entries, indexes, strict=True)
                for kind, value in services._facets(index)
            )
            blocks = io.StringIO()
            for entry, b in zip(entries, texts, strict=True):
                row = [str(entry.pk), b["A"], b["B"], b["C"], b["D"]]
                blocks.write("\t".join(v.replace("\\", " ").replace("\t", " ").replace("\n", " ") for v in row) + "\n")
            with connection.cursor() as cur:
                cur.execute("CREATE TEMP TABLE IF NOT EXISTS bench_blocks (id bigint, a text, b text, c text, d text)")
                cur.execute("TRUNCATE bench_blocks")
                with cur.cursor.copy("COPY bench_blocks FROM STDIN") as copy:
                    copy.write(blocks.getvalue())
                # What SearchVector(Value(x), config="english", weight=w) + ... renders in _reindex.
                cur.execute(
                    """
                    UPDATE registry_entry e SET
                        search = setweight(to_tsvector('english'::regconfig, COALESCE(b.a, '')), 'A')
                              || setweight(to_tsvector('english'::regconfig, COALESCE(b.b, '')), 'B')
                              || setweight(to_tsvector('english'::regconfig, COALESCE(b.c, '')), 'C')
                              || setweight(to_tsvector('english'::regconfig, COALESCE(b.d, '')), 'D'),
                        current_version_id = v.id,
                        approved_version_id = v.id
                    FROM bench_blocks b, registry_cardversion v
                    WHERE e.id = b.id AND v.entry_id = e.id AND v.number = 1
                    """
                )
            # A changed card waiting for review: a second version, current but not approved.
            pending = [(e, d) for e, d in zip(entries, documents, strict=True) if e.state == State.PENDING]
            changed = CardVersion.objects.bulk_create(
                CardVersion(
                    entry=entry,
                    number=2,
                    hash=cards.card_hash({**document, "version": "9.9.9"}),
                    dialect="1.0",
                    fetched_from=entry.card_url,
                    raw="",
                    document={**document, "version": "9.9.9"},
                    index={**dataclasses.asdict(cards.normalise(document, "1.0")), "card_version": "9.9.9"},
                    signatures=[],
                    fetched_at=now,
                )
                for entry, document in pending
            )
            for version in changed:
                Entry.objects.filter(pk=version.entry_id).update(current_version=version)
        step(f"entries {first + 1}..{first + size}")
    with connection.cursor() as cur:
        # The decisions that listed them, and the last day's liveness checks (hourly).
        cur.execute(
            """
            INSERT INTO registry_decision (entry_id, from_state, to_state, actor_id, reason, version_id, at)
            SELECT e.id, 'pending', 'approved', NULL, 'approved', e.approved_version_id, e.listed_at
            FROM registry_entry e
            """
        )
        cur.execute(
            f"""
            INSERT INTO registry_healthcheck (entry_id, at, ok, card_ok, endpoint_ok, status, latency_ms, detail)
            SELECT e.id, now() - make_interval(hours => h),
                   ok, true, ok, CASE WHEN ok THEN 200 ELSE 503 END, 40 + (e.id * 37 + h * 11) % 800,
                   CASE WHEN ok THEN '' ELSE 'endpoint: 503 Service Unavailable' END
            FROM registry_entry e, generate_series(0, {CHECKS_PER_ENTRY - 1}) AS h,
                 LATERAL (SELECT CASE e.health WHEN 'healthy' THEN (e.id + h) % 40 <> 0
                                               WHEN 'degraded' THEN (e.id + h) % 3 <> 0
                                               ELSE h > 6 END AS ok) AS o
            WHERE e.health <> 'unknown'
            """
        )
        step("decisions and health checks")
        for table in [*tables, "registry_decision", "registry_healthcheck"]:
            cur.execute(f"VACUUM ANALYZE {table}")
        step("vacuumed and analysed")
        cur.execute("SELECT count(*) FROM registry_entry WHERE approved_version_id IS NOT NULL")
        listed = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM registry_facet")
        facets = cur.fetchone()[0]
    print(f"{listed:,} listed entries ({facets:,} facets) in {connection.settings_dict['NAME']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=10_000)
    args = parser.parse_args()
    url = bench_database_url()
    database_ensure(url)
    setup_django(url)
    seed(args.entries)


if __name__ == "__main__":
    main()
