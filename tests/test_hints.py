"""Wake-up hints shorten waits; the database stays the truth when hints are lost."""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async

from tasks_app import hints, services
from tasks_app.lifecycle import TaskState
from tasks_app.waiting import wait_until_settled
from tests.conftest import run_async
from tests.test_services import receive

pytestmark = pytest.mark.django_db(transaction=True)


run = run_async


@pytest.fixture
def waiting_task(echo_agent, monkeypatch):
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    return receive(echo_agent)


def _complete_later(task_id, delay):
    async def later():
        await asyncio.sleep(delay)
        await sync_to_async(services.task_transition)(task_id=task_id, state=TaskState.COMPLETED)

    return later()


def test_a_waiter_wakes_on_the_hint_well_before_the_fallback_poll(waiting_task, settings):
    settings.HINT_FALLBACK_POLL = 5

    async def scenario():
        started = time.monotonic()
        _, state = await asyncio.gather(
            _complete_later(waiting_task.pk, 0.2), wait_until_settled(waiting_task.pk, timeout=10)
        )
        return state, time.monotonic() - started

    state, elapsed = run(scenario())
    assert state == TaskState.COMPLETED and elapsed < 2


def test_a_lost_hint_costs_at_most_one_poll_interval(waiting_task, settings, monkeypatch):
    settings.HINT_FALLBACK_POLL = 0.5
    monkeypatch.setattr(hints, "publish", lambda task_id, state="", **_: None)  # every hint is lost

    async def scenario():
        started = time.monotonic()
        _, state = await asyncio.gather(
            _complete_later(waiting_task.pk, 0.1), wait_until_settled(waiting_task.pk, timeout=10)
        )
        return state, time.monotonic() - started

    state, elapsed = run(scenario())
    assert state == TaskState.COMPLETED and 0.1 < elapsed < 0.5 + 0.5


def test_hints_cross_processes_through_redis(waiting_task):
    """A hint published by another process (here: straight into Redis) wakes a local waiter."""
    import redis
    from django.conf import settings

    async def scenario():
        async with hints.watch(str(waiting_task.pk)) as watch:
            redis.Redis.from_url(settings.REDIS_URL).publish(hints.channel(str(waiting_task.pk)), b"1")
            return await watch.wait(3)

    assert run(scenario()) is True


def test_a_hint_of_another_deployment_on_the_same_redis_wakes_no_one_here(waiting_task, settings):
    """Pub/sub ignores Redis's databases: each deployment hears only its own prefix."""
    import redis

    async def scenario():
        async with hints.watch(str(waiting_task.pk)) as watch:
            other = f"{settings.REDIS_CHANNEL_PREFIX}other:task:{waiting_task.pk}"
            redis.Redis.from_url(settings.REDIS_URL).publish(other, b"completed|elsewhere")
            woken_by_other = await watch.wait(0.3)
            redis.Redis.from_url(settings.REDIS_URL).publish(hints.channel(str(waiting_task.pk)), b"completed|x")
            return woken_by_other, await watch.wait(3), watch.states

    assert run(scenario()) == (False, True, ["completed"])


def test_the_listener_subscribes_again_after_redis_dropped_its_connection(waiting_task, settings):
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)

    async def scenario():
        async with hints.watch(str(waiting_task.pk)) as watch:
            ours = [c["id"] for c in client.client_list() if c["name"] == hints.LISTENER_NAME]
            assert len(ours) == 1 and client.client_kill_filter(_id=ours[0]) == 1
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # until the new subscription hears the hint
                client.publish(hints.channel(str(waiting_task.pk)), b"working|x")
                if await watch.wait(0.05):
                    return True
            return False

    assert run(scenario()) is True


def test_a_wait_gives_up_at_its_timeout_with_the_current_state(waiting_task):
    assert run(wait_until_settled(waiting_task.pk, timeout=0.3)) == TaskState.SUBMITTED


def test_hints_that_cannot_settle_the_task_spare_the_database(waiting_task, monkeypatch, settings):
    """A hint naming a non-settling state (a chunk, "working") does not cost a read."""
    from tasks_app import selectors

    settings.HINT_FALLBACK_POLL = 30  # no poll on a slow machine: only the hints may cause reads

    reads = []
    real = selectors.task_state
    monkeypatch.setattr(selectors, "task_state", lambda task_id: reads.append(1) or real(task_id))

    async def scenario():
        waiter = asyncio.ensure_future(wait_until_settled(waiting_task.pk, timeout=5))
        await asyncio.sleep(0.3)
        for _ in range(20):
            hints.publish(str(waiting_task.pk), TaskState.WORKING)
            await asyncio.sleep(0.01)
        await sync_to_async(services.task_transition)(task_id=waiting_task.pk, state=TaskState.COMPLETED)
        return await waiter

    assert run(scenario()) == TaskState.COMPLETED
    assert 1 <= len(reads) <= 2, reads  # the first read, and at most one after "completed"; none per "working"


