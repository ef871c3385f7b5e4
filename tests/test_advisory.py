"""protocols.advisory: the edge's pipelined Redis line, against the real Redis."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

import pytest
import redis

from protocols import advisory

URL = os.environ["TEST_LIMITER_REDIS_URL"]  # tests/test_limits.py's database, flushed around each test
DB = URL.rsplit("/", 1)[1]
LOG = logging.getLogger("tests.advisory")


@pytest.fixture(autouse=True)
def empty_database():
    store = redis.Redis.from_url(URL)
    store.flushdb()
    yield store
    store.flushdb()
    store.close()


def failing() -> advisory.FailOpen:
    return advisory.FailOpen(LOG, "test line", "going on without it")


def on_one_loop(body):
    async def run():
        line = advisory.AdvisoryRedis(URL, failing())
        try:
            return await body(line)
        finally:
            await line.aclose()

    return asyncio.run(run())


def test_concurrent_calls_share_one_connection_and_each_gets_its_own_reply(monkeypatch):
    # Not a test of the time limit (below): 300 calls' replies on a busy machine outlasted it,
    # and the line gave up on them as it should.
    monkeypatch.setattr(advisory, "TIMEOUT", 30)

    async def body(line):
        counts = await asyncio.gather(*(line.call("INCR", "counter") for _ in range(300)))
        ids = await asyncio.gather(*(line.call("CLIENT", "ID") for _ in range(20)))
        return counts, ids

    counts, ids = on_one_loop(body)
    assert sorted(counts) == list(range(1, 301))  # every call its own reply, none lost or doubled
    assert len(set(ids)) == 1


def test_the_database_of_the_url_is_the_one_written(empty_database):
    on_one_loop(lambda line: line.call("SET", "here", "yes"))
    assert empty_database.get("here") == b"yes"


def test_a_script_redis_has_not_seen_is_loaded_and_then_run_by_its_sha(empty_database):
    script = advisory.Script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    empty_database.script_flush()

    async def body(line):
        return [await line.script(script, ["n"], [5]), await line.script(script, ["n"], [2])]

    assert on_one_loop(body) == [5, 7]
    assert empty_database.script_exists(script.sha) == [True]


def test_an_error_reply_fails_open_and_backs_off(caplog):
    async def body(line):
        await line.call("SET", "text", "not a number")
        refused = await line.call("INCR", "text")
        tried_again = await line.call("SET", "other", "1")  # within the back-off: not sent
        return refused, tried_again

    with caplog.at_level(logging.WARNING, logger="tests.advisory"):
        assert on_one_loop(body) == (None, None)
    assert "test line: Redis unreachable (RedisFailed: ERR value is not an integer" in caplog.text
    assert redis.Redis.from_url(URL).get("other") is None


def test_a_redis_that_never_answers_costs_one_timeout_then_nothing_until_the_back_off_ends():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"

    async def body():
        line = advisory.AdvisoryRedis(url, failing())
        started = time.monotonic()
        first = await line.call("PING")
        first_took = time.monotonic() - started
        started = time.monotonic()
        second = await line.call("PING")
        return first, first_took, second, time.monotonic() - started

    try:
        first, first_took, second, second_took = asyncio.run(body())
    finally:
        silent.close()
    assert first is None and advisory.TIMEOUT <= first_took < advisory.TIMEOUT + 0.5
    assert second is None and second_took < 0.01


def test_a_connection_redis_closed_is_opened_anew_after_the_back_off(monkeypatch, empty_database):
    monkeypatch.setattr(advisory, "BACKOFF", 0.0)

    async def body(line):
        first_id = await line.call("CLIENT", "ID")
        empty_database.client_kill_filter(_id=first_id)
        for _ in range(50):  # the kill reaches the line as a closed connection, or the next call finds it
            if await line.call("PING") == b"PONG":
                break
            await asyncio.sleep(0.01)
        return first_id, await line.call("CLIENT", "ID")

    first_id, second_id = on_one_loop(body)
    assert second_id != first_id


def test_calls_waiting_on_a_connection_that_fails_all_answer_none_and_none_hangs():
    async def body(line):
        await line.call("PING")
        # A BLPOP on an empty list holds the connection past the timeout: every call behind it
        # on that connection fails with it.
        answers = await asyncio.gather(line.call("BLPOP", "nothing", "1"), *(line.call("PING") for _ in range(5)))
        return answers

    assert on_one_loop(body) == [None] * 6


def test_a_loop_that_ends_closes_its_connection(empty_database):
    def clients() -> int:
        return sum(1 for c in empty_database.client_list() if c["db"] == DB and c["cmd"] != "client|list")

    before = clients()
    line = advisory.AdvisoryRedis(URL, failing())

    async def one_request():
        assert await line.call("PING") == b"PONG"
        return clients()

    during = asyncio.run(one_request())
    assert during == before + 1
    assert clients() == before  # asyncio.run shut the loop down, and the connection with it
