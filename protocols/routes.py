"""Every path of the agent API, once. Django's URLconf (`agentserver/urls.py`) includes them
all; the ASGI router (`agentserver/asgi.py`) hands a request on a path with a consumer to that
consumer (a consumer can stream), and any other agent path to Django without the site
middleware. A new binding is one more line here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from django.urls import URLPattern, path, register_converter

from . import views
from .bindings import HTTP_JSON, JSONRPC
from .consumers import AgentConsumer
from .dialects.aip.binding import BINDING as AIP

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]

PREFIX = "/agents/"


class _Below:
    """Whatever follows the agent's path: Django's own `path` converter stops at a newline, and
    a segment a client percent-encodes may hold one (the route refuses it in its own form)."""

    regex = r"(?s:.+)"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(_Below, "below")

_agent_rpc = AgentConsumer.as_asgi(binding=JSONRPC)
_agent_rest = AgentConsumer.as_asgi(binding=HTTP_JSON)
_agent_aip = AgentConsumer.as_asgi(binding=AIP)


@dataclass(frozen=True)
class Route:
    pattern: URLPattern
    consumer: ASGIApp | None = None  # under daphne; Django's view serves the test client


ROUTES = [
    Route(
        path("agents/<slug:tenant>/<slug:agent>/.well-known/agent-card.json", views.agent_card_view, name="agent-card")
    ),
    # The keys of the card's signatures, next to it (the signatures' jku).
    Route(
        path(
            "agents/<slug:tenant>/<slug:agent>/.well-known/agent-card-jwks.json",
            views.card_jwks_view,
            name="agent-card-jwks",
        )
    ),
    # A2A 0.1's card, where its clients look for it.
    Route(
        path(
            "agents/<slug:tenant>/<slug:agent>/.well-known/agent.json", views.agent_card_v01_view, name="agent-card-v01"
        )
    ),
    # Any segment reaches the endpoint, which answers in JSON-RPC that nothing is there: a
    # client of the endpoint parses JSON-RPC.
    Route(path("agents/<str:tenant>/<str:agent>/", views.agent_rpc, name="agent-rpc"), _agent_rpc),
    # Clients often drop the trailing slash; a redirect would lose a POST body.
    Route(path("agents/<str:tenant>/<str:agent>", views.agent_rpc), _agent_rpc),
    # ACPs AIP: one path per method below aip/ (or any method at aip/ itself).
    Route(path("agents/<str:tenant>/<str:agent>/aip/<below:path>", views.agent_aip, name="agent-aip"), _agent_aip),
    Route(path("agents/<str:tenant>/<str:agent>/aip/", views.agent_aip, name="agent-aip-base"), _agent_aip),
    Route(path("agents/<str:tenant>/<str:agent>/aip", views.agent_aip), _agent_aip),
    # Every other path below the agent's is an HTTP+JSON route, or answers as one that nothing
    # is there: a client of those routes parses google.rpc.Status.
    Route(path("agents/<str:tenant>/<str:agent>/<below:path>", views.agent_rest, name="agent-rest"), _agent_rest),
]

urlpatterns = [route.pattern for route in ROUTES]


def consumer_for(request_path: str) -> tuple[ASGIApp, dict[str, Any]] | None:
    """The consumer that serves `request_path` and the path's arguments, if one does. The first
    route that matches decides, as in the URLconf: the card's path is also one below the agent's."""
    for route in ROUTES:
        match = route.pattern.pattern.match(request_path[1:])
        if match is not None:
            return None if route.consumer is None else (route.consumer, match[2])
    return None
