"""What an agent may run, as accounts learns it from above: executors live in tasks_app, which
accounts never imports, so tasks_app hands this module a way to list them (`provide`, from its
`AppConfig.ready`). The admin's agent form and the commands check an agent's executor and its
settings here, each executor's settings against the JSON Schema it declares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

MAX_SHOWN = 60


@dataclass(frozen=True)
class Kind:
    name: str
    description: str = ""
    # The agent's settings must satisfy it; the default takes any object.
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})


_source: Callable[[], dict[str, Kind]] | None = None


def provide(source: Callable[[], dict[str, Kind]]) -> None:
    global _source
    _source = source


def kinds() -> dict[str, Kind]:
    return _source() if _source is not None else {}


def _where(path: Any) -> str:
    return "settings" + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in path)


def settings_problems(executor: str, settings: Any) -> list[str]:
    """What is wrong with running `executor` with `settings`, one line per problem ([]: nothing)."""
    known = kinds()
    kind = known.get(executor)
    if kind is None:
        return [f"no executor {executor!r}; this install has {', '.join(sorted(known)) or 'none'}"]
    validator = Draft202012Validator(kind.schema)
    problems = []
    for error in sorted(validator.iter_errors(settings), key=lambda e: list(map(str, e.absolute_path))):
        message = error.message if len(error.message) <= MAX_SHOWN * 2 else error.message[: MAX_SHOWN * 2] + "…"
        problems.append(f"{_where(error.absolute_path)}: {message}")
    return problems
