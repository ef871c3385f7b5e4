"""`manage.py aip_groups`: the group runner (groups/runner.py, docs/groups.md). One is enough
per deployment; it runs until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

import aiormq
from django.core.management.base import BaseCommand

from groups.runner import Runner

log = logging.getLogger("groups.runner")


def _quiet_restores(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """aio-pika's robust channels try to reopen while their connection is still away, and
    leave that failure in a task nobody awaits; the connection restores them once it is back.
    One line for it, not asyncio's traceback."""
    if isinstance(context.get("exception"), aiormq.exceptions.ChannelInvalidStateError):
        log.info("group runner: a channel waits for its connection to come back")
        return
    loop.default_exception_handler(context)


class Command(BaseCommand):
    help = "Consume the AIP groups hosted agents have joined (one consumer per active membership)."

    def handle(self, *args: Any, **options: Any) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.set_exception_handler(_quiet_restores)
        log.info("group runner: started")
        self.stdout.write("group runner: started", ending="\n")
        self.stdout.flush()
        await Runner().run(stop)
        log.info("group runner: stopped")
