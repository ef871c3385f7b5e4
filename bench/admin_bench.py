"""How long the admin's task pages take on the database bench/admin_seed.py fills.

    .venv/bin/python bench/admin_seed.py        # once: a million tasks
    .venv/bin/python bench/admin_bench.py       # N=20 runs of each page
    .venv/bin/python bench/admin_bench.py --runs 50

Each page is fetched in-process with Django's test Client, logged in as the seed's superuser,
so the time is the server's alone (middleware, view, queries, template), no network. Each
page is fetched twice first (warm caches), then `--runs` times timed, then once more with
the queries captured (their count, and their total time). The results go to
bench/results/admin_bench-<time>.json (not kept in git) and a table to stdout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inprocess  # noqa: E402
from admin_seed import bench_database_url, setup_django  # noqa: E402

LIST = "/admin/tasks_app/task/"


def pages() -> dict[str, str]:
    """Name -> URL of each page measured, with ids picked from the seeded data."""
    from accounts.models import Agent
    from tasks_app.models import Message, Task

    typical = Task.objects.filter(state="completed", message_count=3, artifact_count=1).order_by("pk").first()
    assert typical is not None, "no seeded tasks: run bench/admin_seed.py first"
    agent = Agent.objects.order_by("slug").first()
    assert agent is not None
    message = Message.objects.filter(task=typical).order_by("id").first()
    assert message is not None
    rare = message.parts[0]["text"].split()[-1]  # w<n>: a word of ~50 tasks' messages
    huge = Task.objects.order_by("-last_seq").first()  # one of the tasks with thousands of events
    assert huge is not None
    return {
        "list": LIST,
        "list, page 2": LIST + "?p=2",
        "filter state=failed": LIST + "?state=failed",
        "filter state=completed": LIST + "?state=completed",
        "filter agent": LIST + f"?agent__id__exact={agent.pk}",
        "filter tenant": LIST + f"?tenant__id__exact={agent.tenant_id}",
        "filter changed past day": LIST + "?changed=1d",
        "search task id": LIST + "?" + urlencode({"q": str(typical.pk)}),
        "search context id": LIST + "?" + urlencode({"q": typical.context_id}),
        "search message id": LIST + "?" + urlencode({"q": message.message_id}),
        f"search text (rare word {rare})": LIST + "?" + urlencode({"q": rare}),
        "search text (common word invoice)": LIST + "?" + urlencode({"q": "invoice"}),
        "task detail (typical task)": f"{LIST}{typical.pk}/change/",
        f"task detail (huge task, {huge.last_seq} events)": f"{LIST}{huge.pk}/change/",
        "task detail (huge task, timeline page 5)": f"{LIST}{huge.pk}/change/?timeline_page=5",
        "overview": f"{LIST}overview/",
    }


def measure(client: Any, url: str, runs: int) -> dict[str, Any]:
    figures, response = inprocess.measure(client, url, runs)
    cl = response.context["cl"] if response.context and "cl" in response.context else None
    return {
        **figures,
        "shown_count": str(cl.result_count) if cl is not None else None,
        "rows": len(cl.result_list) if cl is not None else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    setup_django(bench_database_url())

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    from tasks_app.models import Task

    setup_test_environment()  # the Client's host, and response.context
    client = Client()
    client.force_login(get_user_model().objects.get(username="bench"))
    results = {}
    for name, url in pages().items():
        results[name] = measure(client, url, args.runs)
        r = results[name]
        print(
            f"{name:40s} median {r['median_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms  "
            f"{r['queries']:2d} queries ({r['query_ms']:.1f} ms)  shows {r['shown_count']}",
            flush=True,
        )
    out = inprocess.write_results(
        "admin_bench",
        {
            "database": settings.DATABASES["default"]["NAME"],
            "tasks": Task.objects.count(),
            "runs": args.runs,
            "pages": results,
        },
    )
    print("\n| page | median ms | p95 ms | queries |\n|---|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['median_ms']} | {r['p95_ms']} | {r['queries']} |")
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
