"""Leases (tasks_app/leases.py): a periodic job runs in one process at a time. Exclusive across
Redis clients, processes and threads, released when the block ends, run out when a holder dies
without releasing, never ended by a holder whose time ran out; in-process without Redis; and
every beat job runs under its lease."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

import pytest
import redis
from django.conf import settings as django_settings
from prometheus_client import REGISTRY

from agentserver.celery import app as celery_app
from tasks_app import leases
from tasks_app.leases import KEY_PREFIX, SKIPPED, lease


@pytest.fixture
def raw() -> redis.Redis:
    """A Redis client of the test's own, apart from the one the leases use."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def name(raw) -> str:
    lease_name = f"test-{uuid.uuid4().hex[:12]}"
    yield lease_name
    raw.delete(KEY_PREFIX + lease_name)


@pytest.fixture(params=["redis", "in-process"])
def where(request, settings) -> str:
    """Each behaviour with Redis, and in-process as the embedded mode has it (no REDIS_URL)."""
    if request.param == "in-process":
        settings.REDIS_URL = ""
    return request.param


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_lease_held_through_one_redis_client_is_refused_through_another(name, raw, monkeypatch):
    with lease(name, seconds=10) as first:
        monkeypatch.setattr(leases, "_clients", {})  # as another process: its own client and connections
        with lease(name, seconds=10) as second:
            assert (first, second) == (True, False)
        assert raw.lock(KEY_PREFIX + name, blocking=False).acquire() is False  # a plain redis-py Lock too
        assert 0 < raw.pttl(KEY_PREFIX + name) <= 10_000  # it runs out by itself
    with raw.lock(KEY_PREFIX + name, timeout=10, blocking=False):
        with lease(name, seconds=10) as held_by_the_other:
            assert held_by_the_other is False


def test_of_threads_asking_at_the_same_moment_exactly_one_holds_the_lease(name, where):
    asking, holding = threading.Barrier(8), threading.Barrier(8)
    got: list[bool] = []

    def contend() -> None:
        asking.wait()
        with lease(name, seconds=10) as held:
            got.append(held)
            holding.wait(10)  # nobody lets go before everyone has asked

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert sorted(got) == [False] * 7 + [True]


def test_a_lease_is_released_when_its_block_ends_even_by_an_exception(name, where, raw):
    with lease(name, seconds=10) as held:
        assert held
    assert raw.exists(KEY_PREFIX + name) == 0
    with pytest.raises(RuntimeError), lease(name, seconds=10) as held:
        assert held
        raise RuntimeError("the sweep broke")
    with lease(name, seconds=10) as held_again:
        assert held_again


def test_a_lease_whose_holder_died_runs_out_after_its_timeout(name, raw):
    pid = os.fork()
    if pid == 0:  # the holder: takes the lease and dies holding it, as a SIGKILLed worker would
        try:
            with lease(name, seconds=1) as held:
                os._exit(0 if held else 1)
        finally:
            os._exit(2)
    assert os.waitpid(pid, 0)[1] == 0
    with lease(name, seconds=10) as held:
        assert held is False
    deadline = time.monotonic() + 5
    while raw.exists(KEY_PREFIX + name) and time.monotonic() < deadline:
        time.sleep(0.05)
    with lease(name, seconds=10) as held:
        assert held is True


def test_a_holder_whose_lease_ran_out_does_not_end_the_next_holders(name, raw, caplog):
    with lease(name, seconds=0.2) as held:
        assert held
        time.sleep(0.4)  # the sweep outlasts its lease ...
        assert raw.set(KEY_PREFIX + name, b"the-next-holder", nx=True, px=10_000)  # ... and another takes it
    assert raw.get(KEY_PREFIX + name) == b"the-next-holder"
    assert "ran out before its holder finished (raise SWEEP_LEASE_SECONDS)" in caplog.text


def test_without_redis_the_lease_is_a_lock_in_the_process_per_name(name, raw, settings):
    settings.REDIS_URL = ""
    with lease(name, seconds=10) as held, lease(f"{name}-other", seconds=10) as other:
        assert held and other  # one lock per name
        assert raw.exists(KEY_PREFIX + name) == 0  # nothing went to Redis
        with lease(name, seconds=10) as again:
            assert again is False


def test_when_redis_does_not_answer_the_job_runs_anyway_and_says_so(name, settings, caplog):
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    with caplog.at_level(logging.WARNING), lease(name, seconds=10) as first, lease(name, seconds=10) as second:
        assert first and second  # a sweep twice is safe; no sweep at all while Redis is down is not
    assert f"lease {name} not taken, Redis did not answer" in caplog.text


def test_a_lease_must_run_out_some_time(name):
    with pytest.raises(ValueError, match="positive timeout"), lease(name, seconds=0):
        pass


def skipped(sweep: str) -> float:
    return REGISTRY.get_sample_value("agentserver_sweeps_skipped_total", {"sweep": sweep}) or 0.0


@pytest.mark.parametrize("entry", sorted(django_settings.CELERY_BEAT_SCHEDULE))
def test_every_beat_job_skips_while_its_lease_is_held_elsewhere_and_counts_the_skip(
    entry, settings, db, django_assert_num_queries
):
    settings.SWEEP_LEASE_SECONDS = 5  # a run that broke off leaves no lease behind for long
    job = celery_app.tasks[settings.CELERY_BEAT_SCHEDULE[entry]["task"]]
    before = skipped(entry)
    with lease(entry, seconds=10) as held:
        assert held, f"the lease {entry} is held elsewhere: another test session is sweeping"
        with django_assert_num_queries(0):
            assert job() == SKIPPED
    assert skipped(entry) == before + 1
    assert job() != SKIPPED  # released: the next one runs
    assert skipped(entry) == before + 1
