"""The exchange every dialect shares: store a client's message (creating or continuing its
task, with an inline push config), queue the agent, then answer at once, wait until the task
settles, or stream its events; and follow a task's log from a snapshot or a Last-Event-ID.

A dialect decodes its params into a `Send`, calls these, and encodes what comes back: the
values here are the store's (`TaskView`, `MessageView`, `LoggedEvent`), never a wire form.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Callable
from contextlib import AsyncExitStack, aclosing, nullcontext
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.db import transaction

from accounts import storable
from accounts.models import Agent
from accounts.selectors import Principal
from push import services as push_services
from push.domain import PushConfigInput
from tasks_app import dbcalls, hints, selectors, services, streams
from tasks_app.domain import MessageView, NewMessage, TaskLimits, TaskView, parse_task_id
from tasks_app.errors import (
    InvalidAgentResponse,
    InvalidParams,
    PushNotificationNotSupported,
    TaskNotFound,
    UnsupportedOperation,
)
from tasks_app.lifecycle import SETTLED, TERMINAL, EventKind, Failure, public_text
from tasks_app.parts import plain_text
from tasks_app.waiting import wait_until_settled

from . import contract, stream_slots


@dataclass(frozen=True)
class Call:
    agent: Agent
    principal: Principal
    base_url: str = ""
    vouched: bool = False  # base_url is the server's own (protocols.hosts.base_url_of): cards are signed
    agent_url: str = ""  # set when the request came by a bound host name's root (protocols.hosts)
    last_event_id: str | None = None  # the SSE Last-Event-ID header, for a resubscription
    extensions: tuple[str, ...] = ()  # the URIs the request activated (protocols.extensions)
    # Who is calling, as the rate limit counts it (auth.Caller.identity: a key, a bearer
    # subject, an anonymous address): its streams are capped (stream_slots). Empty: no cap.
    caller: str = ""


@dataclass(frozen=True)
class Send:
    """A client's message and what it asks of the exchange, decoded by its dialect."""

    message: NewMessage
    dialect: str
    accepted: list[str]
    history_length: int | None
    return_immediately: bool
    metadata: dict[str, Any]
    push: PushConfigInput | None  # an inline push config, checked by `push_config_check`
    # The id the client chose for its task (A2A 0.1): the caller's task of that id is
    # continued, or else a new task is made that keeps it (`services.message_receive`).
    client_task_id: str | None = None
    # Whether the dialect has bare-message answers; without, a reply is the completed task.
    bare_replies: bool = True
    # How long a blocking send waits for the task to settle (None: A2A_BLOCKING_TIMEOUT).
    timeout: float | None = None
    # The states that end a stream of this exchange (AIP's streams last until the task is over).
    until: frozenset[str] = SETTLED
    # A new task's stream opens with the task as the agent's first move left it, not as it was
    # received (AIP: a start is accepted or rejected, and the stream shows only the one).
    await_first_move: bool = False
    # What a new task asks (timeouts, the products' size).
    limits: TaskLimits | None = None
    # A push config registered ahead of the new task, to move onto it (AIP's notification/start).
    attach: Attach | None = None


@dataclass(frozen=True)
class Attach:
    """A config the client registered ahead of the task it starts now, and what it wants of it."""

    config_id: str
    states: list[str]
    after_seq: int  # the events up to this one are not delivered


@dataclass(frozen=True)
class Answer:
    """What a send answers: the task, or the bare reply the agent gave instead of one."""

    task: TaskView | None = None
    reply: MessageView | None = None


@dataclass(frozen=True)
class Event:
    """One event of a task's log, with the ids every dialect's event names."""

    task_id: str
    context_id: str
    kind: str
    payload: dict[str, Any]


# What a stream yields: (seq, the task's snapshot, a bare reply, or an event); None for a
# heartbeat interval without news.
Item = tuple[int, TaskView | MessageView | Event] | None


@dataclass
class EventStream:
    """A streaming answer, once every check has passed: the items to send, and what to
    release when the stream ends, however it ends (even if it never started)."""

    items: AsyncGenerator[Any, None]
    resources: AsyncExitStack

    def encoded(self, encode: Callable[[Any], Any]) -> EventStream:
        """The same stream with each item's value in a dialect's wire form."""

        async def items() -> AsyncGenerator[Any, None]:
            async with aclosing(self.items) as source:
                async for item in source:
                    yield None if item is None else (item[0], encode(item[1]))

        return EventStream(items(), self.resources)

    async def aclose(self) -> None:
        try:
            await self.items.aclose()
        finally:
            await self.resources.aclose()


def require_streaming(agent: Agent) -> None:
    if not agent.streaming:
        raise UnsupportedOperation("streaming is not enabled for this agent (its card says streaming: false)")


