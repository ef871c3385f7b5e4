"""Running ORM code from async views without a thread per waiting request.

Django runs each ASGI request in its own `ThreadSensitiveContext`, and the first
`sync_to_async` call of a request gives it a private thread that lives until the request
ends, even while the request only awaits a hint. A thousand blocking SendMessage calls
would be a thousand idle threads. Instead, ORM work from the protocol views runs on one
bounded executor shared by all requests (`DB_THREADS`), and each call hands its connection
back to the pool when it returns, so an idle waiter holds neither a thread nor a connection.

`DB_THREADS=0` keeps Django's own per-request behaviour; the in-process tests use it, so
their ORM calls run on the test's thread and see its transaction.
"""

from __future__ import annotations

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
    return await sync_to_async(_call_and_release, thread_sensitive=False, executor=_shared_executor())(
        fn, args, kwargs
    )
