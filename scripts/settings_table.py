#!/usr/bin/env python3
"""The settings table of docs/configuration.md, kept true to agentserver/settings.py.

Every environment variable settings.py reads (`env.<type>("NAME", default=...)`) is one row:
its name, its default exactly as settings.py computes it, and what it does (written by hand in
the table, and kept). Rows for variables read elsewhere (`make run`'s, the worker's) stay as
they are while one of ELSEWHERE still names them.

    .venv/bin/python scripts/settings_table.py           # rewrite the table in place
    .venv/bin/python scripts/settings_table.py --check   # exit 1, saying what differs

tests/test_configuration.py runs the check: a setting added to settings.py without a row, a
row left for one that is gone, or a default changed in one place only fails the suite.
Only the standard library is used, and settings.py is read, never imported.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ROOT / "agentserver" / "settings.py"
DOC = ROOT / "docs" / "configuration.md"
# Where the variables the table lists besides settings.py's are read.
ELSEWHERE = ("scripts/run.sh", "scripts/lib.sh", "Makefile", "agentserver/celery.py", "ops/metrics.py")
HEADER = "| name | default | what |\n| --- | --- | --- |"
UNDOCUMENTED = "(not described yet: say what it does)"
ROW = re.compile(r"^\| `(?P<name>[A-Z][A-Z0-9_]*)` \| (?P<default>.*?) \| (?P<what>.*) \|$")


@dataclass(frozen=True)
class Row:
    name: str
    default: str
    what: str

    def __str__(self) -> str:
        return f"| `{self.name}` | {self.default} | {self.what} |"


def read_settings(source: str | None = None) -> dict[str, str]:
    """NAME -> its default as a table cell, for every `env.<type>("NAME", ...)` of settings.py,
    in the order settings.py reads them."""
    source = SETTINGS.read_text() if source is None else source
    found: list[tuple[int, int, str, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "env"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            continue
        default = next((k.value for k in node.keywords if k.arg == "default"), None)
        text = "(none)" if default is None else f"`{ast.get_source_segment(source, default)}`"
        found.append((node.lineno, node.col_offset, node.args[0].value, text.replace("|", "\\|")))
    return {name: default for _, _, name, default in sorted(found)}


def read_table(text: str) -> tuple[str, list[Row], str]:
    """The document before the table, its rows, and what follows it."""
    start = text.index(HEADER)
    lines = text[start + len(HEADER) + 1 :].split("\n")
    rows = []
    for count, line in enumerate(lines):
        match = ROW.match(line)
        if match is None:
            return text[:start], rows, "\n".join(lines[count:])
        rows.append(Row(match["name"], match["default"], match["what"]))
    return text[:start], rows, ""


def table(rows: list[Row], settings: dict[str, str]) -> list[Row]:
    """The rows as they must be: settings.py's in its order with their defaults, then the others
    still read elsewhere."""
    described = {row.name: row for row in rows}
    made = [
        Row(name, default, described[name].what if name in described else UNDOCUMENTED)
        for name, default in settings.items()
    ]
    elsewhere = "\n".join((ROOT / path).read_text() for path in ELSEWHERE)
    made += [row for row in rows if row.name not in settings and re.search(rf"\b{row.name}\b", elsewhere)]
    return made


def problems(text: str, settings: dict[str, str]) -> list[str]:
    _, rows, _ = read_table(text)
    wanted = table(rows, settings)
    said: list[str] = []
    have = {row.name: row for row in rows}
    for row in wanted:
        if row.name not in have:
            said.append(f"missing: {row}")
        elif have[row.name].default != row.default:
            said.append(f"{row.name}: the default is {row.default} in settings.py, {have[row.name].default} here")
        elif row.what == UNDOCUMENTED:
            said.append(f"{row.name}: {UNDOCUMENTED}")
    kept = {row.name for row in wanted}
    said += [f"{row.name} is read nowhere any more: drop its row" for row in rows if row.name not in kept]
    if not said and [r.name for r in rows] != [r.name for r in wanted]:
        said.append("the rows are not in settings.py's order (then the others)")
    return said


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    settings = read_settings()
    if "--check" in argv:
        said = problems(text, settings)
        for line in said:
            print(f"docs/configuration.md: {line}", file=sys.stderr)
        return 1 if said else 0
    before, rows, after = read_table(text)
    body = "\n".join(str(row) for row in table(rows, settings))
    DOC.write_text(f"{before}{HEADER}\n{body}\n{after}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
