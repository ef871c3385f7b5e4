"""A real A2A agent built on the official `a2a-sdk` server, on 127.0.0.1 and an ephemeral port,
for the fronted-agent tests: the upstream our `a2a-upstream` executor calls.

It serves either A2A 1.0 (a 1.0 card with one JSON-RPC 1.0 interface) or only A2A 0.3 (a 0.3
card, the SDK's 0.3 JSON-RPC adapter, and the 1.0 method names refused as a 0.3 server would).
uvicorn runs it on a thread of the test process, so a test sees what the agent saw: every
JSON-RPC call (method and headers) and every execute and cancel of its executor.

What the agent does depends on the first word of the user's text:

    echo <text>   working, the artifact "echo: <text>" in three chunks, completed
    drip <text>   as echo, with 0.3 s before each chunk (long enough to watch it stream)
    slow          working, then waits (2.5 s at most) for a cancel
    stall         working, then waits (10 s at most) for a cancel: past the live worker's time limit
    ask           input-required "Which colour?"; the follow-up completes with "colour: <text>"
    fail          failed "the upstream could not do it"
    reject        rejected
    auth          auth-required
    cancel        canceled by the agent itself
    reply <text>  a bare Message "reply: <text>"
    files         an artifact of a text, a raw (bytes), a url and a data part, completed
    boom          raises (the SDK fails the task)
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from a2a.compat.v0_3 import conversions
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Role
from google.protobuf import struct_pb2
from google.protobuf.json_format import ParseDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

CHUNKS = 3
SLOW_FOR = 2.5  # under the live worker's soft time limit (3 s)
V1_METHODS = {"SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "SubscribeToTask", "ListTasks"}
STREAMING_METHODS = {"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"}


@dataclass
class Seen:
    """What the upstream saw, for the tests to read (appended from the server's thread)."""

    # {"method", "version", "authorization", "x-api-key", "extensions", "metadata" (the params')}
    calls: list[dict[str, Any]] = field(default_factory=list)
    card_requests: list[dict[str, str]] = field(default_factory=list)  # {"authorization", "x-api-key"}
    executions: list[tuple[str, str]] = field(default_factory=list)  # (task id, user text)
    cancelled: list[str] = field(default_factory=list)  # task ids whose cancel the executor ran
    cancel_seen: threading.Event = field(default_factory=threading.Event)

    def methods(self) -> list[str]:
        return [c["method"] for c in self.calls]

    def wait_for_cancel(self, timeout: float = 5.0) -> list[str]:
        self.cancel_seen.wait(timeout)
        return list(self.cancelled)


class ScriptedAgent(AgentExecutor):
    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        text = context.get_user_input()
        word, _, rest = text.partition(" ")
        continuing = context.current_task is not None
        task = context.current_task or new_task_from_user_message(context.message)
        self.seen.executions.append((task.id, text))
        if word == "reply":
            await event_queue.enqueue_event(
                new_text_message(f"reply: {rest}", context_id=task.context_id, role=Role.ROLE_AGENT)
            )
            return
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)

        def say(words: str):
            return updater.new_agent_message([new_text_part(words)])

        if continuing:  # the answer to "ask"
            await updater.add_artifact([new_text_part(f"colour: {text}")], artifact_id="answer", name="answer")
            await updater.complete(say("thanks"))
        elif word in ("echo", "drip"):
            await updater.start_work(say("on it"))
            for i in range(CHUNKS):
                if word == "drip":
                    await asyncio.sleep(0.3)
                await updater.add_artifact(
                    [new_text_part(f"echo: {rest}" if i == 0 else f" [{i}]")],
                    artifact_id="echo-" + task.id,
                    name="echo.txt",
                    append=i > 0,
                    last_chunk=i == CHUNKS - 1,
                )
            await updater.complete(say("done"))
        elif word in ("slow", "stall"):
            await updater.start_work(say("taking my time"))
            await asyncio.sleep(SLOW_FOR if word == "slow" else 10)  # a cancel ends this sleep
            await updater.complete(say("too late"))
        elif word == "ask":
            await updater.requires_input(say("Which colour?"))
        elif word == "fail":
            await updater.failed(say("the upstream could not do it"))
        elif word == "reject":
            await updater.reject(say("not for me"))
        elif word == "auth":
            await updater.requires_auth(say("sign in first"))
        elif word == "cancel":
            await updater.cancel(say("changed my mind"))
        elif word == "files":
            data = struct_pb2.Value()
            ParseDict({"n": 1, "ok": True, "list": ["a"]}, data)
            parts = [
                Part(text="a text"),
                Part(raw=b"\x00\x01binary", media_type="application/octet-stream", filename="blob.bin"),
                Part(url="https://files.example.test/report.pdf", media_type="application/pdf", filename="report.pdf"),
                Part(data=data),
            ]
            await updater.add_artifact(parts, artifact_id="files", name="files")
            await updater.complete()
        elif word == "boom":
            raise RuntimeError("the upstream agent broke")
        else:
            await updater.failed(say(f"unknown script {word!r}"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        self.seen.cancelled.append(context.task_id)
        self.seen.cancel_seen.set()
        await TaskUpdater(event_queue, context.task_id, context.context_id or "").cancel()


def _card(url: str, *, version: str, streaming: bool) -> AgentCard:
    return AgentCard(
        name="scripted upstream",
        description="An a2a-sdk agent that follows a script",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version)],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="script", name="script", description="follows a script", tags=["test"])],
    )


