"""Every path of the agent API, once. Django's URLconf (`agentserver/urls.py`) includes them
all; the ASGI router (`agentserver/asgi.py`) hands a request on a path with a consumer to that
consumer (a consumer can stream), and any other agent path to Django without the site
middleware. A new binding (HTTP+JSON routes, AIP paths) is one more line here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from django.urls import URLPattern, path

from . import views
from .consumers import AgentRpcConsumer

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]

PREFIX = "/agents/"

_agent_rpc = AgentRpcConsumer.as_asgi()


@dataclass(frozen=True)
class Route:
    pattern: URLPattern
    consumer: ASGIApp | None = None  # under daphne; Django's view serves the test client


ROUTES = [
    Route(
        path("agents/<slug:tenant>/<slug:agent>/.well-known/agent-card.json", views.agent_card_view, name="agent-card")
    ),
    # Any segment reaches the endpoint, which answers in JSON-RPC that nothing is there: a
    # client of the endpoint parses JSON-RPC.
    Route(path("agents/<str:tenant>/<str:agent>/", views.agent_rpc, name="agent-rpc"), _agent_rpc),
    # Clients often drop the trailing slash; a redirect would lose a POST body.
    Route(path("agents/<str:tenant>/<str:agent>", views.agent_rpc), _agent_rpc),
]

urlpatterns = [route.pattern for route in ROUTES]
_streaming = [(route.pattern, route.consumer) for route in ROUTES if route.consumer is not None]


def consumer_for(request_path: str) -> tuple[ASGIApp, dict[str, Any]] | None:
    """The consumer that serves `request_path` and the path's arguments, if one does."""
    for pattern, consumer in _streaming:
        match = pattern.pattern.match(request_path[1:])
        if match is not None:
            return consumer, match[2]
    return None
