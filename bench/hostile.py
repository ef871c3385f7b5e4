#!/usr/bin/env python3
"""The hostile-input run: tens of thousands of malformed, mistyped and mutated requests.

Runs tests/test_hostile.py in its long profile: for each of the 11 A2A 1.0 methods over
JSON-RPC and a 12th case that breaks the envelope, the body and the headers, and for each of
the 12 HTTP+JSON routes and a 13th case that breaks HTTP methods, paths and queries,
`--examples` requests (default 1,700: about 42,000 in all) against two daphne processes and a
Celery worker on the test database, keeping going past a broken answer. It prints and saves
the counts per (HTTP status, JSON-RPC code or ErrorInfo reason) to
bench/results/hostile-<UTC stamp>.md; the run fails if any answer was a 5xx, an internal error,
not JSON-RPC or not a google.rpc.Status, carried the wrong id, or if a task stored before it
could not be read after it. `--in-process` adds the same run through Django's handler.

Needs what `make test` needs (Postgres, Redis, the project's .venv). From the repo root:

    python3 bench/hostile.py                    # ~42,000 requests across daphne
    python3 bench/hostile.py --examples 200     # a quicker look
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1700, help="requests per case (25 cases)")
    parser.add_argument("--in-process", action="store_true", help="also run through Django's handler")
    args = parser.parse_args()

    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    report = REPO / "bench" / "results" / f"hostile-{stamp}.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    python = REPO / ".venv" / "bin" / "python"
    if not python.exists():
        print("no .venv: run `make venv` (or `make test`) first", file=sys.stderr)
        return 2
    env = {
        **os.environ,
        "HOSTILE_PROFILE": "long",
        "HOSTILE_EXAMPLES": str(args.examples),
        "HOSTILE_REPORT": str(report),
    }
    selection = [] if args.in_process else ["-k", "across_daphne"]
    # scripts/test.sh finds Postgres and Redis (or starts them) as `make test` does.
    command = ["bash", "scripts/test.sh", "tests/test_hostile.py", *selection, "-q"]
    code = subprocess.call(command, cwd=REPO, env=env)
    if report.exists():
        print(report.read_text())
        print(f"saved to {report.relative_to(REPO)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
