"""The A2A 0.1 JSON-RPC methods: decode params, call the shared exchange (protocols.exchange)
or the store's services/selectors, encode the result.

0.1's clients choose their tasks' ids: `tasks/send` with an id this caller has not used
starts a task that keeps that id; the same id again continues it. The rules of what a send
may do to a task are the 0.1 document's: it starts a task, resumes an interrupted one, or
re-opens a completed one, if 0.1 made it (the cross-dialect contract, `protocols.contract`,
decides); a canceled or failed task stays closed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from accounts import storable
from push import selectors as push_selectors
from push import services as push_services
from tasks_app import dbcalls, services
from tasks_app.domain import TaskView
from tasks_app.errors import TaskNotFound
from tasks_app.lifecycle import SETTLED, Dialect

from ... import exchange
from ...exchange import Call, EventStream
from ..base import Handler
from ..params import opt_int, opt_obj, opt_str, opt_str_list, required_str
from . import codec


def _task_id(call: Call, params: dict[str, Any]) -> str:
    task_id = required_str(params, "id", "params", max_length=storable.ID_LENGTH)
    services.client_task_id_check(agent=call.agent, principal=call.principal, task_id=task_id, where="params.id")
    return task_id


def _history_length(params: dict[str, Any]) -> int:
    # "默认为0（无历史记录）": no history unless asked for.
    return opt_int(params, "historyLength", "params", minimum=0) or 0


async def _send_params(call: Call, params: dict[str, Any]) -> exchange.Send:
    task_id = _task_id(call, params)
    message = codec.decode_message(params.get("message"))
    session_id = opt_str(params, "sessionId", "params", max_length=storable.ID_LENGTH) or None
    push = None
    if params.get("pushNotification") is not None:
        exchange.require_push(call.agent)
        push = codec.decode_push_config(params["pushNotification"], "params.pushNotification")
        await exchange.push_config_check(push)
    return exchange.Send(
        message=replace(message, context_id=session_id),
        dialect=Dialect.A2A_0_1,
        accepted=opt_str_list(params, "acceptedOutputModes", "params"),
        history_length=_history_length(params),
        return_immediately=False,
        metadata=opt_obj(params, "metadata", "params"),
        push=push,
        client_task_id=task_id,
        bare_replies=False,
    )


def _stream_encoder(value: Any) -> dict[str, Any]:
    """A stream item: the task's snapshot opens the stream as its current status."""
    if isinstance(value, TaskView):
        return codec.status_event(value.id, value.state, value.status_message, value.status_timestamp)
    return codec.encode_event(value.task_id, value.context_id, value.kind, value.payload)


async def send(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    answer = await exchange.send(call, await _send_params(call, params))
    assert answer.task is not None  # no bare replies in 0.1 (Send.bare_replies)
    return codec.encode_task(answer.task)


async def send_subscribe(call: Call, params: dict[str, Any]) -> EventStream:
    exchange.require_streaming(call.agent)
    stream = await exchange.send_streaming(call, await _send_params(call, params))
    return stream.encoded(_stream_encoder)


async def resubscribe(call: Call, params: dict[str, Any]) -> EventStream:
    exchange.require_streaming(call.agent)
    task_id = _task_id(call, params)
    resume_after = exchange.last_event_id(call.last_event_id)
    # A 0.1 stream ends with its `final` event: when the task waits on the client or is over.
    stream = await exchange.subscribe(call, task_id, acting=Dialect.A2A_0_1, resume_after=resume_after, until=SETTLED)
    return stream.encoded(_stream_encoder)


async def get(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    view = await exchange.task_get(call, _task_id(call, params), history_length=_history_length(params))
    return codec.encode_task(view)


async def cancel(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    return codec.encode_task(
        await exchange.task_cancel(call, _task_id(call, params), acting=Dialect.A2A_0_1, history_length=0)
    )


async def push_set(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    exchange.require_push(call.agent)
    task_id = _task_id(call, params)
    config = codec.decode_push_config(params.get("pushNotificationConfig"), "params.pushNotificationConfig")
    await exchange.push_config_check(config)

    def create() -> dict[str, Any]:
        stored = push_services.config_create(agent=call.agent, principal=call.principal, task_id=task_id, config=config)
        return codec.encode_task_push_config(push_selectors.config_view(stored, task=stored.task))

    return await dbcalls.run(create)


async def push_get(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    exchange.require_push(call.agent)
    task_id = _task_id(call, params)

    def read() -> dict[str, Any]:
        configs, _ = push_selectors.configs_for_caller(agent=call.agent, principal=call.principal, task_id=task_id)
        if not configs:
            raise TaskNotFound(f"task {task_id!r} has no push notification config")
        # 0.1 knows one config per task: the one set last (a 1.0 client may have made more).
        own = [c for c in configs if c.config_id == codec.PUSH_CONFIG_ID]
        return codec.encode_task_push_config((own or configs)[-1])

    return await dbcalls.run(read)


METHODS: dict[str, Handler] = {
    "tasks/send": send,
    "tasks/sendSubscribe": send_subscribe,
    "tasks/get": get,
    "tasks/cancel": cancel,
    "tasks/pushNotification/set": push_set,
    "tasks/pushNotification/get": push_get,
    "tasks/resubscribe": resubscribe,
}
