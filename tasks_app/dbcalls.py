"""Running ORM code from async views without a thread per waiting request.

Django runs each ASGI request in its own `ThreadSensitiveContext`, and the first
`sync_to_async` call of a request gives it a private thread that lives until the request
ends, even while the request only awaits a hint. A thousand blocking SendMessage calls
would be a thousand idle threads. Instead, ORM work from the protocol views runs on one
bounded executor shared by all requests (`DB_THREADS`), and each call hands its connection
back to the pool when it returns, so an idle waiter holds neither a thread nor a connection.

The hop is a plain `run_in_executor`, not asgiref's `sync_to_async`: the functions run here
are ORM code that never calls back into the event loop, so they need none of its context
machinery, which costs more CPU than the query it wraps on the hot path. Context variables
are carried over all the same.

`DB_THREADS=0` keeps Django's own per-request behaviour; the in-process tests use it, so
their ORM calls run on the test's thread and see its transaction.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

T = TypeVar("T")

_executor: ThreadPoolExecutor | None = None


def _shared_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=settings.DB_THREADS, thread_name_prefix="orm")
    return _executor


def _call_and_release(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        # With the psycopg pool, close() returns the connection to the pool (cheap).
        connections.close_all()


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Await `fn(*args, **kwargs)` run synchronously with the ORM."""
    if settings.DB_THREADS <= 0:
        return await sync_to_async(functools.partial(fn, *args, **kwargs))()
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(
        _shared_executor(), context.run, _call_and_release, fn, args, kwargs
    )
