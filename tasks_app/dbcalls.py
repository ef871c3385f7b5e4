"""Running ORM code from async views without a thread per waiting request.

Django runs each ASGI request in its own `ThreadSensitiveContext`, and the first
`sync_to_async` call of a request gives it a private thread that lives until the request
ends, even while the request only awaits a hint. A thousand blocking SendMessage calls
would be a thousand idle threads. Instead, ORM work from the protocol views runs on one
bounded executor shared by all requests (`DB_THREADS`), so an idle waiter holds neither a
thread nor a connection.

Each DB thread keeps one connection from call to call: a checkout from the pool and its
return cost ~50 us of CPU per call (measured), one to three calls per request. It hands the
connection back after `DB_THREAD_IDLE` seconds without a call, and at once when a caller
outside the DB threads (a background thread, an admin page) waits for one of the pool, so
that the threads never starve the rest of the process. Before each call the connection is polled for an
end the server announced (a restart, `pg_terminate_backend`), as a checkout from the pool
would be (agentserver.postgres), and after a call that failed it is kept only if it still
answers.

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
from django.db import DEFAULT_DB_ALIAS, connections

T = TypeVar("T")

# (loop, future, context, fn, args, kwargs): one call for the DB threads.
_Job = tuple[asyncio.AbstractEventLoop, asyncio.Future, contextvars.Context, Callable[..., Any], tuple, dict]
_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_threads: list[threading.Thread] = []
_thread = threading.local()
_wrappers: dict[str, Any] = {}  # thread name -> its wrapper, for the operators' and tests' eyes
_start_lock = threading.Lock()


def _held() -> Any:
    """This DB thread's own connection wrapper, kept from call to call (see the module)."""
    wrapper = getattr(_thread, "wrapper", None)
    if wrapper is None:
        wrapper = _thread.wrapper = _wrappers[threading.current_thread().name] = connections.create_connection(
            DEFAULT_DB_ALIAS
        )
    elif wrapper.connection is not None:
        ended = getattr(wrapper, "ended_by_server", None)  # agentserver.postgres's: a poll, no query
        if ended is not None and ended():
            wrapper.close()
    return wrapper


def _call_and_release(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    # Django keeps connections per context (this is the call's): this call uses the thread's.
    wrapper = _held()
    connections[DEFAULT_DB_ALIAS] = wrapper
    try:
        return fn(*args, **kwargs)
    finally:
        if wrapper.connection is not None and (wrapper.in_atomic_block or wrapper.errors_occurred):
            # A call that failed may have left it broken, or (a bug) inside a transaction.
            if wrapper.in_atomic_block or not wrapper.is_usable():
                wrapper.close()
            wrapper.errors_occurred = False
        for alias in connections:
            if alias != DEFAULT_DB_ALIAS:
                connections[alias].close()
        if _others_wait(wrapper):
            wrapper.close()


def _others_wait(wrapper: Any) -> bool:
    """Whether a caller outside the DB threads waits for a connection of the pool."""
    pool = getattr(wrapper, "pool", None)
    return bool(pool is not None and getattr(pool, "_waiting", None))  # psycopg_pool's queue of waiters


def _release_held() -> None:
    wrapper = getattr(_thread, "wrapper", None)
    if wrapper is not None:
        wrapper.close()  # back to the pool


def _settle(future: asyncio.Future, ok: bool, value: Any) -> None:
    if future.done():  # the awaiting request went away (cancelled) meanwhile
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _serve() -> None:
    while True:
        try:
            loop, future, context, fn, args, kwargs = _jobs.get(timeout=settings.DB_THREAD_IDLE)
        except queue.Empty:
            _release_held()
            continue
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
