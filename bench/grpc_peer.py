#!/usr/bin/env python3
"""The gRPC peer: the echo agent of ../shared/bench/peer_a2a_sdk.py on the a2a-sdk's own gRPC
server (its GrpcHandler over DefaultRequestHandler), with the SDK's Postgres task store as the
HTTP peer has it. Runs in the peer's venv (bench/peer-requirements.txt), one grpc.aio process:

    bench/.peer-venv/bin/python bench/grpc_peer.py --port 9101 --dsn postgresql+asyncpg://...

Prints "READY" once it listens on 127.0.0.1. Same echo semantics as the HTTP peer (a Task whose
artifact is "echo: " + the user's text, then completed), so the ratio compares servers, not agents.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import warnings

import grpc
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler
from a2a.server.tasks import DatabaseTaskStore, InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, a2a_pb2_grpc

warnings.filterwarnings("ignore", message="This declarative base already contains")


class EchoExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.add_artifact(
            [new_text_part("echo: " + context.get_user_input())],
            artifact_id="echo-" + task.id,
            name="echo",
            last_chunk=True,
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


async def serve(port: int, dsn: str, store_kind: str) -> None:
    card = AgentCard(
        name="bench-echo-peer",
        description="Echo agent on the official a2a-sdk's gRPC server (benchmark peer)",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=f"127.0.0.1:{port}", protocol_binding="GRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes the user text", tags=["echo"])],
    )
    if store_kind == "db":
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(dsn, pool_size=10, max_overflow=10)
        store = DatabaseTaskStore(engine, create_table=True, table_name="grpc_tasks")
        await store.initialize()
        async with engine.begin() as conn:
            await conn.execute(text('TRUNCATE TABLE "grpc_tasks"'))
    else:
        store = InMemoryTaskStore()
    handler = DefaultRequestHandler(agent_executor=EchoExecutor(), task_store=store, agent_card=card)
    server = grpc.aio.server()
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"READY 127.0.0.1:{port}", flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    await server.stop(2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=9101)
    p.add_argument("--store", choices=["db", "memory"], default="db")
    p.add_argument("--dsn", default="postgresql+asyncpg://postgres@127.0.0.1:5432/bench_peer")
    a = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(a.port, a.dsn, a.store))


if __name__ == "__main__":
    main()
