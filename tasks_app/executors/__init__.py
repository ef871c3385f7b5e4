"""The executors: the built-in ones and those installed distributions declare, all loaded
through the entry point group `agentserver.executors` (plugins.py)."""

from . import plugins
from .base import REGISTRY, AgentContext, AgentFailure, Executor, Misconfigured, register

plugins.load_all()


def executor_for(name: str) -> Executor | None:
    cls = REGISTRY.get(name)
    return cls() if cls else None


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
    "choices",
    "plugins",
]
