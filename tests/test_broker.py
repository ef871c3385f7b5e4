"""The Celery transport: Redis, one client per channel, no ack emulation."""

import redis
from django.conf import settings
from kombu import Connection

from agentserver import broker
from agentserver.celery import app


def test_the_celery_app_uses_the_transport_that_shares_a_client_per_channel():
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        assert isinstance(channel, broker.Channel)
        first = channel._create_client()
        assert channel._create_client() is first
        channel._pool = None  # what kombu does after losing its connection
        assert channel._create_client() is not first
        assert channel._create_client().connection_pool is channel.pool


def test_a_consumed_message_leaves_no_unacked_copy_in_redis():
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete("unacked", "unacked_index", "agentserver-test-broker")
    with Connection(
        settings.CELERY_BROKER_URL,
        transport=settings.CELERY_BROKER_TRANSPORT,
        transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
    ) as connection:
        queue = connection.SimpleQueue("agentserver-test-broker")
        queue.put({"run": 1})
        message = queue.get(timeout=2)
        assert message.payload == {"run": 1}
        # Postgres is the ledger and the sweepers resend lost work: Redis keeps no copy.
        assert client.hlen("unacked") == 0 and client.zcard("unacked_index") == 0
        message.ack()
        queue.close()
    client.delete("agentserver-test-broker")


def test_a_job_is_published_to_the_queue_list_the_workers_pop_without_declaring_it(monkeypatch):
    # A run goes to the list without Celery's producer (tests/test_dispatch.py); the other jobs
    # go through it.
    import uuid

    from tasks_app import dispatch

    put, declared = [], []
    original_put = broker.Channel._put
    monkeypatch.setattr(
        broker.Channel,
        "_put",
        lambda self, queue, message, **kw: (put.append((queue, message)), original_put(self, queue, message, **kw))[1],
    )
    monkeypatch.setattr(broker.Channel, "queue_declare", lambda self, *a, **kw: declared.append(a))
    eager, app.conf.task_always_eager = app.conf.task_always_eager, False
    try:
        task_id = uuid.uuid4()
        dispatch.enqueue_forward_cancel(task_id=task_id)
    finally:
        app.conf.task_always_eager = eager
    [(queue, message)] = put
    assert queue == app.conf.task_default_queue and declared == []
    assert message["headers"]["task"] == dispatch.FORWARD_CANCEL
    assert message["headers"]["argsrepr"] == repr((str(task_id),))
