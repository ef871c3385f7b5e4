"""The A2A 1.0 JSON-RPC methods: decode params, call services/selectors, encode the result.

Handlers are coroutines; database work runs in one `dbcalls.run` hop per step, and a blocking
SendMessage holds no thread while it waits (it waits on hints, see `waiting`).
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack, aclosing, nullcontext
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

from django.conf import settings
from django.db import transaction

from push import selectors as push_selectors, services as push_services
from registry.models import Agent
from registry.selectors import Principal
from tasks_app import dbcalls, hints, selectors, services, storable, streams
from tasks_app.domain import MessageView, NewMessage, parse_task_id
from tasks_app.errors import (
    ExtendedAgentCardNotConfigured, InvalidAgentResponse, InvalidParams, PushNotificationNotSupported,
    TaskNotFound, UnsupportedOperation,
)
from tasks_app.lifecycle import SETTLED, TERMINAL, Dialect, EventKind, Failure
from tasks_app.waiting import wait_until_settled

from ...cards import extended_agent_card
from . import codec


@dataclass(frozen=True)
class Call:
    agent: Agent
    principal: Principal
    base_url: str = ""
    last_event_id: str | None = None  # the SSE Last-Event-ID header, for SubscribeToTask


Handler = Callable[[Call, dict[str, Any]], Awaitable[Any]]

# What a stream yields: (seq, StreamResponse) for an event, None for a heartbeat.
StreamItem = tuple[int, dict[str, Any]] | None


@dataclass
class EventStream:
    """A streaming method's answer, once every check has passed: the items to send, and
    what to release when the stream ends, however it ends (even if it never started)."""

    items: AsyncIterator[StreamItem]
    resources: AsyncExitStack

    async def aclose(self) -> None:
        try:
            await self.items.aclose()
        finally:
            await self.resources.aclose()


def _object(params: dict, key: str) -> dict[str, Any]:
    return codec.opt_obj(params, key, "params")


def _required_id(params: dict, key: str = "id") -> str:
    return codec.required_str(params, key, "params", max_length=storable.ID_LENGTH)


def _encoded_task(task_id: Any, history_length: int | None, *, as_reply: bool) -> dict[str, Any]:
    """A SendMessage-style result: the task, or (as_reply) the bare reply it stands for."""
    found = selectors.task_with_view(task_id, history_length=history_length)
    if found is None:
        raise TaskNotFound(f"task {task_id!r} not found")
    task, view = found
    if as_reply and task.failure == Failure.INVALID_RESPONSE:
        raise InvalidAgentResponse(f"task {task.pk} failed: {selectors.failure_reason(task)}")
    if as_reply and view.reply_only and view.status_message is not None:
        return {"message": codec.encode_bare_message(view.status_message)}
    return {"task": codec.encode_task(view)}


@dataclass(frozen=True)
class SendParams:
    message: NewMessage
    accepted: list[str]
    history_length: int | None
    return_immediately: bool
    metadata: dict[str, Any]
    push: Any  # an inline push config, checked


async def _send_params(call: Call, params: dict[str, Any]) -> SendParams:
    message = codec.decode_message(codec.get(params, "message"))
    config = _object(params, "configuration")
    push = None
    if codec.get(config, "taskPushNotificationConfig") is not None:
        _push_enabled(call)
        push = codec.decode_push_config(
            codec.get(config, "taskPushNotificationConfig"), "params.configuration.taskPushNotificationConfig"
        )
        await asyncio.to_thread(push_services.config_check, config=push)  # resolves DNS: off the DB threads
    return SendParams(
        message=message,
        accepted=codec.opt_str_list(config, "acceptedOutputModes", "params.configuration"),
        history_length=codec.opt_int(config, "historyLength", "params.configuration", minimum=0),
        return_immediately=bool(codec.opt_bool(config, "returnImmediately", "params.configuration")),
        metadata=_object(params, "metadata"),
        push=push,
    )


def _watch_id(message: NewMessage) -> str:
    """The id the task will have, known before it is written: a watch goes up under it first.
    Hints name tasks by their canonical UUID text, which a client may have written otherwise."""
    known = parse_task_id(message.task_id) if message.task_id else None
    return str(known or message.task_id or uuid.uuid4())


def _receive(call: Call, sent: SendParams, task_id: str) -> tuple[Any, Any]:
    """Store the message (and an inline push config) and queue the agent."""
    message, push = sent.message, sent.push
    # With an inline push config, the config and the message commit together; its cursor
    # starts before the message's first event, so the receiver hears of all of it.
    with transaction.atomic() if push else nullcontext():
        if push and message.task_id:
            push_services.config_create(agent=call.agent, principal=call.principal,
                                        task_id=message.task_id, config=push)
        task, stored = services.message_receive(
            agent=call.agent, principal=call.principal, message=message, dialect=Dialect.A2A_1_0,
            accepted_output_modes=sent.accepted, metadata=sent.metadata,
            new_task_id=None if message.task_id else uuid.UUID(task_id),
        )
        if push and not message.task_id:
            push_services.config_create(agent=call.agent, principal=call.principal,
                                        task_id=str(task.pk), config=push, after_seq=0)
    return task, stored


async def send_message(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    sent = await _send_params(call, params)
    history_length = sent.history_length
    # Whatever the worker does after the commit wakes us, so there is nothing to read until a hint comes.
    task_id = _watch_id(sent.message)

    def receive() -> dict[str, Any] | None:
        task, stored = _receive(call, sent, task_id)
        if not sent.return_immediately:
            return None
        if sent.message.task_id:  # a follow-up: the history is longer than what we just wrote
            return _encoded_task(task.pk, history_length, as_reply=False)
        view = selectors.task_view(task, history_length=history_length, include_artifacts=False,
                                   known_history=[stored])
        return {"task": codec.encode_task(view)}

    async with hints.watch(task_id) as watch:
        immediate = await dbcalls.run(receive)
        if immediate is not None:
            return immediate
        await wait_until_settled(task_id, timeout=settings.A2A_BLOCKING_TIMEOUT, watch=watch, read_first=False,
                                 trust_settling_hints=not sent.message.task_id)
    return await dbcalls.run(_encoded_task, task_id, history_length, as_reply=True)


def _require_streaming(agent: Agent) -> None:
    if not agent.streaming:
        raise UnsupportedOperation("streaming is not enabled for this agent (its card says streaming: false)")


async def _events(
    feed: streams.Feed, task_id: str, context_id: str, *, after: int, until: frozenset[str]
) -> AsyncIterator[StreamItem]:
    """The log after `after` as StreamResponses, up to a status event in one of `until`."""
    async for event in streams.tail(feed, after=after, heartbeat=settings.SSE_HEARTBEAT):
        if event is None:
            yield None
            continue
        yield event.seq, codec.encode_event(task_id, context_id, event.kind, event.payload)
        if event.kind == EventKind.STATUS and event.payload.get("state") in until:
            return


async def send_streaming_message(call: Call, params: dict[str, Any]) -> EventStream:
    _require_streaming(call.agent)
    sent = await _send_params(call, params)
    message, history_length = sent.message, sent.history_length
    task_id = _watch_id(message)
    resources = AsyncExitStack()
    feed = await resources.enter_async_context(streams.follow(task_id))

    def receive() -> tuple[int, dict[str, Any], str]:
        task, stored = _receive(call, sent, task_id)
        if message.task_id:
            view, seq = selectors.task_snapshot(
                agent=call.agent, principal=call.principal, task_id=task_id, history_length=history_length
            )
        else:  # a new task: what we just wrote is all there is, at seq 1
            view = selectors.task_view(task, history_length=history_length, include_artifacts=False,
                                       known_history=[stored])
            seq = task.last_seq
        return seq, codec.encode_task(view), view.context_id

    try:
        seq, snapshot, context_id = await dbcalls.run(receive)
    except BaseException:
        await resources.aclose()
        raise
    fresh = not message.task_id

    async def items() -> AsyncIterator[StreamItem]:
        if fresh:
            # A new exchange may be answered by a bare Message, and then the client sees only
            # that Message: so the Task goes out with the agent's first event, not before it.
            async with aclosing(streams.tail(feed, after=seq, heartbeat=settings.SSE_HEARTBEAT)) as tail:
                async for first in tail:
                    if first is not None:
                        break
                    yield None
            if first.kind == EventKind.MESSAGE:
                reply = MessageView.from_payload(first.payload["message"])
                yield first.seq, {"message": codec.encode_bare_message(reply)}
                return
        yield seq, {"task": snapshot}
        # A stream for a message ends where the exchange waits on the client again.
        async for item in _events(feed, task_id, context_id, after=seq, until=SETTLED):
            yield item

    return EventStream(items(), resources)


def _last_event_id(call: Call, params: dict[str, Any]) -> int | None:
    raw = codec.get(params, "lastEventId")
    if raw is None:
        raw = call.last_event_id
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


async def subscribe_to_task(call: Call, params: dict[str, Any]) -> EventStream:
    _require_streaming(call.agent)
    task_id = _required_id(params)
    resume_after = _last_event_id(call, params)
    canonical = parse_task_id(task_id)
    if canonical is None:
        raise TaskNotFound(f"task {task_id!r} not found")
    resources = AsyncExitStack()
    # Follow first, then read: whatever is written after the snapshot's seq reaches the feed.
    feed = await resources.enter_async_context(streams.follow(canonical))
    try:
        found = await dbcalls.run(
            selectors.task_snapshot, agent=call.agent, principal=call.principal, task_id=task_id
        )
        if found is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        view, seq = found
        if resume_after is None and view.state in TERMINAL:
            raise UnsupportedOperation(f"task {view.id} is {view.state}; a finished task has no events to follow")
        if resume_after is not None and resume_after > seq:
            raise InvalidParams(f"lastEventId {resume_after} is ahead of task {view.id}, whose last event is {seq}")
    except BaseException:
        await resources.aclose()
        raise

    async def items() -> AsyncIterator[StreamItem]:
        if resume_after is None:
            yield seq, {"task": codec.encode_task(view)}
        elif resume_after == seq and view.state in TERMINAL:
            return  # a reconnect that missed nothing of a finished task
        # A subscription lasts until the task is over: an input-required task goes on
        # once the client answers, and the subscriber sees that too.
        after = seq if resume_after is None else resume_after
        async for item in _events(feed, view.id, view.context_id, after=after, until=TERMINAL):
            yield item

    return EventStream(items(), resources)


async def get_task(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    task_id = _required_id(params)
    history_length = codec.opt_int(params, "historyLength", "params", minimum=0)

    def read() -> dict[str, Any]:
        found = selectors.task_with_view(
            task_id, history_length=history_length, agent=call.agent, principal=call.principal
        )
        if found is None:
            raise TaskNotFound(f"task {task_id!r} not found")
        return codec.encode_task(found[1])

    return await dbcalls.run(read)


async def list_tasks(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    context_id = codec.opt_str(params, "contextId", "params", max_length=storable.ID_LENGTH) or None
    status = codec.get(params, "status")
    state = None if status in (None, "", "TASK_STATE_UNSPECIFIED", 0) else codec.parse_state(status, "params.status")
    after_raw = codec.get(params, "statusTimestampAfter")
    after = codec.parse_timestamp(after_raw, "params.statusTimestampAfter") if after_raw else None
    page_size = codec.opt_int(params, "pageSize", "params", minimum=1, maximum=100) or 50
    page_token = codec.opt_str(params, "pageToken", "params") or ""
    history_length = codec.opt_int(params, "historyLength", "params", minimum=0)
    include_artifacts = bool(codec.opt_bool(params, "includeArtifacts", "params"))

    def read() -> dict[str, Any]:
        views, next_token, total = selectors.task_list(
            agent=call.agent, principal=call.principal, context_id=context_id, state=state,
            status_after=after, page_size=page_size, page_token=page_token,
            history_length=history_length, include_artifacts=include_artifacts,
        )
        return {
            "tasks": [codec.encode_task(v, include_artifacts=include_artifacts) for v in views],
            "nextPageToken": next_token,
            "pageSize": page_size,
            "totalSize": total,
        }

    return await dbcalls.run(read)


async def cancel_task(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    task_id = _required_id(params)

    def cancel() -> dict[str, Any]:
        task = services.task_cancel(agent=call.agent, principal=call.principal, task_id=task_id)
        return _encoded_task(task.pk, None, as_reply=False)["task"]

    return await dbcalls.run(cancel)


def _push_enabled(call: Call) -> None:
    if not call.agent.push_notifications:
        raise PushNotificationNotSupported(
            "push notifications are not enabled for this agent (its card says pushNotifications: false)"
        )


async def create_push_config(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _push_enabled(call)
    task_id = _required_id(params, "taskId")
    config = codec.decode_push_config(params, "params")
    await asyncio.to_thread(push_services.config_check, config=config)  # resolves DNS: off the DB threads

    def create() -> dict[str, Any]:
        stored = push_services.config_create(agent=call.agent, principal=call.principal, task_id=task_id,
                                             config=config)
        return codec.encode_push_config(push_selectors.config_view(stored))

    return await dbcalls.run(create)


async def get_push_config(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _push_enabled(call)
    task_id, config_id = _required_id(params, "taskId"), _required_id(params, "id")

    def read() -> dict[str, Any]:
        return codec.encode_push_config(push_selectors.config_for_caller(
            agent=call.agent, principal=call.principal, task_id=task_id, config_id=config_id))

    return await dbcalls.run(read)


async def list_push_configs(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _push_enabled(call)
    task_id = _required_id(params, "taskId")
    page_size = codec.opt_int(params, "pageSize", "params", minimum=0, maximum=100) or 100
    page_token = codec.opt_str(params, "pageToken", "params") or ""

    def read() -> dict[str, Any]:
        views, next_token = push_selectors.configs_for_caller(
            agent=call.agent, principal=call.principal, task_id=task_id, page_size=page_size, page_token=page_token,
        )
        return {"configs": [codec.encode_push_config(v) for v in views], "nextPageToken": next_token}

    return await dbcalls.run(read)


async def delete_push_config(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    _push_enabled(call)
    task_id, config_id = _required_id(params, "taskId"), _required_id(params, "id")

    def delete() -> dict[str, Any]:
        push_services.config_delete(agent=call.agent, principal=call.principal, task_id=task_id, config_id=config_id)
        return {}

    return await dbcalls.run(delete)


async def get_extended_agent_card(call: Call, params: dict[str, Any]) -> Any:
    agent = call.agent
    if not agent.has_extended_card:
        raise UnsupportedOperation("this agent has no extended agent card (its card says extendedAgentCard: false)")
    if agent.extended_card is None:
        raise ExtendedAgentCardNotConfigured("this agent declares an extended card but none is configured yet")
    if call.principal.is_anonymous:
        raise UnsupportedOperation("the extended agent card is only shown to callers with an API key")
    return extended_agent_card(agent, base_url=call.base_url)


METHODS: dict[str, Handler] = {
    "SendMessage": send_message,
    "GetTask": get_task,
    "ListTasks": list_tasks,
    "CancelTask": cancel_task,
    "SendStreamingMessage": send_streaming_message,
    "SubscribeToTask": subscribe_to_task,
    "CreateTaskPushNotificationConfig": create_push_config,
    "GetTaskPushNotificationConfig": get_push_config,
    "ListTaskPushNotificationConfigs": list_push_configs,
    "DeleteTaskPushNotificationConfig": delete_push_config,
    "GetExtendedAgentCard": get_extended_agent_card,
}
