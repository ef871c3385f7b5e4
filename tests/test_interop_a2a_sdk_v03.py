"""A2A 0.3 across the real thing: the official a2a-sdk (1.3.0) client in its 0.3 compatibility
mode drives the live server (daphne, a Celery worker, Postgres, Redis) over JSON-RPC; and raw
0.3 streams (`message/stream`, `tasks/resubscribe`) are read as they arrive, `final` checked.

The SDK client is built as its users build one: resolve the card (asked for in 0.3, see
docs/dialects.md), let `ClientFactory` pick the card's interface; the card names 0.3, so the
factory takes the SDK's `CompatJsonRpcTransport`, which sends 0.3's slash methods with
`A2A-Version: 0.3` and reads 0.3's answers with the SDK's 0.3 models (strictly: each answer is
also read again by those models, so a field the SDK would drop fails).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import orjson
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.helpers import get_artifact_text, get_message_text, new_text_message
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskPushNotificationConfig,
    TaskState,
)

from tests.conftest import make_agent, user_message_v03

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def live(live_each_mode):
    """Each test here runs against both modes: Celery workers, and the embedded mode's threads."""
    return live_each_mode


# The 0.3 model each JSON-RPC method's result must parse as.
STRICT_TYPES: dict[str, Any] = {
    "message/send": types_v03.Task,
    "tasks/get": types_v03.Task,
    "tasks/cancel": types_v03.Task,
    "tasks/pushNotificationConfig/set": types_v03.TaskPushNotificationConfig,
    "tasks/pushNotificationConfig/get": types_v03.TaskPushNotificationConfig,
}


def agent_url(live, slug: str) -> str:
    return f"{live.url}/agents/acme/{slug}/"


def _strict(problems: list[str], methods: list[str]):
    """Every JSON-RPC request goes out as 0.3 (slash method, A2A-Version: 0.3), and its result
    parses as the 0.3 model, whose extra members would otherwise pass silently."""

    async def check(response: httpx.Response) -> None:
        request = response.request
        if request.method != "POST" or response.headers.get("content-type", "").startswith("text/event-stream"):
            if request.method == "POST":
                methods.append(orjson.loads(request.content)["method"])
            return
        await response.aread()
        method = orjson.loads(request.content)["method"]
        methods.append(method)
        assert request.headers["A2A-Version"] == "0.3", request.headers
        payload = response.json()
        model = STRICT_TYPES.get(method)
        if model is None or "result" not in payload or payload["result"] is None:
            return
        if method == "message/send" and payload["result"].get("kind") == "message":
            model = types_v03.Message
        extra = set(payload["result"]) - {f.alias or name for name, f in model.model_fields.items()}
        if extra:
            problems.append(f"{method}: members the 0.3 model does not know: {sorted(extra)}")
        model.model_validate(payload["result"])

    return check


@asynccontextmanager
async def sdk_client(
    live, slug: str, key: str, *, streaming: bool = False
) -> AsyncIterator[tuple[Client, AgentCard, list[str]]]:
    problems: list[str] = []
    methods: list[str] = []
    async with httpx.AsyncClient(
        headers={"X-API-Key": key}, timeout=30, event_hooks={"response": [_strict(problems, methods)]}
    ) as http:
        card = await A2ACardResolver(http, agent_url(live, slug)).get_agent_card(
            http_kwargs={"headers": {"A2A-Version": "0.3"}}
        )
        config = ClientConfig(
            streaming=streaming, polling=False, httpx_client=http, supported_protocol_bindings=["JSONRPC"]
        )
        async with ClientFactory(config).create(card) as client:
            assert isinstance(client._transport, CompatJsonRpcTransport)  # noqa: SLF001 - which one it chose
            yield client, card, methods
    assert not problems, problems


async def send(client: Client, text: str, *, task_id: str | None = None) -> Task:
    message = new_text_message(text, role=Role.ROLE_USER, task_id=task_id)
    replies = [r async for r in client.send_message(SendMessageRequest(message=message))]
    assert len(replies) == 1 and replies[0].HasField("task"), replies
    return replies[0].task


def run(scenario) -> None:
    asyncio.run(scenario())


# --- the SDK's 0.3 client ----------------------------------------------------------------------


