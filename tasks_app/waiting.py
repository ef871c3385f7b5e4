"""Waiting for a task to settle without holding a thread: await hints, re-read the database."""

from __future__ import annotations

import asyncio
from typing import Any

from django.conf import settings

from . import dbcalls, hints, selectors
from .lifecycle import SETTLED


async def wait_until_settled(task_id: Any, *, timeout: float) -> str | None:
    """Wait until the task is terminal or interrupted (or `timeout` passes); return its state.

    The watch is registered before the first read, so a change that commits in between
    still wakes us; and every `HINT_FALLBACK_POLL` seconds we read anyway, so a hint lost
    on the way costs that long at most.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with hints.watch(str(task_id)) as watch:
        row = await dbcalls.run(selectors.task_state, task_id)
        while row is not None and row[0] not in SETTLED:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            hinted = await watch.wait(min(remaining, settings.HINT_FALLBACK_POLL))
            # Hints that all name a state which does not settle the task (an artifact chunk,
            # "working") cannot end the wait: skip the read. Anything else, read.
            if hinted and watch.states and all(s and s not in SETTLED for s in watch.states):
                continue
            row = await dbcalls.run(selectors.task_state, task_id)
        return row[0] if row else None
