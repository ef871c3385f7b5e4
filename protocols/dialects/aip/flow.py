"""What a Leader's command does to its task: the seed's state table (rows 1-19) over the
shared store and exchange. One place for every way a command arrives: `rpc`, `stream`,
`notification/start`, and group mode's queue.

    start     no task of that id: a new task, accepted (the agent may reject it at once);
              one exists: ignored
    continue  awaiting input or completion: working again, the agent runs; else ignored
    cancel    accepted, working or awaiting: canceled; else ignored
    complete  awaiting completion: completed; else ignored
    get       the task, with the messages and transitions since the times given

A command that does not apply is ignored, as the seed says: the answer is the task as it is.
Only a task that does not exist (for any command but start) is an error. Whether a command
applies to a task that exists is the cross-dialect contract's to say (`protocols.contract`),
as for every dialect: AIP's way of refusing is to ignore. A Leader's cancel and get join the
history of AIP's own tasks only (`contract.keeps_command_messages`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

from django.conf import settings

from tasks_app import dbcalls, selectors, services
from tasks_app.domain import TaskRecord
from tasks_app.errors import TaskNotCancelable, TaskNotFound, UnsupportedOperation
from tasks_app.lifecycle import TERMINAL, Dialect

from ... import contract, exchange
from ...exchange import Call, EventStream
from ..params import opt_int
from . import codec
from .codec import LeaderMessage

AIP = Dialect.AIP_1_0


def _not_found(task_id: str) -> TaskNotFound:
    return TaskNotFound(f"task {task_id!r} not found", data={"taskId": task_id})


async def _found(call: Call, task_id: str) -> tuple[str, str] | None:
    """The caller's task's state and creating dialect, or None if it has no task of that id."""
    return await dbcalls.run(
        selectors.task_state_for_caller, agent=call.agent, principal=call.principal, task_id=task_id
    )


def _applies(found: tuple[str, str], op: contract.Op) -> bool:
    """Whether a command applies to the task as the contract says (else it is ignored)."""
    state, creator = found
    return contract.decide(creator=creator, acting=AIP, op=op, state=state) is None


def _id_check(call: Call, task_id: str) -> None:
    """The Leader chooses task ids: one an anonymous caller chose must be unguessable."""
    services.client_task_id_check(
        agent=call.agent, principal=call.principal, task_id=task_id, where="params.message.taskId"
    )


async def _answered(answer: exchange.Answer) -> dict[str, Any]:
    """The task a send answered with, as an AIP Task (only the reason of its latest change is
    read again: a send's answer has the rest)."""
    assert answer.task is not None  # AIP has no bare replies (Send.bare_replies)
    reason = await dbcalls.run(selectors.status_reason, answer.task.key)
    return codec.encode_task(answer.task, record=TaskRecord(answer.task, [], [], reason))


async def task_json(call: Call, task_id: str, *, get: codec.GetParams | None = None) -> dict[str, Any]:
    """The caller's task as an AIP Task; with `get`, its messageHistory and statusHistory
    since the times it gives."""
    record = await dbcalls.run(
        selectors.task_record,
        agent=call.agent,
        principal=call.principal,
        task_id=task_id,
        histories=get is not None,
        messages_since=get.messages_since if get else None,
        statuses_since=get.statuses_since if get else None,
    )
    if record is None:
        raise _not_found(task_id)
    return codec.encode_task(record.view, record=record, histories=get is not None)


def _send(
    message: LeaderMessage, *, wait: bool, attach: exchange.Attach | None = None, streaming: bool = False
) -> exchange.Send:
    """The exchange's send for a start (a new task under the Leader's id) or a continue."""
    stored = message.stored()
    start = message.command == "start"
    timeout = settings.AIP_RESPONSE_TIMEOUT
    if start and (asked := message.response_timeout()) is not None:
        timeout = min(timeout, asked)
    return exchange.Send(
        message=stored if start else replace(stored, task_id=message.task_id),
        dialect=Dialect.AIP_1_0,
        accepted=[],
        history_length=0,
        return_immediately=not wait,
        metadata={},
        push=None,
        client_task_id=message.task_id if start else None,
        bare_replies=False,
        timeout=timeout,
        until=TERMINAL,
        await_first_move=streaming,
        limits=message.limits() if start else None,
        attach=attach,
    )


async def command(call: Call, raw: Any, *, wait: bool = True, where: str = "params.message") -> dict[str, Any]:
    """Apply one Leader message (an rpc's, or a group's) and answer with the task as it is
    then. `wait`: a start or continue waits for the task to settle (AIP_RESPONSE_TIMEOUT, or
    the Leader's responseTimeout if shorter); group mode answers at once."""
    message = codec.decode_message(raw, where)
    if message.command == "re-stream":
        raise UnsupportedOperation("re-stream resumes a stream: send it with the stream method")
    return await apply(call, message, wait=wait)


async def apply(
    call: Call, message: LeaderMessage, *, wait: bool = True, attach: exchange.Attach | None = None
) -> dict[str, Any]:
    task_id = message.task_id
    _id_check(call, task_id)
    found = await _found(call, task_id)
    if message.command == "start":
        if found is None or _applies(found, contract.Op.START):
            try:
                return await _answered(await exchange.send(call, _send(message, wait=wait, attach=attach)))
            except UnsupportedOperation:
                pass  # another start of the same id won the race: this one is ignored
        return await task_json(call, task_id)
    if found is None:
        raise _not_found(task_id)
    if message.command == "continue":
        if _applies(found, contract.Op.SEND):
            try:
                return await _answered(await exchange.send(call, _send(message, wait=wait)))
            except UnsupportedOperation:
                pass  # the task moved on meanwhile (the Leader canceled it): ignored
        return await task_json(call, task_id)
    # The command's message joins the history of AIP's own tasks only.
    stored = message.stored() if contract.keeps_command_messages(found[1]) else None
    if message.command == "cancel":
        reason = "canceled by the leader"
        admit = contract.admit(AIP, contract.Op.CANCEL)
        await _on_task(call, task_id, services.task_cancel, admit=admit, reason=reason, message=stored)
        return await task_json(call, task_id)
    if message.command == "complete":
        admit = contract.admit(AIP, contract.Op.COMPLETE)
        await _on_task(call, task_id, services.task_confirm, admit=admit, message=stored)
        return await task_json(call, task_id)
    # get: the message joins the history it asks for (the seed's example shows it there).
    params = codec.get_params(message)
    if stored is not None:
        await _on_task(call, task_id, services.message_record, message=stored)
    return await task_json(call, task_id, get=params)


async def _on_task(call: Call, task_id: str, service: Callable[..., Any], **kwargs: Any) -> None:
    """Run a command's service on the caller's task. The contract's refusal (`admit`) says the
    command does not apply in the task's state, which the seed has ignored, not refused: so is
    any other UnsupportedOperation or TaskNotCancelable."""
    try:
        await dbcalls.run(service, agent=call.agent, principal=call.principal, task_id=task_id, **kwargs)
    except TaskNotFound:
        raise _not_found(task_id) from None
    except (UnsupportedOperation, TaskNotCancelable):
        if "admit" not in kwargs:
            raise


# --- streams ----------------------------------------------------------------------------


async def _one_task(call: Call, task_id: str) -> EventStream:
    """A stream of one event, the task as it is (a command that needs no more), then the end."""
    found = await dbcalls.run(selectors.task_snapshot, agent=call.agent, principal=call.principal, task_id=task_id)
    if found is None:
        raise _not_found(task_id)
    view, seq = found

    async def items() -> AsyncGenerator[Any, None]:
        yield seq, view

    return EventStream(items(), AsyncExitStack())


async def stream(call: Call, raw: Any) -> EventStream:
    """A command whose answer streams: a start or continue streams the task's events until it
    is over (the seed's closing rules: the Partner ends the stream when the task ends, however
    it ends); re-stream replays the events after lastEventSeq (none given: all), then follows
    live; any other command streams the task once, as that command left it."""
    exchange.require_streaming(call.agent)
    message = codec.decode_message(raw, "params.message")
    task_id = message.task_id
    if message.command == "re-stream":
        after = opt_int(
            message.command_params, "lastEventSeq", "params.message.commandParams", minimum=0, maximum=2**53
        )
        if await _found(call, task_id) is None:
            raise _not_found(task_id)
        return await exchange.subscribe(call, task_id, acting=AIP, resume_after=after or 0, until=TERMINAL)
    found = await _found(call, task_id)
    if message.command == "start" and found is None:
        _id_check(call, task_id)
        return await exchange.send_streaming(call, _send(message, wait=True, streaming=True))
    if message.command == "continue" and found is not None and _applies(found, contract.Op.SEND):
        return await exchange.send_streaming(call, _send(message, wait=True, streaming=True))
    if message.command in ("cancel", "complete", "get"):
        await apply(call, message)
    elif found is None:
        raise _not_found(task_id)
    return await _one_task(call, task_id)
