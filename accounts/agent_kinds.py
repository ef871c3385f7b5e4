"""What an agent may run, as accounts learns it from above: executors live in tasks_app, which
accounts never imports, so tasks_app hands this module a way to list them (`provide`, from its
`AppConfig.ready`). The one agent service (accounts.agent_services), which the admin's agent
form, the commands and the tenant API use, checks an agent's executor and its settings here, each
executor's settings against the JSON Schema it declares, and asks the executor's own checks."""

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
    # What else is wrong with settings the schema accepts (rules a static schema cannot say,
    # such as this server's own settings), one line each.
    problems: Callable[[Any], list[str]] | None = None
    # Built into the server: every tenant may use it. An installed one (a plugin) only where
    # the operator granted it (Tenant.allowed_executors).
    built_in: bool = False
    # An agent of this kind cannot run without a secret (a webhook signs with it): none, no save.
    secret_required: bool = False
    # Checked when an agent is saved, once its settings satisfy the schema and `problems`:
    # on_save(settings, secret) -> (problems, offered), where `offered` is card content the
    # executor offers (Agent field names: a fronted agent's upstream's name, description,
    # skills), taken where the saver gave none. It may take time (a fetch over the network).
    on_save: Callable[[dict[str, Any], str], tuple[list[str], dict[str, Any]]] | None = None


_source: Callable[[], dict[str, Kind]] | None = None


def provide(source: Callable[[], dict[str, Kind]]) -> None:
    global _source
    _source = source


def kinds() -> dict[str, Kind]:
    return _source() if _source is not None else {}


def _where(path: Any) -> str:
    return "settings" + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in path)


def on_save_problems(executor: str, settings: dict[str, Any], secret: str) -> tuple[list[str], dict[str, Any]]:
    """The executor's checks when an agent is saved (Kind.on_save), and the card content it
    offers; a check that breaks is a problem, not an error."""
    kind = kinds().get(executor)
    if kind is None or kind.on_save is None:
        return [], {}
    try:
        problems, offered = kind.on_save(settings, secret)
    except Exception as exc:  # noqa: BLE001 - a plugin's check that breaks must not break the save
        return [f"settings: the executor's check when saved failed ({type(exc).__name__}: {exc})"], {}
    return list(problems), dict(offered or {})


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
    if not problems and kind.problems is not None:
        try:
            problems = list(kind.problems(settings))
        except Exception as exc:  # noqa: BLE001 - a plugin's check that breaks must not break the form
            problems = [f"settings: the executor's own check failed ({type(exc).__name__}: {exc})"]
    return problems
