"""The group runner: one long-lived asyncio process (`manage.py aip_groups`) with a consumer
per active membership.

Each consumer reads its member's queue and, for each message (acked once handled, so a crash
redelivers it; handling twice is harmless: a second start is ignored by the state table):

- its own messages (the fanout echoes them) and other partners' Task updates are skipped;
- before a Leader's message is acted on, the credential that made the membership is checked
  as it is now (`credentials.lapse_reason`): if it would refuse the Leader, the membership
  ends and the member stops; the message counts against the Leader's rate limit;
- a Leader's `message` with a `command` is applied (`core.command`, never waiting for the
  agent, as the principal the credential made, anonymous rules and all) unless `mentions`
  names only others: a `start` of a new id is taken, any other command only for a task the
  member took in this group;
- each task taken is followed in its event log (the database is the truth, hints only wake
  the follower), and every status change and product goes to the exchange as an AIP Task
  with `senderId` and `groupId`, in the order the log has them (so what a command changes
  reaches the group that way; a `get`, which changes nothing, is answered with the Task);
- `group-mgmt-message`: `leave-group` (mentioning the member) -> its last status
  `{connected: false}`, then it stops, deletes its queue and is marked left; `get-status`
  (or `status`) -> `{connected: true, muted}`; `mute` / `unmute`;
- anything unreadable is logged and acked, never the end of the consumer.

A muted member still acts on commands, but publishes only answers to commands that mention
it and its status; its tasks' updates are not published while it is muted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import replace
from datetime import datetime
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractExchange, AbstractIncomingMessage, AbstractQueue, AbstractRobustConnection
from django.conf import settings

from protocols import throttle
from protocols.exchange import Call, task_get
from tasks_app import dbcalls, streams
from tasks_app import selectors as task_selectors
from tasks_app.domain import MessageView, TaskView
from tasks_app.errors import STORE_ERRORS, DomainError
from tasks_app.lifecycle import TERMINAL, EventKind
from tasks_app.selectors import LoggedEvent

from . import amqp, core, credentials, messages, selectors, services
from .models import GroupMembership

log = logging.getLogger(__name__)

# Faults of the moment: the message goes back to the queue and comes again.
TRANSIENT = (*STORE_ERRORS, aiormq.exceptions.AMQPError, ConnectionError, TimeoutError)
# How long a follower waits for news before it reads the task's log anyway.
FOLLOW_HEARTBEAT = 5.0
MGMT_STATUS = frozenset({"get-status", "status"})
# What the Leader says (its commands, its group management): each is checked against its
# credential and counted against its rate limit before anything of it is done.
FROM_LEADER = frozenset({"message", "group-mgmt-message"})
# The longest a message over the Leader's rate limit is held before it goes back to the queue.
THROTTLE_PAUSE = 1.0

AfterAck = Callable[[], Awaitable[None]] | None


class Throttled(Exception):
    """The Leader is over its rate limit: the message waits, then goes back to the queue."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"rate limited for {retry_after} s")
        self.retry_after = retry_after


class Gone(Exception):
    """The membership ended meanwhile (replaced by a new invitation, which has the same queue,
    or seen on the runner's look): the message is not this member's to handle."""


