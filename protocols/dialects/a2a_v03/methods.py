"""The A2A 0.3 JSON-RPC methods: decode params, call the shared exchange (protocols.exchange)
or the store's services/selectors, encode the result; and 0.3's error objects.

The flow is 1.0's (`a2a_v1.methods`): only the params, results and errors are 0.3's.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import AsyncExitStack
from typing import Any

import orjson

from accounts import storable
from push import selectors as push_selectors
from push import services as push_services
from tasks_app import dbcalls, selectors
from tasks_app.domain import MessageView, TaskView
from tasks_app.errors import (
    ContentTypeNotSupported,
    DomainError,
    ExtendedAgentCardNotConfigured,
    ExtensionSupportRequired,
    InvalidAgentResponse,
    PushNotificationNotSupported,
    RetryLater,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
    VersionNotSupported,
)
from tasks_app.lifecycle import SETTLED, TERMINAL, Dialect, EventKind

from ... import card_signing, exchange, jsonrpc
from ...exchange import Call, EventStream
from .. import params as fields
from ..base import Handler
from . import card, codec

# 0.3's error codes and the messages its specification gives them. The server's message is
# sent when it says more (it names the task, the field, the state); the standard one otherwise.
_ERRORS: dict[type[DomainError], tuple[int, str]] = {
    TaskNotFound: (-32001, "Task not found"),
    TaskNotCancelable: (-32002, "Task cannot be canceled"),
    PushNotificationNotSupported: (-32003, "Push Notification is not supported"),
    UnsupportedOperation: (-32004, "This operation is not supported"),
    ContentTypeNotSupported: (-32005, "Incompatible content types"),
    InvalidAgentResponse: (-32006, "Invalid agent response"),
    ExtendedAgentCardNotConfigured: (-32007, "Authenticated Extended Card is not configured"),
    # 0.3 has no code for these two (1.0's -32008 and -32009 came later); the request as sent
    # cannot be served, which is JSON-RPC's Invalid Request. data.reason says which.
    ExtensionSupportRequired: (jsonrpc.INVALID_REQUEST, "Invalid Request"),
    VersionNotSupported: (jsonrpc.INVALID_REQUEST, "Invalid Request"),
}


def error(request_id: Any, exc: DomainError) -> bytes:
    """A domain error as a 0.3 JSON-RPC error object: code, message and, for A2A's errors and
    the server's own, `data: {reason, domain}` (0.3's data is free-form; 1.0 puts an ErrorInfo
    list there)."""
    code, standard = _ERRORS.get(type(exc), (exc.code, exc.default_message))
    message = standard if exc.message == exc.default_message else exc.message
    err: dict[str, Any] = {"code": code, "message": message}
    if exc.reason:
        err["data"] = {"reason": exc.reason, "domain": exc.domain or jsonrpc.ERROR_DOMAIN}
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": err})


def _required_id(params: dict, key: str = "id") -> str:
    return fields.required_str(params, key, "params", max_length=storable.ID_LENGTH)


def _history_length(obj: dict, where: str) -> int | None:
    # 0.3 reads 0 as "no limit" (the a2a-sdk's 0.3 server and its compatibility layer do).
    return fields.opt_int(obj, "historyLength", where, minimum=0) or None


def _answer(answer: exchange.Answer) -> dict[str, Any]:
    if answer.reply is not None:
        return codec.encode_bare_message(answer.reply)
    assert answer.task is not None  # an answer is the one or the other
    return codec.encode_task(answer.task)


def _stream_encoder(until: frozenset[str]) -> Callable[[Any], dict[str, Any]]:
    """How a stream's items go out: the stream ends after a status event in `until` (see
    exchange._events), and that event says so with `final: true`."""

    def encode(value: TaskView | MessageView | exchange.Event) -> dict[str, Any]:
        if isinstance(value, TaskView):
            return codec.encode_task(value)
        if isinstance(value, MessageView):
            return codec.encode_bare_message(value)
        final = value.kind == EventKind.STATUS and value.payload.get("state") in until
        return codec.encode_stream_event(value.task_id, value.context_id, value.kind, value.payload, final=final)

    return encode


async def _send_params(call: Call, params: dict[str, Any]) -> exchange.Send:
    message = codec.decode_message(fields.get(params, "message"))
    config = fields.opt_obj(params, "configuration", "params")
    push = None
    if fields.get(config, "pushNotificationConfig") is not None:
        exchange.require_push(call.agent)
        push = codec.decode_push_config(
            fields.get(config, "pushNotificationConfig"), "params.configuration.pushNotificationConfig"
        )
        await exchange.push_config_check(push)
    blocking = fields.opt_bool(config, "blocking", "params.configuration")
    return exchange.Send(
        message=message,
        dialect=Dialect.A2A_0_3,
        accepted=fields.opt_str_list(config, "acceptedOutputModes", "params.configuration"),
        history_length=_history_length(config, "params.configuration"),
        # Blocking unless the client says otherwise (0.3's servers, and 1.0's returnImmediately).
        return_immediately=blocking is False,
        metadata=fields.opt_obj(params, "metadata", "params"),
        push=push,
    )


async def send_message(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    return _answer(await exchange.send(call, await _send_params(call, params)))


def _streamed(method: Handler) -> Handler:
    """A streaming method whose request cannot be served answers with a stream all the same,
    its one event the error (a SendStreamingMessageResponse may be a JSONRPCErrorResponse,
    §7.2.1), as 0.3's reference server does: 0.3 clients read a stream method's answer as
    SSE only. A cap that frees up by itself keeps its HTTP 429 and Retry-After."""

    async def answer(call: Call, params: dict[str, Any]) -> EventStream:
        try:
            return await method(call, params)
        except RetryLater:
            raise
        except DomainError as exc:
            return _failed(exc)

    return answer


def _failed(exc: DomainError) -> EventStream:
    async def items() -> AsyncGenerator[Any, None]:
        raise exc
        yield  # an async generator, which fails when first read  # pragma: no cover

    return EventStream(items(), AsyncExitStack())


@_streamed
async def send_streaming_message(call: Call, params: dict[str, Any]) -> EventStream:
    exchange.require_streaming(call.agent)
    stream = await exchange.send_streaming(call, await _send_params(call, params))
    return stream.encoded(_stream_encoder(SETTLED))


@_streamed
async def resubscribe(call: Call, params: dict[str, Any]) -> EventStream:
    exchange.require_streaming(call.agent)
    task_id = _required_id(params)
    raw = fields.get(params, "lastEventId")
    resume_after = exchange.last_event_id(call.last_event_id if raw is None else raw)
    stream = await exchange.subscribe(call, task_id, acting=Dialect.A2A_0_3, resume_after=resume_after)
    return stream.encoded(_stream_encoder(TERMINAL))


async def get_task(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    view = await exchange.task_get(call, _required_id(params), history_length=_history_length(params, "params"))
    return codec.encode_task(view)


async def cancel_task(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    return codec.encode_task(await exchange.task_cancel(call, _required_id(params), acting=Dialect.A2A_0_3))


# The id the server gives a config set without one (0.3 leaves it to the server, §6.8): the
# task's own config, which setting again replaces. The official 0.3 suite asks for it by this name.
OWN_CONFIG_ID = "default"


async def set_push_config(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """tasks/pushNotificationConfig/set: a TaskPushNotificationConfig. Without an id the
    config is the task's own (OWN_CONFIG_ID), so setting again replaces it."""
    exchange.require_push(call.agent)
    task_id = _required_id(params, "taskId")
    config = codec.decode_push_config(
        fields.get(params, "pushNotificationConfig"), "params.pushNotificationConfig", default_id=OWN_CONFIG_ID
    )
    await exchange.push_config_check(config)

    def create() -> dict[str, Any]:
        stored = push_services.config_create(agent=call.agent, principal=call.principal, task_id=task_id, config=config)
        return codec.encode_push_config(push_selectors.config_view(stored))

    return await dbcalls.run(create)


