"""ASGI entry point for daphne: `daphne agentserver.asgi:application`.

An agent's endpoints (JSON-RPC at `/agents/<tenant>/<agent>/`, the HTTP+JSON routes below it)
are Channels consumers, which can answer with an SSE stream. Its other paths (the card) go
through a Django handler without the site middleware: they authenticate by API key and need no
sessions, CSRF, messages or user loading, and each of those middleware would cost a thread hop
per request on an async view.
Everything else (the admin) gets the full stack.
"""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentserver.settings")

from agentserver import tracing  # noqa: E402

# Before Django loads its middleware, which the Django instrumentation adds to; off unless
# TRACING_EXPORTER is set.
tracing.configure(service="agentserver-web")

# Django must be set up before anything imports models (Channels consumers will, later).
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.exception import convert_exception_to_response  # noqa: E402

from protocols import hosts, routes  # noqa: E402


class AgentAPIHandler(ASGIHandler):
    """Django's ASGI handler with an empty middleware chain and no per-request thread.

    Django opens a `ThreadSensitiveContext` per request, which gives every in-flight request
    a thread of its own until it ends, even while it only awaits. Agent views run their ORM
    work on a shared bounded executor (tasks_app.dbcalls); without the context, Django's own
    sync signal receivers (close_old_connections) share asgiref's single sync thread.
    """

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"agent endpoints serve HTTP only, not {scope['type']}")
        await self.handle(scope, receive, send)

    def create_request(self, scope, body_file):
        request, error = super().create_request(scope, body_file)
        if request is not None and hosts.ORIGIN_KEY in scope:  # came by a bound host name (protocols.hosts)
            request.META.update({key: scope[key] for key in (hosts.ORIGIN_KEY, hosts.ROOT_KEY, hosts.CARD_KEY)})
        return request, error

    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        get_response = self._get_response_async if is_async else self._get_response
        self._middleware_chain = convert_exception_to_response(get_response)


agent_api_application = AgentAPIHandler()


async def http_router(scope, receive, send):
    # On a host name bound to an agent every path is that agent's (protocols.hosts).
    bound = await hosts.resolve_scope(scope)
    if bound is not None:
        scope = bound
    path = scope["path"]
    if not path.startswith(routes.PREFIX):
        return await django_application(scope, receive, send)
    found = routes.consumer_for(path)
    if found is None:
        return await agent_api_application(scope, receive, send)
    consumer, kwargs = found
    await consumer({**scope, "url_route": {"args": (), "kwargs": kwargs}}, receive, send)


from agentserver import background, runtime, shutdown  # noqa: E402
from agentserver.celery import app as celery_app  # noqa: E402

application = ProtocolTypeRouter({"http": shutdown.counted(tracing.asgi(http_router))})

if settings.BACKGROUND_WORK == "threads":  # the embedded mode: this process is worker and beat too
    background.start_beat(celery_app)


# Last, once everything a request needs is imported: see agentserver/runtime.py.
runtime.leave_request_bodies_to_the_application()
runtime.tune_gc()
shutdown.install()
