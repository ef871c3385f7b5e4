"""`manage.py aip_groups`: the group runner (groups/runner.py, docs/groups.md). One is enough
per deployment; it runs until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from django.core.management.base import BaseCommand

from groups.runner import Runner

log = logging.getLogger("groups.runner")


class Command(BaseCommand):
    help = "Consume the AIP groups hosted agents have joined (one consumer per active membership)."

    def handle(self, *args: Any, **options: Any) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("group runner: started")
        self.stdout.write("group runner: started", ending="\n")
        self.stdout.flush()
        await Runner().run(stop)
        log.info("group runner: stopped")
