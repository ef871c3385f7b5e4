"""How `serve` stops on signals, with the servers replaced by ones whose graceful stop would
hang: one SIGTERM waits for the drain; a second, even one that came with the first, stops at
once; either way the drain is awaited before `serve` returns."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from protocols import grpc_server


class HangingServer:
    """A grpc.aio.Server stand-in whose graceful stop ends only when stop(0) is called."""

    def __init__(self) -> None:
        self.cut = asyncio.Event()
        self.stops: list[float | None] = []

    async def stop(self, grace: float | None) -> None:
        self.stops.append(grace)
        if grace:
            await self.cut.wait()
        else:
            self.cut.set()


class Health:
    async def enter_graceful_shutdown(self) -> None:
        pass


def serve_until(signals: int, *, settings) -> HangingServer:
    settings.SHUTDOWN_GRACE = 60
    server = HangingServer()

    async def start(hosts, port):
        return grpc_server.Running([server], Health(), [port])

    def ready(running):
        for _ in range(signals):
            os.kill(os.getpid(), signal.SIGTERM)

    async def scenario():
        original = grpc_server.start
        grpc_server.start = start
        try:
            await asyncio.wait_for(grpc_server.serve(["127.0.0.1"], 1, ready=ready), 1.5)
        finally:
            grpc_server.start = original

    asyncio.run(scenario())
    return server


def test_two_sigterms_that_come_together_stop_at_once_without_the_grace(settings):
    server = serve_until(2, settings=settings)
    assert sorted(server.stops) == [0, 60]  # the drain began and was cut short


def test_one_sigterm_waits_for_the_drain(settings):
    with pytest.raises(TimeoutError):
        serve_until(1, settings=settings)
