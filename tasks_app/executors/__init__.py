"""Built-in executors register themselves on import."""

from . import conformance, echo, writer  # noqa: F401,E402  (registration side effect)
from .base import REGISTRY, AgentContext, Executor, register


def executor_for(name: str) -> Executor | None:
    cls = REGISTRY.get(name)
    return cls() if cls else None


def choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(REGISTRY)]


__all__ = ["AgentContext", "Executor", "REGISTRY", "register", "executor_for", "choices"]
