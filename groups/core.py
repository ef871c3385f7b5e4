"""What group mode uses of the AIP core (`protocols.dialects.aip`), in one place: applying a
Leader's command (`flow.command`), a task as an AIP Task (`codec.encode_task`), and the
registration of the `group` method (`methods.register_group`).

The core and this app are written side by side; until the core is installed the imports
below find nothing, group mode is off (`available()`), and the tests give their own doubles.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from protocols.exchange import Call
from tasks_app.domain import TaskView

from .errors import GroupNotSupported

try:
    from protocols.dialects.aip import codec, flow, methods
except ImportError:  # the AIP core is not installed yet
    codec = flow = methods = None  # type: ignore[assignment]

GroupHandler = Callable[[Call, dict[str, Any]], Awaitable[dict[str, Any]]]


def available() -> bool:
    return flow is not None and codec is not None


def register(handler: GroupHandler) -> None:
    """Serve the AIP `group` method with `handler` (without the core there is no AIP endpoint)."""
    if methods is not None:
        methods.register_group(handler)


async def command(call: Call, message: dict[str, Any]) -> dict[str, Any]:
    """Apply one Leader's Message for the member in `call`; the Task as AIP shows it. Never
    waits for the agent: a group's consumer goes on with its queue."""
    if flow is None:
        raise GroupNotSupported("the AIP core is not installed")
    result: dict[str, Any] = await flow.command(call, message, wait=False)
    return result


def encode_task(view: TaskView) -> dict[str, Any]:
    if codec is None:
        raise GroupNotSupported("the AIP core is not installed")
    encoded: dict[str, Any] = codec.encode_task(view)
    return encoded
