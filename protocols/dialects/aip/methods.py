"""The AIP methods (seed 004, section 6): `rpc`, `stream`, `notification/set|get|delete|start`
and `group`. Each decodes its params and calls the command flow (`flow`), the push services,
or the group handler that group mode registers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from push import selectors as push_selectors
from push import services as push_services
from tasks_app import dbcalls, selectors
from tasks_app.domain import MessageView, TaskView
from tasks_app.errors import GroupNotSupported, InvalidParams, TaskNotFound
from tasks_app.lifecycle import EventKind
from tasks_app.services import client_task_id_check

from ... import exchange
from ...exchange import Call, EventStream
from ..base import Handler
from . import codec, flow


async def rpc(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    return await flow.command(call, params.get("message"))


def _stream_event(value: TaskView | MessageView | exchange.Event) -> dict[str, Any]:
    if isinstance(value, TaskView):
        return codec.encode_task(value)
    if isinstance(value, MessageView):
        return codec.encode_event(value.task_id, value.context_id, "message", {"message": value.as_payload()})
    return codec.encode_event(value.task_id, value.context_id, value.kind, value.payload)


async def stream(call: Call, params: dict[str, Any]) -> EventStream:
    """Each event as `{eventSeq, eventData}`: eventSeq is the task's event log's seq, which
    only grows, and which a re-stream's lastEventSeq names."""
    events = await flow.stream(call, params.get("message"))

    async def items() -> Any:
        async for item in events.items:
            yield None if item is None else (item[0], {"eventSeq": item[0], "eventData": _stream_event(item[1])})

    return EventStream(items(), events.resources)


# --- notifications -------------------------------------------------------------------------


async def notification_set(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """Create a config (no id) or update the one of that id, on a task or, for an id the
    Leader has not started yet, ahead of it (notification/start then names it)."""
    exchange.require_push(call.agent)
    task_id, config = codec.decode_notification_config(params)
    await exchange.push_config_check(config)

    def store() -> dict[str, Any]:
        if selectors.task_key_for_caller(agent=call.agent, principal=call.principal, task_id=task_id) is not None:
            stored = push_services.config_create(
                agent=call.agent, principal=call.principal, task_id=task_id, config=config
            )
            return codec.encode_notification_config(push_selectors.config_view(stored, task=stored.task))
        # An id the caller will give a task must be one it may choose.
        client_task_id_check(agent=call.agent, principal=call.principal, task_id=task_id, where="params.taskId")
        ahead = push_services.config_register_ahead(
            agent=call.agent, principal=call.principal, client_task_id=task_id, config=config
        )
        return codec.encode_notification_config(
            push_selectors.pending_configs_for_caller(
                agent=call.agent, principal=call.principal, client_task_id=task_id, config_id=ahead.config_id
            )[0]
        )

    return await dbcalls.run(store)


async def notification_get(call: Call, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The task's configs (all, or the one named): those on it, or those set ahead of it."""
    exchange.require_push(call.agent)
    task_id, config_id = codec.config_ids(params)

    def read() -> list[dict[str, Any]]:
        if selectors.task_key_for_caller(agent=call.agent, principal=call.principal, task_id=task_id) is None:
            views = push_selectors.pending_configs_for_caller(
                agent=call.agent, principal=call.principal, client_task_id=task_id, config_id=config_id
            )
            if not views:
                raise _nothing(task_id, config_id)
        elif config_id is not None:
            views = [
                push_selectors.config_for_caller(
                    agent=call.agent, principal=call.principal, task_id=task_id, config_id=config_id
                )
            ]
        else:
            views = _all_configs(call, task_id)
        return [codec.encode_notification_config(v) for v in views]

    return await dbcalls.run(read)


def _all_configs(call: Call, task_id: str) -> list[Any]:
    found, token = [], ""
    while True:
        views, token = push_selectors.configs_for_caller(
            agent=call.agent, principal=call.principal, task_id=task_id, page_size=100, page_token=token
        )
        found += views
        if not token:
            return found


def _nothing(task_id: str, config_id: str | None) -> TaskNotFound:
    if config_id is None:
        return TaskNotFound(f"task {task_id!r} not found", data={"taskId": task_id})
    return TaskNotFound(
        f"no notification config {config_id!r} for task {task_id!r}",
        data={"taskId": task_id, "notificationConfigId": config_id},
    )


async def notification_delete(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """Delete the named config, or every config of the task; deleting what is gone already
    succeeds (the Leader's retry of a delete must not fail)."""
    exchange.require_push(call.agent)
    task_id, config_id = codec.config_ids(params)

    def delete() -> dict[str, Any]:
        if selectors.task_key_for_caller(agent=call.agent, principal=call.principal, task_id=task_id) is None:
            deleted = push_services.pending_configs_delete(
                agent=call.agent, principal=call.principal, client_task_id=task_id, config_id=config_id
            )
            if not deleted and config_id is None:
                raise _nothing(task_id, None)
        else:
            push_services.config_delete(
                agent=call.agent, principal=call.principal, task_id=task_id, config_id=config_id
            )
        return {"success": True}

    return await dbcalls.run(delete)


async def notification_start(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """A start that names a config set ahead of the task: the task is created with that config
    on it, delivering the changes after the start (in notifyOnStates only, if named)."""
    exchange.require_push(call.agent)
    message = codec.decode_message(params.get("message"))
    if message.command != "start":
        raise InvalidParams(f'params.message.command must be "start" for notification/start, got {message.command!r}')
    config_id = message.command_params.get("notificationConfigId")
    if not isinstance(config_id, str) or not config_id:
        raise InvalidParams("params.message.commandParams.notificationConfigId is required: the config to notify")
    # Seq 1 is the start's own receipt, which the answer to this request reports.
    attach = exchange.Attach(config_id=config_id, states=codec.notify_on_states(message), after_seq=1)
    return await flow.apply(call, message, attach=attach)


# --- group mode ------------------------------------------------------------------------------

GroupHandler = Callable[[Call, dict[str, Any]], Awaitable[dict[str, Any]]]
_group: list[GroupHandler] = []


def register_group(handler: GroupHandler) -> None:
    """Group mode (an app above the protocols) serves `group` invitations with `handler`."""
    _group[:] = [handler]


async def group(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    if not _group:
        raise GroupNotSupported("this server does not take part in AIP groups")
    return await _group[0](call, params)


METHODS: dict[str, Handler] = {
    "rpc": rpc,
    "stream": stream,
    "notification/set": notification_set,
    "notification/get": notification_get,
    "notification/delete": notification_delete,
    "notification/start": notification_start,
    "group": group,
}


def push_notification(task_key: str, context_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The body of an AIP notification: a Task (seed 6.3.5), read from the store by its key,
    with the status the notified change made (so that a notification for working says
    working, even when the task has moved on by the time it is sent); the event itself is
    named by the A2A-Push-Event-Id header."""
    found = selectors.task_with_view(task_key, history_length=0)
    if found is None:
        raise LookupError(f"task {task_key} no longer exists")
    task = codec.encode_task(found[1])
    if kind == EventKind.STATUS:
        task["status"] = codec.status_of(payload)
    return task
