"""Sending a run: straight to the queue's Redis list, in the very form Celery would send it."""

import base64
import json
import uuid

import orjson
import pytest
import redis
from celery import signals
from django.conf import settings

from agentserver import broker
from agentserver.celery import app
from tasks_app import dispatch


@pytest.fixture
def publishing(monkeypatch):
    """Celery publishes (not eager), as in production; what reaches the broker's `_put` is kept."""
    put = []
    original = broker.Channel._put
    monkeypatch.setattr(
        broker.Channel,
        "_put",
        lambda self, queue, message, **kw: (put.append(message), original(self, queue, message, **kw))[1],
    )
    eager, app.conf.task_always_eager = app.conf.task_always_eager, False
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(app.conf.task_default_queue)
    yield put
    client.delete(app.conf.task_default_queue)
    app.conf.task_always_eager = eager


def _shape(value):
    """A message with every per-message value (ids, arguments) replaced by its kind."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return value


def _without_ids(message: dict) -> dict:
    message = json.loads(json.dumps(message))
    for part, keys in (
        ("headers", ("id", "root_id", "argsrepr", "origin")),
        ("properties", ("correlation_id", "argsrepr", "delivery_tag", "reply_to")),
    ):
        for key in keys:
            message[part][key] = "<varies>"
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


def test_a_run_message_is_the_message_celery_itself_publishes(publishing):
    task_id, token = str(uuid.uuid4()), str(uuid.uuid4())
    app.tasks[dispatch.RUN_AGENT].apply_async(
        (task_id, token),
        soft_time_limit=settings.AGENT_SOFT_TIME_LIMIT,
        time_limit=settings.AGENT_TIME_LIMIT,
        argsrepr=repr((task_id, token)),
        kwargsrepr="{}",
        **dispatch._publish_options(),
    )
    [celerys] = publishing
    ours = orjson.loads(dispatch.run_message(task_id, token))
    assert _without_ids(ours) == _without_ids(celerys)
    assert ours["headers"]["id"] == ours["headers"]["root_id"] == ours["properties"]["correlation_id"]
    assert uuid.UUID(ours["headers"]["id"]) and uuid.UUID(ours["properties"]["delivery_tag"])
    assert ours["headers"]["argsrepr"] == celerys["headers"]["argsrepr"]


def test_a_run_goes_straight_to_the_queue_list_the_workers_pop(publishing, monkeypatch):
    # What is sent is kept here, not read back from the list: a live stack's worker of this
    # session may pop it first (tests/test_live.py runs every run this way, end to end).
    from tasks_app import redis_lines

    sent = []
    original = redis_lines.command
    monkeypatch.setattr(redis_lines, "command", lambda line, *args: sent.append((args, original(line, *args))))
    task_id, token = uuid.uuid4(), uuid.uuid4()
    dispatch.enqueue_run(task_id=task_id, run_token=token)
    assert publishing == []  # not through Celery's producer
    [((command, queue, raw), length)] = sent
    assert (command, queue) == ("LPUSH", app.conf.task_default_queue) and length >= 1
    message = orjson.loads(raw)
    args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
    assert args == [str(task_id), str(token)] and kwargs == {}
    assert message["headers"]["task"] == dispatch.RUN_AGENT


def test_a_run_goes_through_celery_when_something_listens_to_its_publish_signals(publishing):
    # Tracing's Celery instrumentation does: it puts its context in the message's headers.
    seen = []

    def listener(**kwargs):
        seen.append(kwargs["headers"]["id"])

    signals.before_task_publish.connect(listener, weak=False)
    try:
        dispatch.enqueue_run(task_id=uuid.uuid4(), run_token=uuid.uuid4())
    finally:
        signals.before_task_publish.disconnect(listener)
    assert len(publishing) == 1 and seen == [publishing[0]["headers"]["id"]]


@pytest.fixture
def waiter():
    """An async executor, registered for the test."""
    from tasks_app.executors import REGISTRY, Executor

    class Waiter(Executor):
        name = "test-waiter"

        async def execute(self, ctx):  # pragma: no cover - only routed here, never run
            await ctx.complete()

    REGISTRY[Waiter.name] = Waiter
    yield Waiter.name
    REGISTRY.pop(Waiter.name)


@pytest.fixture
def runs_queue(settings, publishing):
    settings.ASYNC_RUNS_QUEUE = "agentserver-test-runs"
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    yield settings.ASYNC_RUNS_QUEUE
    client.delete(settings.ASYNC_RUNS_QUEUE)


def sent_by(monkeypatch) -> list:
    from tasks_app import redis_lines

    sent: list = []
    original = redis_lines.command
    monkeypatch.setattr(redis_lines, "command", lambda line, *args: sent.append(args) or original(line, *args))
    return sent


def test_an_async_executors_run_goes_to_the_run_hosts_queue_as_celery_would_send_it(
    runs_queue, waiter, publishing, monkeypatch
):
    sent = sent_by(monkeypatch)
    task_id, token = str(uuid.uuid4()), str(uuid.uuid4())
    dispatch.enqueue_run(task_id=task_id, run_token=token, executor=waiter)
    [(command, queue, raw)] = sent
    assert (command, queue) == ("LPUSH", runs_queue)
    ours = orjson.loads(raw)
    assert ours["headers"]["task"] == dispatch.RUN_AGENT_ASYNC
    assert ours["headers"]["timelimit"] == [None, None]  # the run host keeps the limit itself
    app.tasks[dispatch.RUN_AGENT_ASYNC].apply_async(
        (task_id, token), queue=runs_queue, argsrepr=repr((task_id, token)), kwargsrepr="{}"
    )
    [celerys] = publishing
    assert _without_ids(ours) == _without_ids(celerys)


def test_a_sync_executors_run_still_goes_to_the_prefork_workers(runs_queue, monkeypatch):
    sent = sent_by(monkeypatch)
    dispatch.enqueue_run(task_id=uuid.uuid4(), run_token=uuid.uuid4(), executor="writer")
    [(_, queue, raw)] = sent
    assert queue == app.conf.task_default_queue and orjson.loads(raw)["headers"]["task"] == dispatch.RUN_AGENT


def test_without_a_run_hosts_queue_an_async_executors_run_goes_to_the_prefork_workers(waiter, publishing, monkeypatch):
    sent = sent_by(monkeypatch)
    dispatch.enqueue_run(task_id=uuid.uuid4(), run_token=uuid.uuid4(), executor=waiter)
    [(_, queue, raw)] = sent
    assert queue == app.conf.task_default_queue and orjson.loads(raw)["headers"]["task"] == dispatch.RUN_AGENT


def test_a_run_sent_again_without_its_executor_finds_its_queue(runs_queue, waiter, tenant, monkeypatch):
    from accounts.selectors import Principal
    from tasks_app import services
    from tasks_app.domain import NewMessage
    from tests.conftest import make_agent

    agent = make_agent(tenant, "waiter", waiter)
    message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "x"}])
    task, _ = services.message_receive(agent=agent, principal=Principal("alice", api_key_id=1), message=message)
    sent = sent_by(monkeypatch)
    dispatch.enqueue_run(task_id=task.pk, run_token=task.run_token)  # as the sweeper sends it
    [(_, queue, _raw)] = sent
    assert queue == runs_queue
