"""Celery's Redis transport, sending through one client per channel instead of one per command.

kombu's Redis channel builds a new `redis.Redis` for every command it sends outside its
consumer connection: every publish, every ack, every update of the unacked index. redis-py
rebuilds the table of ~165 response callbacks in `Redis.__init__` each time
(redis/redis-py#3624, open). Under a blocking SendMessage load that was a fifth of the
Celery main process' CPU and a twentieth of daphne's. A client over a connection pool holds
nothing of its own and is safe to share between threads, so one per pool does the same
work; the connections still come from, and go back to, kombu's pool.

Selected by `CELERY_BROKER_TRANSPORT` in the settings when the broker is Redis.
"""

from __future__ import annotations

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _shared_client = None

    def _create_client(self, asynchronous: bool = False):
        if asynchronous:  # kombu keeps that one itself (`Channel.client`)
            return super()._create_client(asynchronous=True)
        client = self._shared_client
        # The pool is rebuilt after a connection is lost; a client must follow it.
        if client is None or client.connection_pool is not self.pool:
            client = self._shared_client = super()._create_client()
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel
