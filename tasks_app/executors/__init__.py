"""The executors: the built-in ones and those installed distributions declare, all loaded
through the entry point group `agentserver.executors` (plugins.py)."""

from accounts import selectors

from . import plugins
from .base import REGISTRY, AgentContext, AgentFailure, Executor, Misconfigured, register

plugins.load_all()


def executor_for(name: str) -> Executor | None:
    cls = REGISTRY.get(name)
    return cls() if cls else None


def executor_withdrawn(*, agent: str, executor: str) -> str | None:
    """At a run of `agent` ("tenant/agent"): why its installed executor may no longer run for
    its tenant (the operator withdrew the grant), or None; built-in executors cost no query."""
    if executor not in plugins.from_distributions():  # the common case, on every run: no query, no kinds built
        return None
    return selectors.executor_withdrawn(tenant_slug=agent.split("/", 1)[0], executor=executor)


def choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(REGISTRY)]


__all__ = [
    "AgentContext",
    "AgentFailure",
    "Executor",
    "Misconfigured",
    "REGISTRY",
    "register",
    "executor_for",
    "executor_withdrawn",
    "choices",
    "plugins",
]
