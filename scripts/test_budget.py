#!/usr/bin/env python3
"""The test run's time against its budget (scripts/test.sh runs it after pytest).

    test_budget.py JUNIT_XML WALL_SECONDS BUDGET_SECONDS

Prints the modules that took longest (the sum of their tests' setup, call and teardown, from
pytest's JUnit XML; with several workers these overlap, so they add up to more than the wall
time) and exits 1 when the wall time passed the budget. Only the standard library: it must run
whatever the venv holds.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

SHOWN = 10


def module_seconds(junit_xml: str) -> dict[str, float]:
    """Seconds per test module (`tests/test_x.py`), from the test cases' `classname`."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit_xml).iter("testcase"):
        # classname is the dotted module, then the class if any: tests.test_x[.TestY]
        parts = case.get("classname", "").split(".")
        module = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
        seconds["/".join(parts[: module + 1]) + ".py"] += float(case.get("time") or 0)
    return dict(seconds)


def main(argv: list[str]) -> int:
    junit_xml, wall, budget = argv[1], float(argv[2]), float(argv[3])
    try:
        seconds = module_seconds(junit_xml)
    except (OSError, ET.ParseError) as error:
        print(f"(no per-module times: {error})")
        seconds = {}
    slowest = sorted(seconds.items(), key=lambda item: -item[1])[:SHOWN]
    listing = "\n".join(f"  {secs:8.1f} s  {module}" for module, secs in slowest)
    over = budget > 0 and wall > budget
    verdict = f"over its budget of {budget:.0f} s" if over else f"within its budget of {budget:.0f} s"
    if budget <= 0:
        verdict = "no budget set"
    print(f"pytest took {wall:.0f} s of wall time, {verdict}. The slowest modules (their tests' own time):")
    print(listing or "  (none recorded)")
    if over:
        print(
            "The suite is over its time budget (TEST_TIME_BUDGET): make the slowest modules above faster"
            " (docs/testing.md says how), rather than raise the budget.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
