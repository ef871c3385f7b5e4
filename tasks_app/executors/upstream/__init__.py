"""Fronted A2A agents: the `a2a-upstream` executor, whose logic is a remote A2A agent (1.0 or
0.3) called with the official a2a-sdk client through the outbound guard (docs/executors.md)."""

from .executor import A2AUpstreamExecutor

__all__ = ["A2AUpstreamExecutor"]
