"""How long the directory's search takes on the database bench/registry_seed.py fills: the
search API (/api/registry/agents/) and the directory page (/registry/) for a text query with
two filters, the newest-first listing without a query, and an entry's page.

    .venv/bin/python bench/registry_seed.py      # once: 10,000 listed entries
    .venv/bin/python bench/registry_bench.py     # N=30 runs of each request
    .venv/bin/python bench/registry_bench.py --runs 100

Each request is made in-process with Django's test Client, anonymously (what the public sees),
so the time is the server's alone (middleware, view, queries, template or serializer), no
network. Each is made twice first (warm caches: the page's filter choices are cached for a
minute, and one row times them uncached), then `--runs` times timed, then once more with the
queries captured (their count and total time). Results go to
bench/results/registry_bench-<time>.json (not kept in git) and a table to stdout. The API rows
are skipped, and say so, while /api/registry/ is not on this branch.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inprocess  # noqa: E402
from admin_seed import setup_django  # noqa: E402
from registry_seed import bench_database_url  # noqa: E402

API = "/api/registry/agents/"
PAGE = "/registry/"
# A text query and two filters: a tag and a binding (the example), from the seed's topics.
SEARCHES = (
    ("invoice", "finance"),
    ("translate", "language"),
    ("weather forecast", "weather"),
    ("review", "developer-tools"),
    ("book flight", "travel"),
    ("sql", "data"),
)
RESULT = re.compile(rb'<h3 id="entry-\d+">')
NEXT = re.compile(rb'<a href="\?([^"]*)" rel="next">Next page</a>')


def requests(client: Any) -> dict[str, tuple[str, Callable[[], None] | None]]:
    """Name -> (URL, what to do before each run) of every request measured."""
    from django.core.cache import cache

    from registry.models import Entry, State

    typical = Entry.objects.filter(state=State.APPROVED, health="healthy", signed=True).order_by("pk").first()
    pending = Entry.objects.filter(state=State.PENDING).order_by("pk").first()
    assert typical is not None and pending is not None, "no seeded entries: run bench/registry_seed.py first"
    found: dict[str, tuple[str, Callable[[], None] | None]] = {}
    api_here = client.get(API).status_code != 404
    for q, tag in SEARCHES:
        query = urlencode({"q": q, "tag": tag, "binding": "JSONRPC"})
        if api_here:
            found[f"API  q={q} tag={tag} binding=JSONRPC"] = (f"{API}?{query}", None)
        found[f"page q={q} tag={tag} binding=JSONRPC"] = (f"{PAGE}?{query}", None)
    first = f"{PAGE}?q=invoice&tag=finance&binding=JSONRPC"
    found["page q=invoice tag=finance binding=JSONRPC, filter choices not cached"] = (first, cache.clear)
    found["page q=invoice (text only)"] = (f"{PAGE}?q=invoice", None)
    # A broad word (in a fifth of the descriptions): every match is ranked before the first page.
    found["page q=fast (broad: ~2,000 matches)"] = (f"{PAGE}?q=fast", None)
    if api_here:
        found["API  newest first, no query"] = (API, None)
    found["page newest first, no query"] = (PAGE, None)
    following = NEXT.search(client.get(PAGE).content)
    assert following is not None
    found["page newest first, page 2"] = (f"{PAGE}?{following.group(1).decode().replace('&amp;', '&')}", None)
    found["page healthy=true signed=true, no query"] = (f"{PAGE}?healthy=true&signed=true", None)
    if api_here:
        found["API  one entry"] = (f"{API}{typical.pk}/", None)
    found["page one entry (24 checks)"] = (f"{PAGE}{typical.pk}/", None)
    found["page one entry, a changed card in review"] = (f"{PAGE}{pending.pk}/", None)
    return found


def measure(client: Any, url: str, runs: int, before: Callable[[], None] | None) -> dict[str, Any]:
    figures, response = inprocess.measure(client, url, runs, before)
    return {**figures, "results": _results(url, response)}


def _results(url: str, response: Any) -> int | None:
    if url.startswith(API):
        body = response.json()
        return len(body["results"]) if isinstance(body, dict) and "results" in body else None
    return len(RESULT.findall(response.content)) if "/registry/?" in url or url == PAGE else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    # The pages link their stylesheet by its plain name: no collectstatic needed to run this.
    os.environ.setdefault("STATIC_FROM_APPS", "1")
    setup_django(bench_database_url())

    from django.conf import settings
    from django.test import Client
    from django.test.utils import setup_test_environment

    from registry.models import Entry

    setup_test_environment()  # the Client's host
    client = Client()
    results = {}
    measured = requests(client)
    if not any(name.startswith("API") for name in measured):
        print(f"{API} answers 404 here (the API is not on this branch): its rows are skipped\n")
    for name, (url, before) in measured.items():
        results[name] = r = measure(client, url, args.runs, before)
        shown = "" if r["results"] is None else f"  {r['results']} results"
        print(
            f"{name:72s} median {r['median_ms']:6.1f} ms  p95 {r['p95_ms']:6.1f} ms  "
            f"{r['queries']:2d} queries ({r['query_ms']:.1f} ms){shown}",
            flush=True,
        )
    out = inprocess.write_results(
        "registry_bench",
        {
            "database": settings.DATABASES["default"]["NAME"],
            "entries": Entry.objects.count(),
            "listed": Entry.objects.listed().count(),
            "runs": args.runs,
            "requests": results,
        },
    )
    print("\n| request | median ms | p95 ms | queries (ms) | results |\n|---|---:|---:|---:|---:|")
    for name, r in results.items():
        print(
            f"| {name} | {r['median_ms']} | {r['p95_ms']} | {r['queries']} ({r['query_ms']}) | {r['results'] or ''} |"
        )
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
