"""Waiting for a task to settle without holding a thread: await hints, re-read the database."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, TypeVar

from django.conf import settings

from . import dbcalls, hints, selectors
from .lifecycle import SETTLED

T = TypeVar("T")


async def wait_for(
    watch: hints.Watch,
    read: Callable[[], tuple[str | None, T]],
    *,
    timeout: float,
    read_first: bool = True,
) -> T:
    """Call `read()` (on the ORM executor) until the state it reports is settled — terminal or
    interrupted — or `timeout` passes; return the last value it gave.

    `watch` must have been registered before whatever the caller waits for could happen: then
    a change that commits at any time still wakes us. Reads happen only on a hint that may
    settle the task and every `HINT_FALLBACK_POLL` seconds, so a lost hint costs that long
    at most. `read_first=False` skips the first read when the caller knows the task is not
    settled yet (it has just queued it).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    value: Any = None
    have_value = False
    if read_first:
        state, value = await dbcalls.run(read)
        have_value = True
        if state is None or state in SETTLED:
            return value
    while (remaining := deadline - loop.time()) > 0:
        hinted = await watch.wait(min(remaining, settings.HINT_FALLBACK_POLL))
        # Hints that all name a state which does not settle the task (an artifact chunk,
        # "working") cannot end the wait: skip the read. Anything else, read.
        if hinted and watch.states and all(s and s not in SETTLED for s in watch.states):
            continue
        state, value = await dbcalls.run(read)
        have_value = True
        if state is None or state in SETTLED:
            return value
    if not have_value:
        _, value = await dbcalls.run(read)
    return value


def _state_of(task_id: Any) -> tuple[str | None, str | None]:
    row = selectors.task_state(task_id)
    state = row[0] if row else None
    return state, state


async def wait_until_settled(task_id: Any, *, timeout: float) -> str | None:
    """Wait until the task is terminal or interrupted (or `timeout` passes); return its state."""
    async with hints.watch(str(task_id)) as watch:
        return await wait_for(watch, lambda: _state_of(task_id), timeout=timeout)