def test_a_hint_that_came_before_the_wait_still_tells_its_state():
    async def go():
        async with hints.watch("not-a-task") as watch:
            hints.publish("not-a-task", "working")  # while the waiter is busy elsewhere
            await asyncio.sleep(0.05)
            woken = await watch.wait(1.0)
            return woken, watch.states

    woken, states = run(go())
    assert woken and states and set(states) == {"working"}


def _waiting_with_one_hint(task_id, state, **kwargs):
    """A blocking wait that hears one hint announcing `state`; the task itself is untouched."""

    async def scenario():
        async with hints.watch(str(task_id)) as watch:
            waiter = asyncio.ensure_future(
                wait_until_settled(task_id, timeout=0.6, watch=watch, read_first=False, **kwargs)
            )
            await asyncio.sleep(0.05)
            hints.publish(str(task_id), state)
            return await waiter

    return run(scenario())


def test_a_hint_in_a_form_this_process_does_not_know_costs_a_read(waiting_task, monkeypatch, settings):
    """E.g. from a process of another release: it must not be taken for a state that cannot settle."""
    from tasks_app import selectors

    settings.HINT_FALLBACK_POLL = 5
    reads = []
    real = selectors.task_state
    monkeypatch.setattr(selectors, "task_state", lambda task_id: reads.append(time.monotonic()) or real(task_id))
    started = time.monotonic()
    _waiting_with_one_hint(waiting_task.pk, "1")
    # read on the hint, not only when the wait gave up at 0.6 s (the fallback poll is 5 s)
    assert reads and reads[0] - started < 0.4


def test_a_follow_up_does_not_take_a_settling_hint_of_the_run_before_it_for_its_answer(waiting_task):
    # The task is "submitted" again; a late "input-required" hint of the previous run arrives.
    assert _waiting_with_one_hint(waiting_task.pk, TaskState.INPUT_REQUIRED) == TaskState.INPUT_REQUIRED
    assert (
        _waiting_with_one_hint(waiting_task.pk, TaskState.INPUT_REQUIRED, trust_settling_hints=False)
        == TaskState.SUBMITTED
    )


def test_a_new_task_is_hinted_in_process_only_and_its_changes_through_redis(echo_agent, monkeypatch, settings):
    import redis

    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    pubsub = redis.Redis.from_url(settings.REDIS_URL).pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe(hints.channel("*"))
    try:
        pubsub.get_message(timeout=1)  # the subscription's confirmation
        task = receive(echo_agent)
        services.task_transition(task_id=task.pk, state=TaskState.WORKING)
        received = []
        while (message := pubsub.get_message(timeout=1)) is not None:
            received.append((message["channel"].decode(), message["data"].decode().partition("|")[0]))
    finally:
        pubsub.close()
    # Nobody elsewhere can know the new task's id yet; once it is out, its changes go to all.
    assert [r for r in received if r[0].endswith(str(task.pk))] == [(hints.channel(str(task.pk)), "working")]


@pytest.fixture
def subscriber(settings):
    import redis

    pubsub = redis.Redis.from_url(settings.REDIS_URL).pubsub(ignore_subscribe_messages=True)
    # Only these tests' tasks ("t-…"): other processes on the same Redis publish hints for theirs.
    pubsub.psubscribe(hints.channel("t-*"))
    pubsub.get_message(timeout=1)  # the subscription's confirmation
    yield pubsub
    pubsub.close()


def _hints_heard(pubsub) -> list[tuple[str, str]]:
    heard = []
    while (message := pubsub.get_message(timeout=0.5)) is not None:
        heard.append(
            (message["channel"].decode()[len(hints.channel("")) :], message["data"].decode().partition("|")[0])
        )
    return heard


def _line():
    from django.conf import settings

    from tasks_app import redis_lines

    return redis_lines.connection(settings.REDIS_URL)


def test_a_hint_goes_out_even_when_redis_dropped_the_publishing_connection(subscriber, settings):
    import redis

    hints.publish("t-1", "working")
    connection = _line()
    connection.send_command("CLIENT", "ID")
    redis.Redis.from_url(settings.REDIS_URL).client_kill_filter(_id=connection.read_response())
    hints.publish("t-1", "completed")
    assert _hints_heard(subscriber) == [("t-1", "working"), ("t-1", "completed")]


def test_a_forked_process_publishes_on_a_connection_of_its_own(subscriber, monkeypatch):
    import os

    parents = _line()
    monkeypatch.setattr(os, "getpid", lambda: -1)
    hints.publish("t-2", "working")
    assert _line() is not parents
    assert _hints_heard(subscriber) == [("t-2", "working")]


def test_a_publishing_thread_uses_its_own_connection():
    import threading

    theirs = []
    thread = threading.Thread(target=lambda: theirs.append(_line()))
    thread.start()
    thread.join()
    assert theirs[0] is not _line()
