"""The A2A 1.0 JSON-RPC methods: decode params, call services/selectors, encode the result.

Handlers are coroutines; database work runs in one `dbcalls.run` hop per step, and a blocking
SendMessage holds no thread while it waits (it waits on hints, see `waiting`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from django.conf import settings

from registry.models import Agent
from registry.selectors import Principal

from ... import dbcalls, hints, selectors, services
from ...errors import (
    ExtendedAgentCardNotConfigured, InvalidAgentResponse, InvalidParams, PushNotificationNotSupported,
    TaskNotFound, UnsupportedOperation,
)
from ...cards import extended_agent_card
from ...domain import parse_task_id
from ...lifecycle import Dialect, Failure
from ...waiting import wait_until_settled
from . import codec


@dataclass(frozen=True)
class Call:
    agent: Agent
    principal: Principal
    base_url: str = ""


Handler = Callable[[Call, dict[str, Any]], Awaitable[Any]]


def _object(params: dict, key: str) -> dict[str, Any]:
    return codec.opt_obj(params, key, "params")


def _required_id(params: dict, key: str = "id") -> str:
    value = codec.get(params, key)
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"params.{key} is required and must be a non-empty string")
    return value


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


async def send_message(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    message = codec.decode_message(codec.get(params, "message"))
    config = _object(params, "configuration")
    accepted = codec.opt_str_list(config, "acceptedOutputModes", "params.configuration")
    history_length = codec.opt_int(config, "historyLength", "params.configuration", minimum=0)
    return_immediately = bool(codec.opt_bool(config, "returnImmediately", "params.configuration"))
    if codec.get(config, "taskPushNotificationConfig") is not None:
        raise PushNotificationNotSupported("push notifications are not enabled for this agent")
    metadata = _object(params, "metadata")

    # The watch goes up before the task is written, under the id it will get: whatever the
    # worker does after the commit wakes us, so there is nothing to read until a hint comes.
    # Hints name tasks by their canonical UUID text, which a client may have written otherwise.
    known = parse_task_id(message.task_id) if message.task_id else None
    task_id = str(known or message.task_id or uuid.uuid4())

    def receive() -> dict[str, Any] | None:
        task, stored = services.message_receive(
            agent=call.agent, principal=call.principal, message=message, dialect=Dialect.A2A_1_0,
            accepted_output_modes=accepted, metadata=metadata,
            new_task_id=None if message.task_id else uuid.UUID(task_id),
        )
        if not return_immediately:
            return None
        if message.task_id:  # a follow-up: the history is longer than what we just wrote
            return _encoded_task(task.pk, history_length, as_reply=False)
        view = selectors.task_view(task, history_length=history_length, include_artifacts=False,
                                   known_history=[stored])
        return {"task": codec.encode_task(view)}

    async with hints.watch(task_id) as watch:
        immediate = await dbcalls.run(receive)
        if immediate is not None:
            return immediate
        await wait_until_settled(task_id, timeout=settings.A2A_BLOCKING_TIMEOUT, watch=watch, read_first=False)
    return await dbcalls.run(_encoded_task, task_id, history_length, as_reply=True)


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
    context_id = codec.opt_str(params, "contextId", "params") or None
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


async def streaming_not_enabled(call: Call, params: dict[str, Any]) -> Any:
    raise UnsupportedOperation("streaming is not enabled for this agent (its card says streaming: false)")


async def push_not_enabled(call: Call, params: dict[str, Any]) -> Any:
    raise PushNotificationNotSupported(
        "push notifications are not enabled for this agent (its card says pushNotifications: false)"
    )


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
    "SendStreamingMessage": streaming_not_enabled,
    "SubscribeToTask": streaming_not_enabled,
    "CreateTaskPushNotificationConfig": push_not_enabled,
    "GetTaskPushNotificationConfig": push_not_enabled,
    "ListTaskPushNotificationConfigs": push_not_enabled,
    "DeleteTaskPushNotificationConfig": push_not_enabled,
    "GetExtendedAgentCard": get_extended_agent_card,
}