async def get_push_config(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """tasks/pushNotificationConfig/get: by pushNotificationConfigId, or (0.3's TaskIdParams
    form) the task's first config."""
    exchange.require_push(call.agent)
    task_id = _required_id(params)
    config_id = fields.opt_str(params, "pushNotificationConfigId", "params", max_length=storable.ID_LENGTH)

    def read() -> dict[str, Any]:
        if config_id:
            view = push_selectors.config_for_caller(
                agent=call.agent, principal=call.principal, task_id=task_id, config_id=config_id
            )
        else:
            first, _ = push_selectors.configs_for_caller(
                agent=call.agent, principal=call.principal, task_id=task_id, page_size=1
            )
            if not first:
                raise TaskNotFound(f"task {task_id} has no push notification config")
            view = first[0]
        return codec.encode_push_config(view)

    return await dbcalls.run(read)


async def list_push_configs(call: Call, params: dict[str, Any]) -> list[dict[str, Any]]:
    """tasks/pushNotificationConfig/list: every config of the task. 0.3 has no paging fields;
    the answer is bounded by the cap on configs per task (PUSH_MAX_CONFIGS_PER_TASK)."""
    exchange.require_push(call.agent)
    task_id = _required_id(params)

    def read() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        token = ""
        while True:
            views, token = push_selectors.configs_for_caller(
                agent=call.agent, principal=call.principal, task_id=task_id, page_size=100, page_token=token
            )
            found += [codec.encode_push_config(v) for v in views]
            if not token:
                return found

    return await dbcalls.run(read)


async def delete_push_config(call: Call, params: dict[str, Any]) -> None:
    exchange.require_push(call.agent)
    task_id = _required_id(params)
    config_id = fields.required_str(params, "pushNotificationConfigId", "params", max_length=storable.ID_LENGTH)

    def delete() -> None:
        push_services.config_delete(agent=call.agent, principal=call.principal, task_id=task_id, config_id=config_id)

    await dbcalls.run(delete)


async def get_authenticated_extended_card(call: Call, params: dict[str, Any]) -> Any:
    agent = call.agent
    if not agent.has_extended_card:
        raise UnsupportedOperation(
            "this agent has no authenticated extended card (its card says supportsAuthenticatedExtendedCard: false)"
        )
    if agent.extended_card is None:
        raise ExtendedAgentCardNotConfigured("this agent declares an extended card but none is configured yet")
    if call.principal.is_anonymous:
        raise UnsupportedOperation("the authenticated extended card is only shown to callers with an API key")
    extended = card.extended_agent_card(agent, base_url=call.base_url, url=call.agent_url)
    if not call.vouched:  # at a Host the server does not know: served, not signed (protocols.hosts)
        return extended
    return await dbcalls.run(card_signing.signed_for, extended, agent, base_url=call.base_url, url=call.agent_url)


METHODS: dict[str, Handler] = {
    "message/send": send_message,
    "message/stream": send_streaming_message,
    "tasks/get": get_task,
    "tasks/cancel": cancel_task,
    "tasks/resubscribe": resubscribe,
    "tasks/pushNotificationConfig/set": set_push_config,
    "tasks/pushNotificationConfig/get": get_push_config,
    "tasks/pushNotificationConfig/list": list_push_configs,
    "tasks/pushNotificationConfig/delete": delete_push_config,
    "agent/getAuthenticatedExtendedCard": get_authenticated_extended_card,
}


def push_notification(task_id: str, context_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The body of a push notification of a task created in 0.3: the Task as it is when sent
    (0.3's senders POST the latest task state, not the event; the event's id is in the
    A2A-Push-Event-Id header). Reads the store: the event alone lacks the task's state."""
    found = selectors.task_with_view(task_id)
    if found is None:
        raise LookupError(f"task {task_id} no longer exists")
    return codec.encode_task(found[1])