def test_the_sdk_resolves_the_0_3_card_and_picks_its_0_3_json_rpc_interface(live, echo_agent, alice_key):
    async def scenario():
        async with sdk_client(live, "echo", alice_key) as (_, card, _methods):
            assert [(i.protocol_binding, i.protocol_version, i.url) for i in card.supported_interfaces][0] == (
                "JSONRPC",
                "0.3.0",
                agent_url(live, "echo"),
            )
            assert card.capabilities.streaming and card.capabilities.push_notifications
            scheme = card.security_schemes["apiKey"].api_key_security_scheme
            assert (scheme.location, scheme.name) == ("header", "X-API-Key")

    run(scenario)


def test_send_get_and_cancel_through_the_sdks_0_3_client(live, echo_agent, writer_agent, alice_key, bob_key):
    async def scenario():
        async with sdk_client(live, "echo", alice_key) as (client, _, methods):
            sent = await send(client, "hello in 0.3")
            assert sent.status.state == TaskState.TASK_STATE_COMPLETED
            assert "".join(get_artifact_text(a, delimiter="") for a in sent.artifacts) == "echo: hello in 0.3"
            fetched = await client.get_task(GetTaskRequest(id=sent.id))
            assert (fetched.id, fetched.context_id, fetched.status.state) == (
                sent.id,
                sent.context_id,
                sent.status.state,
            )
            assert [get_message_text(m) for m in fetched.history] == ["hello in 0.3"]
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id=str(uuid.uuid4())))
            assert methods[:2] == ["message/send", "tasks/get"]
        async with sdk_client(live, "echo", bob_key) as (bob, _, _methods):
            with pytest.raises(TaskNotFoundError):
                await bob.get_task(GetTaskRequest(id=sent.id))
        async with sdk_client(live, "writer", alice_key) as (client, _, methods):
            waiting = await send(client, "write something")
            assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            done = await send(client, "a haiku about the sea", task_id=waiting.id)
            assert done.id == waiting.id and done.status.state == TaskState.TASK_STATE_COMPLETED
            other = await send(client, "write")
            canceled = await client.cancel_task(CancelTaskRequest(id=other.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=other.id))
            assert "tasks/cancel" in methods

    run(scenario)


def test_stream_and_resubscribe_through_the_sdks_0_3_client(live, writer_agent, alice_key):
    async def scenario():
        async with sdk_client(live, "writer", alice_key, streaming=True) as (client, _, methods):
            message = new_text_message("a haiku about snow", role=Role.ROLE_USER)
            events = [e async for e in client.send_message(SendMessageRequest(message=message))]
            kinds = [e.WhichOneof("payload") for e in events]
            assert kinds[0] == "task" and kinds[-1] == "status_update", kinds
            assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
            chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
            assert (chunks[0].append, chunks[-1].last_chunk) == (False, True)

            asked = [
                e
                async for e in client.send_message(
                    SendMessageRequest(message=new_text_message("write", role=Role.ROLE_USER))
                )
            ]
            assert asked[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            subscribed = client.subscribe(SubscribeToTaskRequest(id=asked[0].task.id))
            first = await anext(subscribed)
            assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            await client.cancel_task(CancelTaskRequest(id=asked[0].task.id))
            rest = [e async for e in subscribed]
            assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
            assert {"message/stream", "tasks/resubscribe"} <= set(methods)

    run(scenario)


def test_push_configs_through_the_sdks_0_3_client(live, echo_agent, alice_key, receiver):
    async def scenario():
        async with sdk_client(live, "echo", alice_key) as (client, _, methods):
            task = await send(client, "configure me")
            config = TaskPushNotificationConfig(task_id=task.id, id="cfg", url=receiver.url(), token="tok")
            created = await client.create_task_push_notification_config(config)
            assert (created.task_id, created.id, created.url, created.token) == (task.id, "cfg", receiver.url(), "tok")
            got = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="cfg")
            )
            assert got == created
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert list(listed.configs) == [created]
            await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="cfg")
            )
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert list(listed.configs) == []
            assert methods[1:5] == [
                "tasks/pushNotificationConfig/set",
                "tasks/pushNotificationConfig/get",
                "tasks/pushNotificationConfig/list",
                "tasks/pushNotificationConfig/delete",
            ]

    run(scenario)


