"""Waiting for a task to settle without holding a thread: await hints, re-read the database."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

from django.conf import settings

from . import dbcalls, hints, selectors
from .lifecycle import SETTLED, TaskState

# States a hint may announce that cannot end a wait; a hint saying anything else (a settling
# state, nothing, something unknown) is worth a read.
_NOT_SETTLING = frozenset(TaskState.values) - SETTLED


async def wait_until_settled(
    task_id: Any,
    *,
    timeout: float,
    watch: hints.Watch | None = None,
    read_first: bool = True,
    trust_settling_hints: bool = True,
) -> str | None:
    """Wait until the task is terminal or interrupted, or `timeout` passes; return its state
    (the last one known, None if the task is gone).

    Pass a `watch` registered before whatever you wait for could happen (then no change can
    slip by unseen, and `read_first=False` spares the first read); without one, a watch is
    registered here before the first read. Hints carry the state they announce:
    - a settling state ends the wait without a read: hints go out only after their change
      committed, and the caller reads the task anyway to answer. Not so for a follow-up
      (`trust_settling_hints=False`): the hint of the run before it, which left the task
      waiting for input, may still be on its way, so there a settling hint costs a read;
    - states that cannot settle the task (a chunk, "working") cost no read;
    - anything else, and every `HINT_FALLBACK_POLL` seconds, costs one cheap state read, so
      a lost hint costs that long at most.
    """
    async with AsyncExitStack() as stack:
        watching = watch if watch is not None else await stack.enter_async_context(hints.watch(str(task_id)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        state = await dbcalls.run(selectors.task_state, task_id) if read_first else None
        if read_first and (state is None or state in SETTLED):
            return state
        while (remaining := deadline - loop.time()) > 0:
            hinted = await watching.wait(min(remaining, settings.HINT_FALLBACK_POLL))
            if hinted and watching.states:
                settled = [s for s in watching.states if s in SETTLED]
                if settled and trust_settling_hints:
                    return settled[-1]
                if all(s in _NOT_SETTLING for s in watching.states):
                    continue
            state = await dbcalls.run(selectors.task_state, task_id)
            if state is None or state in SETTLED:
                return state
        return state
