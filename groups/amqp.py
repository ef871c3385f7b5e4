"""The AMQP side of a membership, with aio-pika: names, the login, joining (connect, find the
Leader's exchange, declare and bind the member's queue) and the connection the runner keeps.

Connections go to the address the SSRF guard checked, never to the name again (no second
lookup a rebinding DNS could answer differently).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractQueue, AbstractRobustConnection
from django.conf import settings

from .invitation import AMQP_NAME_BYTES, AMQP_NAME_LENGTH

_NOT_IN_NAMES = re.compile(r"[^a-zA-Z0-9\-_.:@#,/ ]")


@dataclass(frozen=True)
class Target:
    """Where and as whom a member connects, and what it binds."""

    address: str  # the checked IP
    port: int
    vhost: str
    username: str
    password: str  # the Leader's access token
    exchange: str
    routing_key: str
    queue: str
    connection_name: str

    def __repr__(self) -> str:  # never the token
        return f"Target({self.address}:{self.port}{self.vhost} queue={self.queue!r})"


@dataclass(frozen=True)
class Joined:
    node_name: str


class JoinFailed(Exception):
    """The broker could not be joined; the message is the reason the Leader is told."""


class TokenRefused(JoinFailed):
    """The broker refused the login: the access token is not one it takes."""


class ExchangeMissing(Exception):
    """The broker has no such exchange in the vhost: the Leader has not created it."""


def login(username: str, member_aic: str) -> str:
    """The user name sent with the access token: the Leader's `server.username` when it
    sends one, else the member's AIC. RabbitMQ's OAuth 2.0 backend reads the token from the
    password and ignores the name; a broker with plain users reads both (the tests' guest)."""
    return username or member_aic


def _short(text: str, limit: int) -> str:
    """`text` within `limit` UTF-8 bytes: as it is, or cut with a digest of the whole."""
    if len(text.encode()) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    cut = text.encode()[: limit - len(digest) - 1].decode(errors="ignore")
    return f"{cut}.{digest}"


def queue_name(*, leader_aic: str, group_id: str, member_aic: str, owner: str) -> str:
    """The member's queue: AIP v02's form `group_{leader}_{group}_{member}`, with a digest of
    the owner (two Leaders' principals may invite the same agent to groups of one id). What
    AMQP does not allow in a queue name becomes `_`, and then a digest of the whole keeps
    names apart that differed only there."""
    owner_digest = hashlib.sha256(owner.encode()).hexdigest()[:8]
    wanted = f"group_{leader_aic}_{group_id}_{member_aic}.{owner_digest}"
    name = _NOT_IN_NAMES.sub("_", wanted)
    if name != wanted:
        name = f"{name}.{hashlib.sha256(wanted.encode()).hexdigest()[:12]}"
    return _short(name, AMQP_NAME_LENGTH)


def connection_name(*, member_aic: str, group_id: str) -> str:
    return _short(f"agentserver {member_aic} in {group_id}", AMQP_NAME_BYTES)


def _params(target: Target) -> dict[str, Any]:
    return {
        "host": target.address,
        "port": target.port,
        "login": target.username,
        "password": target.password,
        "virtualhost": target.vhost,
        "timeout": settings.AIP_GROUP_CONNECT_TIMEOUT,
        # aiormq sends the URL query's `name` as the connection_name client property.
        "client_properties": {"name": target.connection_name},
    }


async def declare(channel: AbstractChannel, target: Target) -> AbstractQueue:
    """Find the Leader's exchange (passively: the Leader creates it) and declare and bind the
    member's queue: durable, so that what the group says while the runner is away waits."""
    try:
        exchange = await channel.get_exchange(target.exchange, ensure=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        raise ExchangeMissing(f"the broker has no exchange {target.exchange!r} in vhost {target.vhost!r}") from None
    queue = await channel.declare_queue(target.queue, durable=True, auto_delete=False)
    await queue.bind(exchange, routing_key=target.routing_key)
    return queue


def _node_name(connection: aio_pika.abc.AbstractConnection) -> str:
    """The broker's node as its server properties say (RabbitMQ: cluster_name, by default
    the node's name), or empty."""
    try:
        properties = connection.transport.connection.server_properties  # type: ignore[union-attr]
    except AttributeError:
        return ""
    value = properties.get("cluster_name") or properties.get("node") or ""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


async def join(target: Target) -> Joined:
    """Connect once, check the exchange, declare and bind the queue, and leave it to the
    runner. JoinFailed (unreachable, refused, timed out) or ExchangeMissing."""
    try:
        connection = await asyncio.wait_for(
            aio_pika.connect(**_params(target)), timeout=settings.AIP_GROUP_CONNECT_TIMEOUT + 1
        )
    except TimeoutError:
        raise JoinFailed(f"no answer within {settings.AIP_GROUP_CONNECT_TIMEOUT:g} s") from None
    except aiormq.exceptions.ProbableAuthenticationError:
        raise TokenRefused("the broker refused the login (the access token)") from None
    except (aiormq.exceptions.AMQPError, OSError, ConnectionError) as exc:
        raise JoinFailed(_reason(exc)) from None
    try:
        channel = await connection.channel()
        await declare(channel, target)
        return Joined(node_name=_node_name(connection))
    except aiormq.exceptions.AMQPError as exc:
        raise JoinFailed(_reason(exc)) from None
    finally:
        await connection.close()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text[:300]


async def connect(target: Target) -> AbstractRobustConnection:
    """The runner's connection: robust, so that it reconnects (and declares and consumes
    again) after the broker restarts or the network drops."""
    return await aio_pika.connect_robust(**_params(target), reconnect_interval=settings.AIP_GROUP_RECONNECT_INTERVAL)