class Upstream:
    """One SDK server: `version` "1.0" or "0.3"; `streaming` as its card says."""

    def __init__(self, version: str = "1.0", *, streaming: bool = True) -> None:
        self.version = version
        self.seen = Seen()
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        # Under a path of its own: a port the system hands out again later is a new agent to
        # the card cache of the worker's processes.
        self.prefix = f"/{uuid.uuid4().hex[:12]}"
        self.base = f"http://127.0.0.1:{self.port}{self.prefix}"
        card = _card(f"{self.base}/rpc", version=version, streaming=streaming)
        handler = DefaultRequestHandler(
            agent_executor=ScriptedAgent(self.seen), task_store=InMemoryTaskStore(), agent_card=card
        )
        if version == "0.3":
            legacy = conversions.to_compat_agent_card(card).model_dump(by_alias=True, exclude_none=True, mode="json")

            async def card_route(request: Request) -> JSONResponse:
                return JSONResponse(legacy)

            routes = [Route(f"{self.prefix}/.well-known/agent-card.json", card_route, methods=["GET"])]
        else:
            routes = create_agent_card_routes(card, card_url=f"{self.prefix}/.well-known/agent-card.json")
        routes += create_jsonrpc_routes(handler, rpc_url=f"{self.prefix}/rpc", enable_v0_3_compat=version == "0.3")
        self.app = _Recorder(Starlette(routes=routes), self.seen, only_0_3=version == "0.3")
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def require_token(self, token: str) -> None:
        """Answer HTTP 401 to any call without `Authorization: Bearer <token>`."""
        self.app.token = token

    def cut_streams(self, *, after: int, times: int) -> None:
        """Drop the connection of the next `times` streams after `after` events each (the
        task goes on: a stream is one reader of it)."""
        self.app.cut_after, self.app.cuts_left = after, times

    @property
    def card_url(self) -> str:
        return f"{self.base}/.well-known/agent-card.json"

    def start(self) -> Upstream:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "the upstream did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()


class _Cut(Exception):
    pass


class _Recorder:
    """Records each JSON-RPC call and card request; as a 0.3-only server, refuses the 1.0 method names; cuts
    streams short when told to."""

    def __init__(self, app: Any, seen: Seen, *, only_0_3: bool) -> None:
        self.app, self.seen, self.only_0_3 = app, seen, only_0_3
        self.cut_after, self.cuts_left = 0, 0
        self.token = ""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":  # the card
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.seen.card_requests.append({name: headers.get(name, "") for name in ("authorization", "x-api-key")})
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            request = {}
        method = request.get("method", "") if isinstance(request, dict) else ""
        self.seen.calls.append(
            {
                "method": method,
                "version": headers.get("a2a-version", ""),
                "authorization": headers.get("authorization", ""),
                "x-api-key": headers.get("x-api-key", ""),
                "extensions": headers.get("a2a-extensions", "") or headers.get("x-a2a-extensions", ""),
                "metadata": (request.get("params") or {}).get("metadata") if isinstance(request, dict) else None,
            }
        )
        if self.token and headers.get("authorization") != f"Bearer {self.token}":
            await send({"type": "http.response.start", "status": 401, "headers": [(b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": b""})
            return
        if self.only_0_3 and method in V1_METHODS:
            answer = orjson.dumps(
                {"jsonrpc": "2.0", "id": request.get("id"), "error": {"code": -32601, "message": "Method not found"}}
            )
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": answer})
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if method not in STREAMING_METHODS or self.cuts_left <= 0:
            await self.app(scope, replay, send)
            return
        self.cuts_left -= 1
        events = 0

        async def cutting(message: dict) -> None:
            nonlocal events
            await send(message)
            if message["type"] == "http.response.body":
                events += message.get("body", b"").count(b"data:")
                if events >= self.cut_after:
                    raise _Cut

        try:
            await self.app(scope, replay, cutting)
        except _Cut:
            pass  # the response never ends: the server closes the connection mid-body
