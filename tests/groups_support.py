"""Group mode's test helpers: a Leader on the machine's RabbitMQ, and the broker's view of
its connections (rabbitmqctl)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import uuid
from typing import Any

import aio_pika
import orjson

BROKER = {"host": "127.0.0.1", "port": 5672, "login": "guest", "password": "guest", "virtualhost": "/"}
LEADER_AIC = "agent-leader-aic"


def keyed(agent: Any, name: str = "alice") -> Any:
    """A principal as an API key of `name` makes it (a membership is tied to the key)."""
    from accounts.selectors import Principal
    from accounts.services import api_key_create

    key, _ = api_key_create(tenant=agent.tenant, name=name, principal=name)
    return Principal(name=name, api_key_id=key.pk, expires_at=key.expires_at, identity=f"key:{key.pk}")


def invitation(exchange_name: str, *, group_id: str = "group123", partners: list[str] = (), **server: Any) -> dict:
    """The seed's example invitation (7.3 (1)), aimed at the machine's broker."""
    return {
        "protocol": "rabbitmq:4.0",
        "group": {
            "groupId": group_id,
            "leader": {"aic": LEADER_AIC, "skills": ["task-management", "group-management"]},
            "partners": [{"aic": aic, "skills": ["task-processing"]} for aic in partners],
        },
        "server": {"host": "127.0.0.1", "port": 5672, "vhost": "/", "accessToken": "guest", "username": "guest"}
        | server,
        "amqp": {"exchange": exchange_name, "exchangeType": "fanout", "routingKey": ""},
    }


class Leader:
    """A group's Leader: it creates the fanout exchange, says things to the group, and reads
    what the members say from a queue of its own bound to the exchange."""

    def __init__(self) -> None:
        # Names of this test's own: members' queues are durable and outlive a test.
        self.group_id = f"group-{uuid.uuid4().hex[:8]}"
        self.exchange_name = f"test-{self.group_id}"
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.member_queues: list[str] = []  # deleted at the end, if still there

    async def __aenter__(self) -> Leader:
        self.connection = await aio_pika.connect(**BROKER)
        self.channel = await self.connection.channel()
        self.exchange = await self.channel.declare_exchange(self.exchange_name, aio_pika.ExchangeType.FANOUT)
        self.queue = await self.channel.declare_queue(exclusive=True)
        await self.queue.bind(self.exchange)
        await self.queue.consume(self._received, no_ack=True)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.exchange.delete()
        for name in self.member_queues:  # as a Leader's forced clean-up does (seed 7.2)
            channel = await self.connection.channel()
            await channel.queue_delete(name)
        await self.connection.close()

    def joined(self, answer: dict[str, Any]) -> dict[str, Any]:
        """Note a member's answer to the invitation (its queue is cleaned up at the end)."""
        self.member_queues.append(answer["queueName"])
        return answer

    async def _received(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        body = orjson.loads(message.body)
        if body.get("senderId") != LEADER_AIC:
            self.inbox.put_nowait(body)

    def invitation(self, **kwargs: Any) -> dict:
        return invitation(self.exchange_name, group_id=self.group_id, **kwargs)

    async def say(self, message: dict[str, Any] | bytes) -> None:
        body = message if isinstance(message, bytes) else orjson.dumps(message)
        await self.exchange.publish(aio_pika.Message(body, content_type="application/json"), routing_key="")

    async def command(
        self, command: str, task_id: str, *, text: str = "", mentions: list[str] | None = None, msg_id: str = ""
    ) -> None:
        message: dict[str, Any] = {
            "type": "message",
            "id": msg_id or f"msg-{uuid.uuid4()}",
            "sentAt": "2025-09-01T11:59:45+08:00",
            "senderRole": "leader",
            "senderId": LEADER_AIC,
            "command": command,
            "dataItems": [{"type": "text", "text": text or command}],
            "taskId": task_id,
            "groupId": self.group_id,
            "sessionId": "session-91011",
        }
        if mentions is not None:
            message["mentions"] = mentions
        await self.say(message)

    async def manage(self, command: str, *, mentions: list[str] | None = None) -> None:
        message: dict[str, Any] = {
            "type": "group-mgmt-message",
            "id": f"mgmt-{uuid.uuid4()}",
            "sentAt": "2025-09-01T12:30:00+08:00",
            "senderRole": "leader",
            "senderId": LEADER_AIC,
            "groupMgmtCommand": command,
        }
        if mentions is not None:
            message["mentions"] = mentions
        await self.say(message)

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        return await asyncio.wait_for(self.inbox.get(), timeout)

    async def updates_until(self, task_id: str, states: set[str], timeout: float = 10.0) -> list[dict[str, Any]]:
        """The Task updates of `task_id` the group hears, up to the first in one of `states`."""
        seen: list[dict[str, Any]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            message = await self.next(max(0.01, deadline - loop.time()))
            if message.get("type") == "task" and message.get("id") == task_id:
                seen.append(message)
                if message["status"]["state"] in states:
                    return seen

    async def silence(self, seconds: float = 0.5) -> list[dict[str, Any]]:
        """What the group hears in `seconds` (nothing, when a member is to stay quiet)."""
        heard = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            try:
                heard.append(await asyncio.wait_for(self.inbox.get(), left))
            except TimeoutError:
                break
        return heard


def broker_connections(name_part: str) -> list[str]:
    """The broker's connections whose client properties name `name_part` (their pids, as
    rabbitmqctl writes and takes them)."""
    listed = subprocess.run(
        ["rabbitmqctl", "list_connections", "-q", "--no-table-headers", "pid", "client_properties"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    found = []
    for line in listed.splitlines():
        pid, _, properties = line.partition("\t")
        named = re.search(r'\{"connection_name","([^"]*)"\}', properties)
        if named and name_part in named.group(1):
            found.append(pid)
    return found


def close_broker_connections(name_part: str) -> int:
    """Have the broker close those connections, as it does when it shuts down or a node goes."""
    pids = broker_connections(name_part)
    for pid in pids:
        subprocess.run(
            ["rabbitmqctl", "close_connection", pid, "closed by a test"], capture_output=True, check=True, timeout=30
        )
    return len(pids)
