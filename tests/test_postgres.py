"""The database backend tells a session Postgres has ended from a healthy idle one."""

import time

import pytest

from agentserver.postgres.base import ended_by_server
from tests.conftest import end_sessions, own_session


@pytest.fixture
def session(db):
    with own_session() as conn:
        yield conn


def test_an_idle_healthy_session_is_not_ended(session):
    session.execute("SELECT 1")
    assert not ended_by_server(session)


def test_a_session_postgres_ended_is_seen_without_a_query(session):
    assert end_sessions("pid = %s", session.info.backend_pid) == 1
    time.sleep(0.2)  # the server's goodbye reaches the socket
    assert ended_by_server(session)


def test_a_closed_connection_is_ended(session):
    session.close()
    assert ended_by_server(session)


def test_a_session_on_a_descriptor_past_1023_is_judged_too(db):
    # select() refuses such descriptors; a web process with many streams holds them.
    import os
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip("the open-file limit is too low to reach descriptor 1024")
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with own_session() as conn:
            assert conn.fileno() > 1023
            assert not ended_by_server(conn)
            assert end_sessions("pid = %s", conn.info.backend_pid) == 1
            time.sleep(0.2)  # the server's goodbye reaches the socket
            assert ended_by_server(conn)
    finally:
        for fd in fillers:
            os.close(fd)