class Member:
    """The consumer of one active membership."""

    def __init__(self, membership: GroupMembership, token: str) -> None:
        self.pk = membership.pk
        self.aic = membership.member_aic
        self.leader = membership.leader_aic
        self.group_id = membership.group_id
        self.muted = membership.muted
        # As the credential made it: an anonymous Leader keeps the anonymous rules.
        self.call = Call(agent=membership.agent, principal=credentials.principal_of(membership))
        self.rate_identity = membership.rate_identity
        self.target = amqp.Target(
            address=membership.address,
            port=membership.port,
            vhost=membership.vhost,
            username=membership.username,
            password=token,
            exchange=membership.exchange,
            routing_key=membership.routing_key,
            queue=membership.queue,
            connection_name=membership.connection_name,
        )
        self.leaving = False  # told to leave: it deletes its queue itself, then is `left`
        self.left = False
        self._connection: AbstractRobustConnection | None = None
        self._exchange: AbstractExchange | None = None
        self._queue: AbstractQueue | None = None
        self._consumer_tag: str | None = None
        self._followers: dict[str, asyncio.Task[None]] = {}

    def __repr__(self) -> str:
        return f"Member({self.aic} in {self.group_id}, membership {self.pk})"

    # -- life ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._connection = await amqp.connect(self.target)
        try:
            channel = await self._connection.channel()
            # One message at a time, in the queue's order: a continue never overtakes its start.
            await channel.set_qos(prefetch_count=1)
            self._queue = await amqp.declare(channel, self.target)
            self._exchange = await channel.get_exchange(self.target.exchange, ensure=False)
            for taken in await dbcalls.run(selectors.group_tasks_open, self.pk):
                self._follow(str(taken.task_id), taken.pk, after=taken.published_seq)
            self._consumer_tag = await self._queue.consume(self._on_message, no_ack=False)
        except BaseException:
            await self.stop()
            raise
        log.info("%s: consuming %s", self, self.target.queue)

    async def stop(self) -> None:
        for follower in self._followers.values():
            follower.cancel()
        await asyncio.gather(*self._followers.values(), return_exceptions=True)
        self._followers.clear()
        if self._connection is not None:
            with suppress(Exception):
                await self._connection.close()
            self._connection = None

    # -- the queue ------------------------------------------------------------------------

    async def _on_message(self, incoming: AbstractIncomingMessage) -> None:
        after: AfterAck = None
        try:
            after = await self.handle(incoming.body)
        except Gone:
            # Not acked: the connection's close gives the message back to the queue, for the
            # membership that replaced this one; the queue is not this member's to delete.
            await self._quit()
            return
        except Throttled as exc:
            log.info("%s: the Leader is over its rate limit; the message waits (%s)", self, exc)
            await asyncio.sleep(min(exc.retry_after, THROTTLE_PAUSE))
            with suppress(Exception):
                await incoming.nack(requeue=True)
            return
        except TRANSIENT as exc:
            log.warning("%s: could not handle a message now (%s); it goes back to the queue", self, exc)
            await asyncio.sleep(0.5)  # no hot loop while the store or broker is away
            with suppress(Exception):
                await incoming.nack(requeue=True)
            return
        except Exception:  # noqa: BLE001 - one bad message must not end the consumer
            log.exception("%s: a message could not be handled; dropped", self)
        try:
            await incoming.ack()
        except Exception as exc:  # noqa: BLE001 - the connection dropped: it comes again, handled again
            log.warning("%s: could not ack (%s)", self, exc)
        if after is not None:
            await after()

    async def handle(self, body: bytes) -> AfterAck:
        message = messages.decode(body)
        if message is None:
            log.warning("%s: a message that is not a JSON object was dropped (%d bytes)", self, len(body))
            return None
        sender = message.get("senderId")
        if sender == self.aic:
            return None  # our own, echoed by the fanout
        kind = message.get("type")
        if kind in FROM_LEADER and (ended := await self._admit()) is not None:
            return ended
        if kind == "message":
            await self._command(message)
        elif kind == "group-mgmt-message":
            return await self._management(message)
        elif kind != "task":  # other partners' updates are theirs to the Leader
            log.info("%s: a message of type %r was ignored", self, kind)
        return None

    async def _admit(self) -> AfterAck:
        """None when the Leader's credential, as it is now, still lets the member act and the
        Leader is within its rate limit (Throttled when not); otherwise the membership is
        ended and what is returned stops the member once the message is acked, unapplied."""
        found, lapsed = await dbcalls.run(selectors.membership_check, self.pk)
        if found is None:
            raise Gone
        if lapsed is not None:
            log.info("%s: ended: %s", self, lapsed)
            await dbcalls.run(services.membership_leave, membership_pk=self.pk, reason=f"ended: {lapsed}")
            self.leaving = True
            return self._leave
        # The same budget as the Leader's HTTP requests (protocols.throttle), counted per message.
        refused = await throttle.check(tenant=found.agent.tenant, identity=self.rate_identity)
        if refused is not None:
            raise Throttled(refused.retry_after)
        return None

    async def _command(self, message: dict[str, Any]) -> None:
        command = message.get("command")
        if not isinstance(command, str) or not command:
            return
        # senderId only sorts what the group says; it authorizes nothing (anyone who may
        # publish on the exchange can write it): what a command may reach is the membership's.
        if message.get("senderId") != self.leader:
            log.info("%s: %r from %r ignored: only the Leader commands", self, command, message.get("senderId"))
            return
        mentioned = messages.addressed(message, self.aic)
        if mentioned is False:
            return
        task_id = message.get("taskId")
        key = await self._key(task_id) if isinstance(task_id, str) else None
        held = None if key is None else await dbcalls.run(selectors.group_task_find, self.pk, key)
        if held is None and (command != "start" or key is not None):
            # Only a task taken in this group, whatever `mentions` says: a start of an id the
            # caller already used elsewhere would publish that task into this group.
            log.info("%s: %s of task %r ignored: not a task taken in this group", self, command, task_id)
            return
        try:
            task = await core.command(self.call, message)
        except TRANSIENT:
            raise
        except DomainError as exc:
            log.info("%s: %s of task %r refused: %s", self, command, task_id, exc.message)
            return
        if command == "start":
            key = await self._key(str(task.get("id", task_id)))
            held = (
                None
                if key is None
                else await dbcalls.run(services.group_task_take, membership_pk=self.pk, task_key=key)
            )
        # What a command changes reaches the group through the task's log, in order, from the
        # follower; a `get` changes nothing, so its answer is the update. A muted member
        # answers only what mentions it.
        if command == "get" or (self.muted and mentioned):
            await self.publish(messages.task_update(task, aic=self.aic, group_id=self.group_id))
        if held is not None and not held.done:
            self._follow(str(held.task_id), held.pk, after=held.published_seq)

    async def _management(self, message: dict[str, Any]) -> AfterAck:
        if message.get("senderId") != self.leader:
            return None
        command = message.get("groupMgmtCommand")
        mentioned = messages.addressed(message, self.aic)
        if command == "leave-group" and mentioned:
            await self.publish(self._status(connected=False))
            await dbcalls.run(services.membership_leave, membership_pk=self.pk, reason="the Leader asked it to leave")
            self.leaving = True
            return self._leave
        if command in MGMT_STATUS and mentioned is not False:
            await self.publish(self._status(connected=True))
        elif command in ("mute", "unmute") and mentioned:
            self.muted = command == "mute"
            await dbcalls.run(services.membership_mute, membership_pk=self.pk, muted=self.muted)
            await self.publish(self._status(connected=True))
        return None

    async def _quit(self) -> None:
        self.left = True
        await self.stop()

    async def end(self) -> None:
        """Stop now and delete the queue: the membership was ended outside the queue."""
        if not self.leaving:
            self.leaving = True
            await self._leave()

    async def _leave(self) -> None:
        """After the leave-group message is acked: stop consuming, delete the queue, close."""
        queue = self._queue
        if queue is not None:
            with suppress(Exception):
                if self._consumer_tag is not None:
                    await queue.cancel(self._consumer_tag)
                await queue.delete(if_unused=False, if_empty=False)
        self.left = True
        log.info("%s: left the group", self)
        await self.stop()

    def _status(self, *, connected: bool) -> dict[str, Any]:
        return messages.member_status(aic=self.aic, group_id=self.group_id, connected=connected, muted=self.muted)

    async def publish(self, message: dict[str, Any]) -> None:
        if self._exchange is None:
            raise ConnectionError("not connected to the group's broker")
        await self._exchange.publish(
            aio_pika.Message(
                messages.encode(message),
                content_type="application/json",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key=self.target.routing_key,
        )

    # -- tasks ------------------------------------------------------------------------------

    async def _key(self, task_id: str) -> str | None:
        found = await dbcalls.run(
            task_selectors.task_key_for_caller, agent=self.call.agent, principal=self.call.principal, task_id=task_id
        )
        return None if found is None else str(found[0])

    def _follow(self, key: str, taken_pk: int, *, after: int) -> None:
        running = self._followers.get(key)
        if running is not None and not running.done():
            return
        self._followers[key] = asyncio.create_task(self._follow_task(key, taken_pk, after=after))

    async def _follow_task(self, key: str, taken_pk: int, *, after: int) -> None:
        """Publish the task on each status change and product after `after`, until it is over.
        A publish that fails is tried again (the event is not marked sent until it went out)."""
        status: dict[str, Any] | None = None  # the last status event seen: a product's state
        while True:
            try:
                async with streams.follow(key) as feed:
                    async for event in streams.tail(feed, after=after, heartbeat=FOLLOW_HEARTBEAT):
                        if event is None:
                            continue
                        if event.kind == EventKind.STATUS:
                            status = event.payload
                        over = await self._publish_event(key, event, status)
                        await dbcalls.run(
                            services.group_task_published, group_task_pk=taken_pk, seq=event.seq, done=over
                        )
                        after = event.seq
                        if over:
                            return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the store or the broker of the moment: follow on
                log.warning("%s: following task %s: %s; trying again", self, key, exc)
                await asyncio.sleep(1.0)

    async def _publish_event(self, key: str, event: LoggedEvent, status: dict[str, Any] | None) -> bool:
        """Publish the task as of `event`: in the state of the last status event (the task may
        have moved on since it was written), with its products; whether the task is over."""
        if event.kind not in (EventKind.STATUS, EventKind.ARTIFACT):
            return False
        view = await task_get(self.call, key, history_length=0)
        if status is not None:
            view = _at_status(view, status)
        over = event.kind == EventKind.STATUS and view.state in TERMINAL
        if not self.muted:
            await self.publish(messages.task_update(core.encode_task(view), aic=self.aic, group_id=self.group_id))
        return over


def _at_status(view: TaskView, payload: dict[str, Any]) -> TaskView:
    """The task with the status a status event recorded (the task may have moved on since)."""
    message = payload.get("message")
    return replace(
        view,
        state=payload["state"],
        status_message=MessageView.from_payload(message) if message else None,
        status_timestamp=datetime.fromisoformat(payload["timestamp"]),
    )


class Runner:
    """Keeps one Member per active membership: starts new ones within a poll interval, stops
    those no longer active, and retries those whose broker cannot be reached."""

    def __init__(self) -> None:
        self.members: dict[int, Member] = {}
        self._retry_at: dict[int, float] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                await self.sync()
                with suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), settings.AIP_GROUPS_POLL)
        finally:
            await asyncio.gather(*(member.stop() for member in self.members.values()), return_exceptions=True)
            self.members.clear()

    async def sync(self) -> None:
        try:
            looked = await dbcalls.run(selectors.memberships_active)
        except STORE_ERRORS as exc:
            log.warning("group runner: the store is unavailable (%s)", exc)
            return
        active = {m.pk: m for m, lapsed in looked if lapsed is None}
        for membership, lapsed in looked:
            if lapsed is not None:
                await self._end(membership.pk, lapsed)
        for pk, member in list(self.members.items()):
            if member.leaving and not member.left:
                continue  # it deletes its queue before it goes
            if pk not in active or member.left:
                await self.members.pop(pk).stop()
        now = time.monotonic()
        starting = [m for pk, m in active.items() if pk not in self.members and self._retry_at.get(pk, 0) <= now]
        await asyncio.gather(*(self._start(m) for m in starting))

    async def _end(self, pk: int, lapsed: str) -> None:
        """A membership whose Leader's credential lapsed, seen on a look (a bearer token's exp
        passes in a quiet group too): ended, and its member stops and deletes its queue."""
        try:
            await dbcalls.run(services.membership_leave, membership_pk=pk, reason=f"ended: {lapsed}")
        except STORE_ERRORS as exc:
            log.warning("group runner: membership %s could not be ended now (%s)", pk, exc)
            return
        log.info("group runner: membership %s ended: %s", pk, lapsed)
        member = self.members.pop(pk, None)
        if member is not None:
            await member.end()

    async def _start(self, membership: GroupMembership) -> None:
        try:
            token = await dbcalls.run(selectors.access_token, membership)
            member = Member(membership, token)
            await member.start()
        except Exception as exc:  # noqa: BLE001 - a broker away now: try again later
            log.warning("group runner: membership %s could not start (%s)", membership.pk, exc)
            self._retry_at[membership.pk] = time.monotonic() + settings.AIP_GROUP_RECONNECT_INTERVAL
            return
        self._retry_at.pop(membership.pk, None)
        self.members[membership.pk] = member
