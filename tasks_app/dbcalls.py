"""Running ORM code from async views without a thread per waiting request.

Django runs each ASGI request in its own `ThreadSensitiveContext`, and the first
`sync_to_async` call of a request gives it a private thread that lives until the request
ends, even while the request only awaits a hint. A thousand blocking SendMessage calls
would be a thousand idle threads. Instead, ORM work from the protocol views runs on one
bounded executor shared by all requests (`DB_THREADS`), and each call hands its connection
back to the pool when it returns, so an idle waiter holds neither a thread nor a connection.

The hop is not asgiref's `sync_to_async`: the functions run here are ORM code that never
calls back into the event loop, so they need none of its context machinery, which costs more
CPU than the query it wraps on the hot path. Nor is it `run_in_executor`: a
`concurrent.futures.Future` (a Condition and its lock) chained to an asyncio future cost
twice what a queue and one `call_soon_threadsafe` do (~200 against ~120 us of CPU per hop,
two hops per blocking SendMessage). Context variables are carried over all the same.

`DB_THREADS=0` keeps Django's own per-request behaviour; the in-process tests use it, so
their ORM calls run on the test's thread and see its transaction.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

T = TypeVar("T")

# (loop, future, context, fn, args, kwargs): one call for the DB threads.
_Job = tuple[asyncio.AbstractEventLoop, asyncio.Future, contextvars.Context, Callable[..., Any], tuple, dict]
_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_threads: list[threading.Thread] = []
_start_lock = threading.Lock()


def _call_and_release(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        # Django keeps connections per context, so this runs in the call's context. With the
        # psycopg pool, close() returns the connection to the pool (cheap).
        connections.close_all()


def _settle(future: asyncio.Future, ok: bool, value: Any) -> None:
    if future.done():  # the awaiting request went away (cancelled) meanwhile
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _serve() -> None:
    while True:
        loop, future, context, fn, args, kwargs = _jobs.get()
        try:
            ok, value = True, context.run(_call_and_release, fn, args, kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            ok, value = False, exc
        try:
            loop.call_soon_threadsafe(_settle, future, ok, value)
        except RuntimeError:  # the loop closed while we worked: nobody is waiting
            pass
        # Drop the references now, not when the next job replaces them.
        del loop, future, context, fn, args, kwargs, value


def _ensure_threads() -> None:
    if len(_threads) >= settings.DB_THREADS:
        return
    with _start_lock:
        while len(_threads) < settings.DB_THREADS:
            thread = threading.Thread(target=_serve, name=f"orm-{len(_threads)}", daemon=True)
            thread.start()
            _threads.append(thread)


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Await `fn(*args, **kwargs)` run synchronously with the ORM."""
    if settings.DB_THREADS <= 0:
        return await sync_to_async(functools.partial(fn, *args, **kwargs))()
    _ensure_threads()
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    _jobs.put((loop, future, contextvars.copy_context(), fn, args, kwargs))
    return await future