def require_push(agent: Agent) -> None:
    if not agent.push_notifications:
        raise PushNotificationNotSupported(
            "push notifications are not enabled for this agent (its card says pushNotifications: false)"
        )


async def push_config_check(config: PushConfigInput) -> None:
    await asyncio.to_thread(push_services.config_check, config=config)  # resolves DNS: off the DB threads


def _watch_id(message: NewMessage) -> str:
    """The id the task will have, known before it is written: a watch goes up under it first.
    Hints name tasks by their canonical UUID text, which a client may have written otherwise."""
    known = parse_task_id(message.task_id) if message.task_id else None
    return str(known or message.task_id or uuid.uuid4())


def _filed_under(uri: str, key: str) -> bool:
    """Whether a metadata key belongs to an extension: the extension's URI, or a key below it
    (`https://example.com/ext/konami-code/v1/code`), with or without the URI's scheme (the
    timestamp extension writes `github.com/…/timestamp/v1/timestamp`)."""
    bare = uri.split("://", 1)[-1]
    return any(key == root or key.startswith(root + "/") for root in (uri, bare))


def activation(call: Call, sent: Send) -> list[dict[str, Any]]:
    """What the request activated, as the message keeps it for the agent's run: each URI with
    the metadata entries of the request and of the message filed under it (the message's win)."""
    merged = {**sent.metadata, **sent.message.metadata}
    return [
        {"uri": uri, "metadata": {k: v for k, v in merged.items() if _filed_under(uri, k)}} for uri in call.extensions
    ]


def _resolved(call: Call, sent: Send) -> Send:
    """The send with the task it names by the client's id (or a non-UUID id) resolved to the
    task's key, so that a watch goes up under the key hints and streams use: one query, which
    only sends that name a task that way cost."""
    named = sent.client_task_id or sent.message.task_id
    if named is None:
        return sent
    found = selectors.task_key_for_caller(agent=call.agent, principal=call.principal, task_id=named)
    if found is None:
        return sent  # a new task under the client's id, or (a taskId) the follow-up's TaskNotFound
    return replace(sent, message=replace(sent.message, task_id=str(found[0])), client_task_id=None)


def _needs_lookup(sent: Send) -> bool:
    return bool(sent.client_task_id) or (
        sent.message.task_id is not None and parse_task_id(sent.message.task_id) is None
    )


def _receive(call: Call, sent: Send, task_id: str) -> tuple[Any, Any]:
    """Store the message (and an inline push config) and queue the agent."""
    message, push, attach = sent.message, sent.push, sent.attach
    # With an inline push config, the config and the message commit together; its cursor
    # starts before the message's first event, so the receiver hears of all of it.
    with transaction.atomic() if push or attach else nullcontext():
        if push and message.task_id:
            push_services.config_create(
                agent=call.agent, principal=call.principal, task_id=message.task_id, config=push
            )
        task, stored = services.message_receive(
            agent=call.agent,
            principal=call.principal,
            message=message,
            dialect=sent.dialect,
            accepted_output_modes=sent.accepted,
            metadata=sent.metadata,
            new_task_id=None if message.task_id else uuid.UUID(task_id),
            client_task_id=None if message.task_id else sent.client_task_id,
            # Whether a message to an existing task is taken, and how: the contract's.
            follow_up=contract.follow_up(sent.dialect),
            activated_extensions=activation(call, sent),
            limits=sent.limits,
        )
        if push and not message.task_id:
            push_services.config_create(
                agent=call.agent, principal=call.principal, task_id=str(task.pk), config=push, after_seq=0
            )
        if attach and not message.task_id:
            push_services.config_attach(
                agent=call.agent,
                principal=call.principal,
                task=task,
                config_id=attach.config_id,
                states=attach.states,
                after_seq=attach.after_seq,
            )
    return task, stored


def answer_for(task_id: Any, history_length: int | None, *, as_reply: bool, bare: bool = True) -> Answer:
    """The task as a send answers it, or (as_reply) the bare reply it stands for (unless the
    dialect has none: `bare`); an agent that broke its contract is the caller's
    InvalidAgentResponse."""
    found = selectors.task_with_view(task_id, history_length=history_length)
    if found is None:
        raise TaskNotFound(f"task {task_id!r} not found")
    task, view = found
    if as_reply and task.failure == Failure.INVALID_RESPONSE:
        # The words the task's status message gives its client, never the admin's reason (which
        # may quote the agent's endpoint and its answer).
        said = plain_text(view.status_message.parts) if view.status_message is not None else ""
        raise InvalidAgentResponse(f"task {task.pk} failed: {said or public_text(task.failure)}")
    if as_reply and bare and view.reply_only and view.status_message is not None:
        return Answer(reply=view.status_message)
    return Answer(task=view)


