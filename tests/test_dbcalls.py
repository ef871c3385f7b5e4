"""ORM calls from async code run on the shared DB threads and come back to the awaiting coroutine."""

import asyncio
import contextvars
import threading

import pytest
from django.db import connection, connections

from tasks_app import dbcalls

request_name: contextvars.ContextVar[str] = contextvars.ContextVar("request_name", default="")


@pytest.fixture
def db_threads(settings):
    settings.DB_THREADS = 2


def _query() -> tuple[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("select 41 + 1")
        return threading.current_thread().name, cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_call_runs_on_a_db_thread_and_returns_its_result(db_threads):
    thread, answer = asyncio.run(dbcalls.run(_query))
    assert thread.startswith("orm-")
    assert answer == 42


@pytest.mark.django_db(transaction=True)
def test_a_call_hands_its_connection_back_when_it_returns(db_threads):
    used = []

    def query_and_keep_the_wrapper():
        _query()
        used.append(connections["default"])  # the wrapper this call's context holds
        return used[-1].connection is not None

    assert asyncio.run(dbcalls.run(query_and_keep_the_wrapper)) is True
    assert used[0].connection is None


def test_an_exception_reaches_the_awaiting_coroutine_as_it_was_raised(db_threads):
    def broken():
        raise LookupError("no such thing")

    with pytest.raises(LookupError, match="no such thing"):
        asyncio.run(dbcalls.run(broken))


def test_context_variables_reach_the_call(db_threads):
    async def main():
        request_name.set("req-7")
        return await dbcalls.run(request_name.get)

    assert asyncio.run(main()) == "req-7"


def test_a_cancelled_waiter_does_not_break_the_threads(db_threads):
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(5)
        return "late"

    async def main():
        waiter = asyncio.ensure_future(dbcalls.run(slow))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        waiter.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return await asyncio.gather(*(dbcalls.run(lambda i=i: i * 2) for i in range(5)))

    assert asyncio.run(main()) == [0, 2, 4, 6, 8]
