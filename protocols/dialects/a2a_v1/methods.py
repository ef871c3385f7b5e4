"""The A2A 1.0 JSON-RPC methods: decode params, call the shared exchange (protocols.exchange)
or the store's services/selectors, encode the result.

Handlers are coroutines; database work runs in one `dbcalls.run` hop per step, and a blocking
SendMessage holds no thread while it waits (it waits on hints, see `waiting`).
"""

from __future__ import annotations

from typing import Any

from accounts import storable
from push import selectors as push_selectors
from push import services as push_services
from tasks_app import dbcalls, selectors
from tasks_app.domain import MessageView, TaskView
from tasks_app.errors import ExtendedAgentCardNotConfigured, UnsupportedOperation
from tasks_app.lifecycle import Dialect

from ... import card_signing, exchange
from ...cards import extended_agent_card
from ...exchange import Call, EventStream
from .. import params as fields
from ..base import Handler
from . import codec


def _object(params: dict, key: str) -> dict[str, Any]:
    return fields.opt_obj(params, key, "params")


def _required_id(params: dict, key: str = "id") -> str:
    return fields.required_str(params, key, "params", max_length=storable.ID_LENGTH)


def _answer(answer: exchange.Answer) -> dict[str, Any]:
    if answer.reply is not None:
        return {"message": codec.encode_bare_message(answer.reply)}
    assert answer.task is not None  # an answer is the one or the other
    return {"task": codec.encode_task(answer.task)}


def _stream_response(value: TaskView | MessageView | exchange.Event) -> dict[str, Any]:
    """A stream item as the StreamResponse that carries it."""
    if isinstance(value, TaskView):
        return {"task": codec.encode_task(value)}
    if isinstance(value, MessageView):
        return {"message": codec.encode_bare_message(value)}
    return codec.encode_event(value.task_id, value.context_id, value.kind, value.payload)


async def _send_params(call: Call, params: dict[str, Any]) -> exchange.Send:
    message = codec.decode_message(fields.get(params, "message"))
    config = _object(params, "configuration")
    push = None
    if fields.get(config, "taskPushNotificationConfig") is not None:
        exchange.require_push(call.agent)
        push = codec.decode_push_config(
            fields.get(config, "taskPushNotificationConfig"), "params.configuration.taskPushNotificationConfig"
        )
        await exchange.push_config_check(push)
    return exchange.Send(
        message=message,
        dialect=Dialect.A2A_1_0,
        accepted=fields.opt_str_list(config, "acceptedOutputModes", "params.configuration"),
        history_length=fields.opt_int(config, "historyLength", "params.configuration", minimum=0),
        return_immediately=bool(fields.opt_bool(config, "returnImmediately", "params.configuration")),
        metadata=_object(params, "metadata"),
        push=push,
    )


async def send_message(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    return _answer(await exchange.send(call, await _send_params(call, params)))


async def send_streaming_message(call: Call, params: dict[str, Any]) -> EventStream:
    exchange.require_streaming(call.agent)
    stream = await exchange.send_streaming(call, await _send_params(call, params))
    return stream.encoded(_stream_response)


async def subscribe_to_task(call: Call, params: dict[str, Any]) -> EventStream:
    exchange.require_streaming(call.agent)
    task_id = _required_id(params)
    raw = fields.get(params, "lastEventId")
    resume_after = exchange.last_event_id(call.last_event_id if raw is None else raw)
    stream = await exchange.subscribe(call, task_id, acting=Dialect.A2A_1_0, resume_after=resume_after)
    return stream.encoded(_stream_response)


async def get_task(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    history_length = fields.opt_int(params, "historyLength", "params", minimum=0)
    return codec.encode_task(await exchange.task_get(call, _required_id(params), history_length=history_length))


async def list_tasks(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    context_id = fields.opt_str(params, "contextId", "params", max_length=storable.ID_LENGTH) or None
    status = fields.get(params, "status")
    state = None if status in (None, "", "TASK_STATE_UNSPECIFIED", 0) else codec.parse_state(status, "params.status")
    after_raw = fields.get(params, "statusTimestampAfter")
    after = codec.parse_timestamp(after_raw, "params.statusTimestampAfter") if after_raw else None
    page_size = fields.opt_int(params, "pageSize", "params", minimum=1, maximum=100) or 50
    page_token = fields.opt_str(params, "pageToken", "params") or ""
    history_length = fields.opt_int(params, "historyLength", "params", minimum=0)
    include_artifacts = bool(fields.opt_bool(params, "includeArtifacts", "params"))

    def read() -> dict[str, Any]:
        views, next_token, total = selectors.task_list(
            agent=call.agent,
            principal=call.principal,
            context_id=context_id,
            state=state,
            status_after=after,
            page_size=page_size,
            page_token=page_token,
            history_length=history_length,
            include_artifacts=include_artifacts,
        )
        return {
            "tasks": [codec.encode_task(v, include_artifacts=include_artifacts) for v in views],
            "nextPageToken": next_token,
            "pageSize": page_size,
            "totalSize": total,
        }

    return await dbcalls.run(read)


async def cancel_task(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    return codec.encode_task(await exchange.task_cancel(call, _required_id(params), acting=Dialect.A2A_1_0))


async def create_push_config(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    exchange.require_push(call.agent)
    task_id = _required_id(params, "taskId")
    config = codec.decode_push_config(params, "params")
    await exchange.push_config_check(config)

    def create() -> dict[str, Any]:
        stored = push_services.config_create(agent=call.agent, principal=call.principal, task_id=task_id, config=config)
        return codec.encode_push_config(push_selectors.config_view(stored, task=stored.task))

    return await dbcalls.run(create)


async def get_push_config(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    exchange.require_push(call.agent)
    task_id, config_id = _required_id(params, "taskId"), _required_id(params, "id")

    def read() -> dict[str, Any]:
        return codec.encode_push_config(
            push_selectors.config_for_caller(
                agent=call.agent, principal=call.principal, task_id=task_id, config_id=config_id
            )
        )

    return await dbcalls.run(read)


async def list_push_configs(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    exchange.require_push(call.agent)
    task_id = _required_id(params, "taskId")
    page_size = fields.opt_int(params, "pageSize", "params", minimum=0, maximum=100) or 100
    page_token = fields.opt_str(params, "pageToken", "params") or ""

    def read() -> dict[str, Any]:
        views, next_token = push_selectors.configs_for_caller(
            agent=call.agent,
            principal=call.principal,
            task_id=task_id,
            page_size=page_size,
            page_token=page_token,
        )
        return {"configs": [codec.encode_push_config(v) for v in views], "nextPageToken": next_token}

    return await dbcalls.run(read)


async def delete_push_config(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    exchange.require_push(call.agent)
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
    card = extended_agent_card(agent, base_url=call.base_url, url=call.agent_url)
    if not call.vouched:  # at a Host the server does not know: served, not signed (protocols.hosts)
        return card
    return await dbcalls.run(card_signing.signed_for, card, agent, base_url=call.base_url, url=call.agent_url)


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