async def task_get(call: Call, task_id: str, *, history_length: int | None) -> TaskView:
    """The caller's task, by its key or the id its creator chose."""

    def read() -> TaskView:
        found = selectors.task_with_view(
            task_id, history_length=history_length, agent=call.agent, principal=call.principal
        )
        if found is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return found[1]

    return await dbcalls.run(read)


async def task_cancel(call: Call, task_id: str, *, acting: str, history_length: int | None = None) -> TaskView:
    """Cancel the caller's task for a client of the `acting` dialect (or say why it cannot be,
    as the contract does) and answer it as it is then."""

    def cancel() -> TaskView:
        task = services.task_cancel(
            agent=call.agent,
            principal=call.principal,
            task_id=task_id,
            admit=contract.admit(acting, contract.Op.CANCEL),
        )
        view = answer_for(task.pk, history_length, as_reply=False).task
        assert view is not None  # not as a reply: always the task
        return view

    return await dbcalls.run(cancel)


async def send(call: Call, sent: Send) -> Answer:
    """Store the message, queue the agent; answer at once (return_immediately) or once the
    task settles (or A2A_BLOCKING_TIMEOUT passes)."""
    history_length = sent.history_length
    if _needs_lookup(sent):
        sent = await dbcalls.run(_resolved, call, sent)
    # Whatever the worker does after the commit wakes us, so there is nothing to read until a hint comes.
    task_id = _watch_id(sent.message)

    def receive() -> tuple[Answer | None, str]:
        task, stored = _receive(call, sent, task_id)
        if not sent.return_immediately:
            return None, str(task.pk)
        if sent.message.task_id:  # a follow-up: the history is longer than what we just wrote
            return answer_for(task.pk, history_length, as_reply=False), str(task.pk)
        view = selectors.task_view(task, history_length=history_length, include_artifacts=False, known_history=[stored])
        return Answer(task=view), str(task.pk)

    timeout = settings.A2A_BLOCKING_TIMEOUT if sent.timeout is None else sent.timeout
    async with hints.watch(task_id) as watch:
        immediate, key = await dbcalls.run(receive)
        if immediate is not None:
            return immediate
        if key == task_id:
            await wait_until_settled(
                task_id,
                timeout=timeout,
                watch=watch,
                read_first=False,
                trust_settling_hints=not sent.message.task_id,
            )
    if key != task_id:
        # The UUID the client sent was the id another client chose for this task, not its
        # key: the watch was on the wrong key, so read first and watch the right one.
        await wait_until_settled(key, timeout=timeout, trust_settling_hints=False)
    return await dbcalls.run(answer_for, key, history_length, as_reply=True, bare=sent.bare_replies)


async def _events(
    feed: streams.Feed, task_id: str, context_id: str, *, after: int, until: frozenset[str]
) -> AsyncGenerator[Item, None]:
    """The log after `after`, up to a status event in one of `until`."""
    async for event in streams.tail(feed, after=after, heartbeat=settings.SSE_HEARTBEAT):
        if event is None:
            yield None
            continue
        yield event.seq, Event(task_id, context_id, event.kind, event.payload)
        if event.kind == EventKind.STATUS and event.payload.get("state") in until:
            return


