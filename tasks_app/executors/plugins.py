"""Executors come from entry points: each installed distribution may name its executors in the
group `agentserver.executors` (`echo = tasks_app.executors.echo:EchoExecutor`), so
`pip install acme-agents` adds agents without editing this project. Extensions the server
implements for its agents (extensions.py) come the same way, from the group
`agentserver.extensions`. The built-in ones are declared the same way (BUILT_IN) and loaded by
the same code.

A plugin that cannot be used (its import fails, it is not an Executor, it names no executor
or one another has) is set aside with the reason: logged when the process starts and listed
on the admin's overview page. It never stops the others from loading.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .base import REGISTRY, Executor
from .extensions import EXTENSIONS, ServerExtension

log = logging.getLogger(__name__)

GROUP = "agentserver.executors"
EXTENSION_GROUP = "agentserver.extensions"
BUILT_IN_SOURCE = "agentserver (built in)"
BUILT_IN = [
    EntryPoint("echo", "tasks_app.executors.echo:EchoExecutor", GROUP),
    EntryPoint("conformance", "tasks_app.executors.conformance:ConformanceExecutor", GROUP),
    EntryPoint("writer", "tasks_app.executors.writer:WriterExecutor", GROUP),
    EntryPoint("a2a-upstream", "tasks_app.executors.upstream:A2AUpstreamExecutor", GROUP),
    EntryPoint("webhook", "tasks_app.executors.webhook:WebhookExecutor", GROUP),
    EntryPoint("timestamp", "tasks_app.executors.timestamp:TimestampExtension", EXTENSION_GROUP),
]


@dataclass(frozen=True)
class Loaded:
    name: str
    source: str  # the distribution, e.g. "acme-agents 1.2.0"
    target: str  # module:attribute


@dataclass(frozen=True)
class Broken:
    name: str
    source: str
    target: str
    error: str


LOADED: list[Loaded] = []
BROKEN: list[Broken] = []
EXTENSIONS_LOADED: list[Loaded] = []
EXTENSIONS_BROKEN: list[Broken] = []


def _source(entry: EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    if dist is None:
        return BUILT_IN_SOURCE
    return f"{dist.metadata['Name']} {dist.version}"


def _check(entry: EntryPoint, found: object) -> tuple[str, type]:
    """The executor an entry point names, under its name."""
    if not (isinstance(found, type) and issubclass(found, Executor)):
        raise TypeError(f"{entry.value} is not a subclass of tasks_app.executors.Executor")
    name = getattr(found, "name", "")
    if not isinstance(name, str) or not name:
        raise TypeError(f"{entry.value} names no executor (set its `name`)")
    if name != entry.name:
        raise TypeError(f"the entry point is called {entry.name!r} but the executor's name is {name!r}")
    return name, found


def _check_extension(entry: EntryPoint, found: object) -> tuple[str, type]:
    """The server extension an entry point names, under its URI."""
    if not (isinstance(found, type) and issubclass(found, ServerExtension)):
        raise TypeError(f"{entry.value} is not a subclass of tasks_app.executors.extensions.ServerExtension")
    uri = getattr(found, "uri", "")
    if not isinstance(uri, str) or not uri:
        raise TypeError(f"{entry.value} names no extension URI (set its `uri`)")
    return uri, found


def load(
    entries: list[EntryPoint],
    *,
    check: Callable[[EntryPoint, object], tuple[str, type]] = _check,
    registry: dict[str, Any] = REGISTRY,
) -> tuple[list[Loaded], list[Broken]]:
    """Register each entry point's class (an executor, or with `_check_extension` and
    EXTENSIONS a server extension); the ones that cannot be, with why."""
    loaded: list[Loaded] = []
    broken: list[Broken] = []
    keys: dict[str, Loaded] = {}
    for entry in entries:
        source = _source(entry)
        try:
            key, found = check(entry, entry.load())
            taken = keys.get(key)
            if taken is not None and taken.target != entry.value:
                raise LookupError(f"the name {key!r} is taken by {taken.target} ({taken.source})")
        except Exception as exc:  # noqa: BLE001 - a plugin's fault of any kind is reported, not raised
            reason = f"{type(exc).__name__}: {exc}"
            broken.append(Broken(name=entry.name, source=source, target=entry.value, error=reason))
            what = "extension" if entry.group == EXTENSION_GROUP else "executor"
            log.error("%s plugin %r from %s not loaded: %s", what, entry.name, source, reason)
            continue
        registry[key] = found
        keys[key] = Loaded(name=entry.name, source=source, target=entry.value)
        loaded.append(keys[key])
    return loaded, broken


def from_distributions() -> frozenset[str]:
    """The executors installed distributions added: a tenant may use one only where the
    operator granted it. The built-in ones, and any registered from the project's own code
    (`register`), every tenant may use."""
    return frozenset(item.name for item in LOADED if item.source != BUILT_IN_SOURCE)


def installed(group: str = GROUP) -> list[EntryPoint]:
    return list(entry_points(group=group))


def load_all() -> None:
    """The built-in executors and extensions, then every installed distribution's (a
    process's start)."""
    loaded, broken = load([e for e in BUILT_IN if e.group == GROUP] + installed())
    LOADED[:] = loaded
    BROKEN[:] = broken
    loaded, broken = load(
        [e for e in BUILT_IN if e.group == EXTENSION_GROUP] + installed(EXTENSION_GROUP),
        check=_check_extension,
        registry=EXTENSIONS,
    )
    EXTENSIONS_LOADED[:] = loaded
    EXTENSIONS_BROKEN[:] = broken
