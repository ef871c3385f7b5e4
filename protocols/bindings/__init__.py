"""The binding registry: how a request travels to an agent over HTTP. Each binding is one module
here that declares a `Binding` (`base.py`); the pipeline every binding shares is
`protocols.endpoint`, the paths each serves are in `protocols.routes`. The order is the card's:
the first is the interface clients should prefer."""

from __future__ import annotations

from .base import AgentRequest, Binding, Fault, Incoming, Reply, Streamed
from .http_json import BINDING as HTTP_JSON
from .jsonrpc import BINDING as JSONRPC

__all__ = ["BINDINGS", "HTTP_JSON", "JSONRPC", "AgentRequest", "Binding", "Fault", "Incoming", "Reply", "Streamed"]

BINDINGS: list[Binding] = [JSONRPC, HTTP_JSON]
