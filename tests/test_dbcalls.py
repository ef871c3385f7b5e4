"""ORM calls from async code run on the shared DB threads and come back to the awaiting coroutine."""

import asyncio
import contextvars
import threading
import time

import pytest
from django.db import connection

from tasks_app import dbcalls

request_name: contextvars.ContextVar[str] = contextvars.ContextVar("request_name", default="")


@pytest.fixture
def db_threads(settings):
    settings.DB_THREADS = 2
    # Threads outlive the test: let them give their connections back soon after it.
    settings.DB_THREAD_IDLE = 0.2


@pytest.fixture
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("Postgres sessions")


def _query() -> tuple[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("select 41 + 1")
        return threading.current_thread().name, cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_call_runs_on_a_db_thread_and_returns_its_result(db_threads):
    thread, answer = asyncio.run(dbcalls.run(_query))
    assert thread.startswith("orm-")
    assert answer == 42


def _backend() -> tuple[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("select pg_backend_pid()")
        return threading.current_thread().name, cursor.fetchone()[0]


def _on_each_thread(times: int) -> dict[str, set[int]]:
    """The Postgres sessions each DB thread used over `times` calls."""

    async def calls():
        return await asyncio.gather(*(dbcalls.run(_backend) for _ in range(times)))

    seen: dict[str, set[int]] = {}
    for thread, pid in asyncio.run(calls()):
        seen.setdefault(thread, set()).add(pid)
    return seen


@pytest.mark.django_db(transaction=True)
def test_a_db_thread_keeps_its_connection_from_call_to_call(db_threads, postgres_only):
    # A checkout from the pool and its return per call cost ~50 us of CPU.
    assert all(len(pids) == 1 for pids in _on_each_thread(40).values())


@pytest.mark.django_db(transaction=True)
def test_a_db_thread_hands_its_connection_back_once_idle(db_threads, settings, postgres_only):

    settings.DB_THREAD_IDLE = 0.05
    used = _on_each_thread(10)
    deadline = time.monotonic() + 5
    while any(dbcalls._wrappers[name].connection is not None for name in used):
        assert time.monotonic() < deadline, "a DB thread kept its connection past DB_THREAD_IDLE"
        time.sleep(0.01)


@pytest.mark.django_db(transaction=True)
def test_a_session_postgres_ended_is_replaced_before_the_next_call(db_threads, settings, postgres_only):
    from tests.conftest import end_sessions

    settings.DB_THREADS = 1
    dbcalls._ensure_threads()
    before = _on_each_thread(1)
    ((pid,),) = before.values()
    assert end_sessions("pid = %s", pid) == 1
    time.sleep(0.2)  # the server's goodbye reaches the socket
    after = _on_each_thread(3)
    assert pid not in set().union(*after.values())


@pytest.mark.django_db(transaction=True)
def test_a_call_that_broke_its_transaction_leaves_a_usable_connection(db_threads):
    from django.db import DatabaseError, transaction

    def broken():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("select 1/0")

    with pytest.raises(DatabaseError):
        asyncio.run(dbcalls.run(broken))
    assert [asyncio.run(dbcalls.run(_query))[1] for _ in range(4)] == [42] * 4


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


@pytest.mark.django_db(transaction=True)
def test_a_db_thread_hands_its_connection_back_at_once_when_others_wait_for_the_pool(db_threads, monkeypatch):
    monkeypatch.setattr(dbcalls, "_others_wait", lambda wrapper: True)
    used = _on_each_thread(4)
    assert all(dbcalls._wrappers[name].connection is None for name in used)


def test_a_caller_waiting_on_psycopg_s_pool_is_seen(postgres_only):
    # dbcalls reads the pool's queue of waiters (psycopg_pool's own attribute): pinned here.
    from types import SimpleNamespace

    from psycopg_pool import ConnectionPool

    from tests.conftest import own_session

    with own_session() as probe:
        info = probe.info
        conninfo = f"host={info.host} port={info.port} user={info.user} dbname={info.dbname}"
    with ConnectionPool(conninfo, min_size=1, max_size=1, open=True) as pool:
        wrapper = SimpleNamespace(pool=pool)
        with pool.connection():
            assert not dbcalls._others_wait(wrapper)
            waiter = threading.Thread(target=lambda: pool.connection(timeout=5).__enter__())
            waiter.start()
            deadline = time.monotonic() + 5
            while not dbcalls._others_wait(wrapper):
                assert time.monotonic() < deadline
                time.sleep(0.01)
        waiter.join(5)