async def send_streaming(call: Call, sent: Send) -> EventStream:
    """Store the message, queue the agent, and stream: the task (or only the agent's bare
    reply to a new exchange), then its events until the exchange waits on the client again."""
    require_streaming(call.agent)
    if _needs_lookup(sent):
        sent = await dbcalls.run(_resolved, call, sent)
    message, history_length = sent.message, sent.history_length
    task_id = _watch_id(message)
    resources = AsyncExitStack()
    # The slot first: a caller at its cap is refused before anything of the message is stored.
    slot = await resources.enter_async_context(stream_slots.hold(tenant=call.agent.tenant, caller=call.caller))
    try:
        feed = await resources.enter_async_context(streams.follow(task_id))
    except BaseException:
        await resources.aclose()
        raise

    def receive() -> tuple[int, TaskView]:
        task, stored = _receive(call, sent, task_id)
        if message.task_id:
            found = selectors.task_snapshot(
                agent=call.agent, principal=call.principal, task_id=str(task.pk), history_length=history_length
            )
            if found is None:  # it was the caller's a moment ago, in this transaction's snapshot
                raise TaskNotFound(f"task {task_id!r} not found")
            view, seq = found
            return seq, view
        # A new task: what we just wrote is all there is, at seq 1.
        return task.last_seq, selectors.task_view(
            task, history_length=history_length, include_artifacts=False, known_history=[stored]
        )

    try:
        seq, snapshot = await dbcalls.run(receive)
        if snapshot.key != task_id:
            # The UUID sent was another client's chosen id, not the key: follow the key (the
            # tail reads the log from the snapshot's seq first, so nothing is missed).
            feed = await resources.enter_async_context(streams.follow(snapshot.key))
    except BaseException:
        await resources.aclose()
        raise
    fresh = not message.task_id and sent.bare_replies
    held = not message.task_id and sent.await_first_move

    async def items() -> AsyncGenerator[Item, None]:
        nonlocal seq, snapshot
        if held:
            # The task goes out once the agent has moved it, as that move left it.
            async with aclosing(streams.tail(feed, after=seq, heartbeat=settings.SSE_HEARTBEAT)) as tail:
                async for event in tail:
                    if event is not None:
                        break
                    yield None
                else:  # the tail never ends but by an exception
                    return
            found = await dbcalls.run(
                selectors.task_snapshot,
                agent=call.agent,
                principal=call.principal,
                task_id=snapshot.key,
                history_length=history_length,
            )
            if found is None:
                return
            snapshot, seq = found
        if fresh:
            # A new exchange may be answered by a bare Message, and then the client sees only
            # that Message: so the Task goes out with the agent's first event, not before it.
            first = None
            async with aclosing(streams.tail(feed, after=seq, heartbeat=settings.SSE_HEARTBEAT)) as tail:
                async for event in tail:
                    if event is not None:
                        first = event
                        break
                    yield None
            if first is None:  # the tail never ends but by an exception
                return
            if first.kind == EventKind.MESSAGE:
                yield first.seq, MessageView.from_payload(first.payload["message"])
                return
        yield seq, snapshot
        if snapshot.state in sent.until:
            # A follow-up whose run settled the task before the snapshot was read: the
            # snapshot is the end of this exchange, and no later event would end the stream.
            return
        async for item in _events(feed, snapshot.id, snapshot.context_id, after=seq, until=sent.until):
            yield item

    return EventStream(stream_slots.renewing(items(), slot), resources)


def last_event_id(raw: Any) -> int | None:
    """A resubscription's Last-Event-ID (a params field, or the header), as this server sent it."""
    if raw is None or raw == "":
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidParams(
            f"lastEventId must be an event id this server sent (an integer), not {storable.brief(raw)}"
        ) from None
    if value < 0:
        raise InvalidParams("lastEventId must not be negative")
    return value


async def subscribe(
    call: Call, task_id: str, *, acting: str, resume_after: int | None, until: frozenset[str] = TERMINAL
) -> EventStream:
    """Follow the caller's task for a client of the `acting` dialect: its snapshot and then its
    events until it is over (or, for a dialect whose streams end sooner, reaches a state in
    `until`), or (with `resume_after`) exactly the events after that one, then live ones. The
    contract says which tasks may be followed from now on (not finished ones, for A2A)."""
    require_streaming(call.agent)
    canonical = parse_task_id(task_id)
    if canonical is None:
        # Not a key: the id a client chose (A2A 0.1). Its key first, to follow it.
        found_key = await dbcalls.run(
            selectors.task_key_for_caller, agent=call.agent, principal=call.principal, task_id=task_id
        )
        if found_key is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        canonical = found_key[0]
    resources = AsyncExitStack()
    slot = await resources.enter_async_context(stream_slots.hold(tenant=call.agent.tenant, caller=call.caller))
    try:
        # Follow first, then read: whatever is written after the snapshot's seq reaches the feed.
        feed = await resources.enter_async_context(streams.follow(canonical))
        found = await dbcalls.run(selectors.task_snapshot, agent=call.agent, principal=call.principal, task_id=task_id)
        if found is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        view, seq = found
        if view.key != str(canonical):
            # The UUID was a client's chosen id: follow the key (the tail reads from seq first).
            feed = await resources.enter_async_context(streams.follow(view.key))
        if resume_after is None:
            contract.check(
                creator=view.dialect, acting=acting, op=contract.Op.RESUBSCRIBE, state=view.state, task=view.id
            )
        if resume_after is not None and resume_after > seq:
            raise InvalidParams(f"lastEventId {resume_after} is ahead of task {view.id}, whose last event is {seq}")
    except BaseException:
        await resources.aclose()
        raise

    async def items() -> AsyncGenerator[Item, None]:
        if resume_after is None:
            yield seq, view
            if view.state in until:
                return  # a stream that ends at this state (A2A 0.1's at input-required) ends with it
        elif resume_after == seq and view.state in until:
            return  # a reconnect that missed nothing of a task already where its stream ends
        # A subscription lasts until the task is over: an input-required task goes on
        # once the client answers, and the subscriber sees that too.
        after = seq if resume_after is None else resume_after
        async for item in _events(feed, view.id, view.context_id, after=after, until=until):
            yield item

    return EventStream(stream_slots.renewing(items(), slot), resources)
