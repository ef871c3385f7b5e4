"""What group mode uses of the AIP dialect (`protocols.dialects.aip`), in one place: applying a
Leader's command (`flow.command`), a task as an AIP Task (`codec.encode_task`), and the
registration of the `group` method (`methods.register_group`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from protocols.dialects.aip import codec, flow, methods
from protocols.exchange import Call
from tasks_app.domain import TaskView

GroupHandler = Callable[[Call, dict[str, Any]], Awaitable[dict[str, Any]]]


def register(handler: GroupHandler) -> None:
    """Serve the AIP `group` method with `handler`."""
    methods.register_group(handler)


async def command(call: Call, message: dict[str, Any]) -> dict[str, Any]:
    """Apply one Leader's Message from the group for the member in `call`; the Task as AIP
    shows it. Never waits for the agent: a group's consumer goes on with its queue. A bad
    message is InvalidParams naming its field below `message`."""
    return await flow.command(call, message, wait=False, where="message")


def encode_task(view: TaskView) -> dict[str, Any]:
    return codec.encode_task(view)
