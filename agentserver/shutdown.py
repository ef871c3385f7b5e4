"""daphne stops gracefully on SIGTERM, what a deploy, `docker stop` and `make run` send.

daphne's own SIGTERM stops its reactor at once and cancels every request in flight: a blocking
SendMessage loses its answer after the task was stored, and a stream just breaks off. Instead
the process stops listening (the next connection goes to another process, or waits for this
one's successor), ends every open stream with a last comment saying to resubscribe
(`tasks_app.streams.close_all`), answers any new request on a connection still open with 503
and Retry-After, and gives the requests in flight up to SHUTDOWN_GRACE seconds to finish. Then
daphne stops as it would have: whatever is still running is cancelled. A second SIGTERM stops at
once. The agents' work is untouched either way: it runs in the workers. In the embedded mode
it runs on this process's threads (agentserver/background.py): no new one starts, and the
interpreter waits for those begun before it exits.

Under any other ASGI server (or in tests calling the application directly) `install` does
nothing, and `counted` only counts.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from twisted.internet import tcp

from tasks_app import streams

from . import background

log = logging.getLogger(__name__)

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]

_in_flight = 0
_draining_since: float | None = None


def in_flight() -> int:
    """Requests this process has begun to answer and not finished (streams included)."""
    return _in_flight


def counted(app: ASGIApp) -> ASGIApp:
    """`app`, counting the requests in flight, which the drain waits for."""

    async def counting(scope: dict, receive: Callable, send: Callable) -> None:
        global _in_flight
        _in_flight += 1
        try:
            await app(scope, receive, send)
        finally:
            _in_flight -= 1

    return counting


def install() -> None:
    """Under daphne, take SIGTERM over from Twisted once the reactor runs (Twisted installs its
    own handlers as it starts)."""
    reactor = sys.modules.get("twisted.internet.reactor")
    if reactor is None or "daphne.server" not in sys.modules:
        return
    reactor.callWhenRunning(_take_sigterm, reactor)


def _take_sigterm(reactor: Any) -> None:
    def on_sigterm(signum: int, frame: Any) -> None:
        reactor.callFromThread(drain, reactor)

    signal.signal(signal.SIGTERM, on_sigterm)


def drain(reactor: Any) -> None:
    """Begin the graceful stop (on the reactor's thread); the second call stops at once."""
    global _draining_since
    if _draining_since is not None:
        log.warning("second SIGTERM: stopping now, %d request(s) still in flight", _in_flight)
        reactor.stop()
        return
    _draining_since = time.monotonic()
    for reader in reactor.getReaders():
        if isinstance(reader, tcp.Port):  # unix sockets' Port is one too
            reader.stopListening()
    open_streams = streams.open_stream_count()
    streams.close_all()
    background.stop()  # the embedded mode's threads: runs begun finish, no new one starts
    log.info(
        "SIGTERM: no longer listening; %d request(s) in flight, %d stream(s) told to resubscribe; waiting up to %s s",
        _in_flight,
        open_streams,
        settings.SHUTDOWN_GRACE,
    )
    _stop_when_drained(reactor)


def _stop_when_drained(reactor: Any) -> None:
    waited = time.monotonic() - (_draining_since or 0.0)
    if _in_flight and waited < settings.SHUTDOWN_GRACE:
        reactor.callLater(0.05, _stop_when_drained, reactor)
        return
    if _in_flight:
        log.warning("stopping after %.1f s with %d request(s) still in flight", waited, _in_flight)
    else:
        log.info("drained in %.1f s; stopping", waited)
    reactor.stop()