def test_the_sdks_0_3_client_without_a_key_is_refused(live, echo_agent, alice_key):
    async def scenario():
        async with sdk_client(live, "echo", alice_key) as (client, _, _methods):
            client._transport.httpx_client.headers.pop("X-API-Key")  # noqa: SLF001 - the same client, keyless
            with pytest.raises(A2AClientError, match="401"):
                await send(client, "no key")

    run(scenario)


# --- raw 0.3 streams over daphne -------------------------------------------------------------------


@contextmanager
def stream(base: str, path: str, method: str, params: dict, *, key: str) -> Iterator[Iterator[tuple[int, dict]]]:
    """(id, result) of each event of a 0.3 SSE answer (no A2A-Version: what 0.3 clients send)."""
    headers = {"Accept": "text/event-stream", "X-API-Key": key}
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    with httpx.stream("POST", f"{base}{path}", json=body, headers=headers, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream"), response.read()

        def events():
            deadline, event_id = time.monotonic() + 30, None
            for line in response.iter_lines():
                assert time.monotonic() < deadline, "the stream did not end within 30 s"
                if line.startswith("id:"):
                    event_id = int(line[3:].strip())
                elif line.startswith("data:"):
                    payload = orjson.loads(line[5:].strip())
                    assert payload["jsonrpc"] == "2.0" and payload["id"] == body["id"], payload
                    yield event_id, payload["result"]

        yield events()


def describe(result: dict) -> str:
    if result["kind"] == "artifact-update":
        return f"chunk append={result['append']} last={result['lastChunk']}"
    if result["kind"] == "status-update":
        return f"status-update:{result['status']['state']} final={result['final']}"
    return f"{result['kind']}:{result['status']['state']}"


def test_a_live_0_3_stream_and_a_resubscription_end_with_final_on_the_other_process(live, tenant, alice_key):
    make_agent(tenant, "slowwriter", "writer", settings={"delay": 0.25, "paragraphs": 4})
    path = "/agents/acme/slowwriter/"
    with stream(
        live.urls[0], path, "message/stream", {"message": user_message_v03("a story about owls")}, key=alice_key
    ) as sender:
        first_id, first = next(sender)
        task_id = first["id"]
        with stream(live.urls[1], path, "tasks/resubscribe", {"id": task_id}, key=alice_key) as subscriber:
            from_sender = [(first_id, first), *sender]
            seen = list(subscriber)
    assert [describe(r) for _, r in from_sender] == [
        "task:submitted",
        "status-update:working final=False",
        "status-update:working final=False",
        "chunk append=False last=False",
        "chunk append=True last=False",
        "chunk append=True last=False",
        "chunk append=True last=True",
        "status-update:completed final=True",
    ]
    snapshot_id, snapshot = seen[0]
    assert snapshot["kind"] == "task" and snapshot["id"] == task_id
    assert seen[1:] == [(i, r) for i, r in from_sender if i > snapshot_id]
    assert seen[-1][1]["final"] is True


def test_a_live_0_3_stream_that_asks_for_input_ends_final_and_a_resubscription_goes_on_to_the_end(
    live, writer_agent, alice_key
):
    path = "/agents/acme/writer/"
    with stream(live.url, path, "message/stream", {"message": user_message_v03("write")}, key=alice_key) as events:
        got = [r for _, r in events]
    assert describe(got[-1]) == "status-update:input-required final=True"
    task_id = got[0]["id"]
    with stream(live.urls[1], path, "tasks/resubscribe", {"id": task_id}, key=alice_key) as subscriber:
        snapshot = next(subscriber)[1]
        assert snapshot["status"]["state"] == "input-required"
        # The subscription outlives the interruption: the follow-up's events arrive, then the end.
        follow_up = {"message": user_message_v03("a haiku about rain", taskId=task_id)}
        answer = httpx.post(
            f"{live.url}{path}",
            json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": follow_up},
            headers={"X-API-Key": alice_key},
            timeout=30,
        ).json()
        assert answer["result"]["status"]["state"] == "completed"
        rest = [describe(r) for _, r in subscriber]
    assert rest[-1] == "status-update:completed final=True"
    assert "status-update:submitted final=False" in rest and all("final=True" not in d for d in rest[:-1])
