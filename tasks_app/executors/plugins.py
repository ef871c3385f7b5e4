"""Executors come from entry points: each installed distribution may name its executors in the
group `agentserver.executors` (`echo = tasks_app.executors.echo:EchoExecutor`), so
`pip install acme-agents` adds agents without editing this project. The built-in executors are
declared the same way (BUILT_IN) and loaded by the same code.

A plugin that cannot be used (its import fails, it is not an Executor, it names no executor
or one another has) is set aside with the reason: logged when the process starts and listed
on the admin's overview page. It never stops the others from loading.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from .base import REGISTRY, Executor

log = logging.getLogger(__name__)

GROUP = "agentserver.executors"
BUILT_IN_SOURCE = "agentserver (built in)"
BUILT_IN = [
    EntryPoint("echo", "tasks_app.executors.echo:EchoExecutor", GROUP),
    EntryPoint("conformance", "tasks_app.executors.conformance:ConformanceExecutor", GROUP),
    EntryPoint("writer", "tasks_app.executors.writer:WriterExecutor", GROUP),
    EntryPoint("a2a-upstream", "tasks_app.executors.upstream:A2AUpstreamExecutor", GROUP),
    EntryPoint("webhook", "tasks_app.executors.webhook:WebhookExecutor", GROUP),
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


def _source(entry: EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    if dist is None:
        return BUILT_IN_SOURCE
    return f"{dist.metadata['Name']} {dist.version}"


def _check(entry: EntryPoint, found: object) -> type[Executor]:
    if not (isinstance(found, type) and issubclass(found, Executor)):
        raise TypeError(f"{entry.value} is not a subclass of tasks_app.executors.Executor")
    name = getattr(found, "name", "")
    if not isinstance(name, str) or not name:
        raise TypeError(f"{entry.value} names no executor (set its `name`)")
    if name != entry.name:
        raise TypeError(f"the entry point is called {entry.name!r} but the executor's name is {name!r}")
    return found


def load(entries: list[EntryPoint]) -> tuple[list[Loaded], list[Broken]]:
    """Register each entry point's executor; the ones that cannot be, with why."""
    loaded: list[Loaded] = []
    broken: list[Broken] = []
    for entry in entries:
        source = _source(entry)
        try:
            executor = _check(entry, entry.load())
            taken = next((item for item in loaded if item.name == entry.name), None)
            if taken is not None and taken.target != entry.value:
                raise LookupError(f"the name {entry.name!r} is taken by {taken.target} ({taken.source})")
        except Exception as exc:  # noqa: BLE001 - a plugin's fault of any kind is reported, not raised
            reason = f"{type(exc).__name__}: {exc}"
            broken.append(Broken(name=entry.name, source=source, target=entry.value, error=reason))
            log.error("executor plugin %r from %s not loaded: %s", entry.name, source, reason)
            continue
        REGISTRY[entry.name] = executor
        loaded.append(Loaded(name=entry.name, source=source, target=entry.value))
    return loaded, broken


def installed() -> list[EntryPoint]:
    return list(entry_points(group=GROUP))


def load_all() -> None:
    """The built-in executors, then every installed distribution's (a process's start)."""
    loaded, broken = load([*BUILT_IN, *installed()])
    LOADED[:] = loaded
    BROKEN[:] = broken
