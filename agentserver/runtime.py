"""Process-level settings of the long-running servers: daphne (`agentserver.asgi`) and the
Celery worker (`agentserver.celery`). The collector's tuning changes only what a request
costs; under daphne, request bodies reach the application as sent, forms included (the one
change of behaviour: an agent endpoint answers those in JSON-RPC). A worker gives up a
database connection the server has closed before it runs the next task on it.
`tests/test_runtime.py`.
"""

from __future__ import annotations

import functools
import gc
import inspect
import logging
import sys

from django.conf import settings
from django.db import connections

from agentserver.postgres.base import ended_by_server

log = logging.getLogger(__name__)


def tune_gc() -> None:
    """Move everything alive now (modules, settings, caches: what a server loads at start)
    out of the cyclic collector's reach, and collect the young generation less often.

    Under load a daphne process allocated enough containers for a young collection every ten
    or so requests, and every few seconds the full collection walked every object loaded at
    start again, 50 to 110 ms during which no request moved. Frozen objects are never walked
    again, and with the higher threshold young collections come about thirty times less
    often; daphne's CPU per request went down, not up (interleaved runs, README).
    """
    threshold = settings.GC_GEN0_THRESHOLD
    gc.freeze()
    if threshold > 0:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(threshold, gen1, gen2)


def leave_request_bodies_to_the_application() -> None:
    """Under daphne, Twisted decodes a POST body whose Content-Type names a form
    (urlencoded or multipart) into `request.args`, which daphne never reads: daphne hands the
    raw body to the application. Worse, a multipart body Twisted cannot parse is answered
    with an empty 400 before the application sees it, where an agent endpoint must answer in
    JSON-RPC; and deciding whether a body is a form parsed every request's Content-Type
    through the `email` package (~9 % of daphne's CPU per SendMessage). Twisted's own switch,
    `parsePOSTFormSubmission`, turns that off. Without daphne loaded (another ASGI server),
    or with a Twisted that lacks the switch, nothing changes.
    """
    protocol = sys.modules.get("daphne.http_protocol")
    web_request = getattr(protocol, "WebRequest", None)
    if web_request is None or getattr(web_request.__init__, "leaves_bodies_alone", False):
        return
    from twisted.web import http

    if "parsePOSTFormSubmission" not in inspect.signature(http.Request.__init__).parameters:
        return
    original = web_request.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("parsePOSTFormSubmission", False)
        original(self, *args, **kwargs)

    __init__.leaves_bodies_alone = True  # type: ignore[attr-defined]
    web_request.__init__ = __init__


def drop_dead_connections() -> int:
    """Close the database connections this thread keeps that cannot serve another query; the
    next query opens a fresh one. How many were closed.

    A Celery worker child keeps its connection from task to task (`CELERY_DB_REUSE_MAX`), so
    after a Postgres restart it would fail every run on the dead one until Celery recycled it,
    hundreds of tasks later. Dead means: a query on it failed and a probe fails too (Django's
    own rule), or Postgres has ended its session (`agentserver.postgres`: a poll of the socket,
    no round trip)."""
    closed = 0
    for connection in connections.all(initialized_only=True):
        if connection.vendor != "postgresql" or connection.connection is None or connection.in_atomic_block:
            continue
        if _unusable(connection):
            log.warning("dropping the %s database connection: the server closed it", connection.alias)
            connection.close()  # psycopg closes a dead connection quietly; the pool discards it
            closed += 1
    return closed


def _unusable(connection) -> bool:
    if connection.errors_occurred:
        return not connection.is_usable()
    return ended_by_server(connection.connection)
