"""The executors: the built-in ones and those installed distributions declare, all loaded
through the entry point group `agentserver.executors` (plugins.py)."""

from accounts import selectors

from .. import dispatch
from . import plugins
from .base import REGISTRY, AgentContext, AgentFailure, AsyncAgentContext, Executor, Misconfigured, is_async, register

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


def runs_async(name: str) -> bool:
    """Whether the executor `name` is async (its runs go to the run host); False if unknown."""
    cls = REGISTRY.get(name)
    return cls is not None and is_async(cls)


# The dispatcher routes runs by it; it cannot import the executors, which import it.
dispatch.executor_is_async = runs_async


def choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(REGISTRY)]


__all__ = [
    "AgentContext",
    "AsyncAgentContext",
    "AgentFailure",
    "is_async",
    "runs_async",
    "Executor",
    "Misconfigured",
    "REGISTRY",
    "register",
    "executor_for",
    "executor_withdrawn",
    "choices",
    "plugins",
]
