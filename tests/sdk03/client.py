"""Run by the a2a-sdk 0.3 venv's Python, never imported by the suite (whose venv holds a2a-sdk
1.x): the official 0.3 client discovers an agent by its host name alone and runs send,
stream, get, cancel and resubscribe; one JSON object per line says what it saw.

    python client.py http://conformance.localhost:PORT 127.0.0.1

The second argument is the address the name stands for: `*.localhost` names loopback (RFC
6761) though this machine's resolver may not say so; every connection goes there, while the
URLs, the Host header and the card keep the name (as curl and browsers do for *.localhost).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    Message,
    MessageSendConfiguration,
    Part,
    Role,
    Task,
    TaskIdParams,
    TaskQueryParams,
    TextPart,
    TransportProtocol,
)


class Pinned(httpx.AsyncHTTPTransport):
    """Connects to `address` whatever the URL's host, which stays in the Host header."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.url = request.url.copy_with(host=self.address)
        return await super().handle_async_request(request)


def message(prefix: str) -> Message:
    return Message(
        message_id=f"{prefix}-{uuid.uuid4()}",
        role=Role.user,
        parts=[Part(root=TextPart(text="hello"))],
    )


def report(step: str, **seen) -> None:
    print(json.dumps({"step": step, **seen}), flush=True)


def state(task: Task) -> str:
    return task.status.state.value


async def main(base_url: str, address: str) -> None:
    async with httpx.AsyncClient(transport=Pinned(address), timeout=30) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        report("card", url=card.url, protocol_version=card.protocol_version, transport=card.preferred_transport)

        def client(streaming: bool, *, polling: bool = False):
            config = ClientConfig(
                streaming=streaming,
                polling=polling,
                httpx_client=http,
                supported_transports=[TransportProtocol.jsonrpc],
            )
            return ClientFactory(config).create(card)

        plain = client(False)
        [(task, _)] = [event async for event in plain.send_message(message("tck-artifact-text"))]
        report("send", id=task.id, state=state(task), artifacts=[a.name for a in task.artifacts or []])

        got = await plain.get_task(TaskQueryParams(id=task.id))
        report("get", id=got.id, state=state(got))

        streamed = [event async for event in client(True).send_message(message("tck-stream-001"))]
        last_task, _ = streamed[-1]
        kinds = [type(update).__name__ if update is not None else "Task" for _, update in streamed]
        report("stream", id=last_task.id, state=state(last_task), events=kinds)

        [(waiting, _)] = [event async for event in plain.send_message(message("tck-input-required"))]
        canceled = await plain.cancel_task(TaskIdParams(id=waiting.id))
        report("cancel", before=state(waiting), id=canceled.id, state=state(canceled))

        background = MessageSendConfiguration(blocking=False)
        sent = plain.send_message(message("test-resubscribe-message-id"), configuration=background)
        [(slow, _)] = [event async for event in sent]
        # The task works for seconds: once the stream has shown it, it is canceled, which the
        # stream shows as its last event.
        updates = []
        async for event in client(True).resubscribe(TaskIdParams(id=slow.id)):
            updates.append(event)
            if len(updates) == 1:
                await plain.cancel_task(TaskIdParams(id=slow.id))
        final_task, _ = updates[-1]
        report("resubscribe", before=state(slow), id=final_task.id, state=state(final_task), events=len(updates))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
