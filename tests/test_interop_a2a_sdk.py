"""Interop: the official A2A Python client (a2a-sdk 1.3.0) drives the live server, over each
binding the card lists: every scenario runs once with the JSON-RPC transport and once with the
HTTP+JSON (REST) one.

Each scenario builds a client the way an SDK user would: resolve the agent card with the
SDK's resolver, let `ClientFactory` pick the card's 1.0 interface of the binding (streaming or
not, as the scenario asks), and then only call the SDK's own methods: send_message,
get_task, list_tasks, cancel_task, subscribe. Daphne and a real Celery worker serve the test database.
Every card and result is also parsed strictly, so a field the SDK would silently drop fails.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import orjson
import pytest
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    InMemoryContextCredentialStore,
)
from a2a.client.transports import JsonRpcTransport, RestTransport
from a2a.helpers import get_artifact_text, get_message_text, new_text_message
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Role,
    SendMessageRequest,
    SendMessageResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, VERSION_HEADER
from google.protobuf.json_format import ParseDict, ParseError

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def live(live_each_mode):
    """Each test here runs against both modes: Celery workers, and the embedded mode's threads."""
    return live_each_mode


COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
AMBIGUOUS_REQUEST = "Please write something for me."
STRICT_TYPES = {
    "card": AgentCard,
    "SendMessage": SendMessageResponse,
    "GetTask": Task,
    "ListTasks": ListTasksResponse,
    "CancelTask": Task,
}
# The method an HTTP+JSON route calls, by its HTTP method and the end of its path.
REST_ROUTES = [
    ("POST", re.compile(r"/message:send$"), "SendMessage"),
    ("GET", re.compile(r"/tasks/[^/]+$"), "GetTask"),
    ("GET", re.compile(r"/tasks$"), "ListTasks"),
    ("POST", re.compile(r"/tasks/[^/]+:cancel$"), "CancelTask"),
]
TRANSPORTS = {"JSONRPC": JsonRpcTransport, "HTTP+JSON": RestTransport}


@pytest.fixture(params=list(TRANSPORTS))
def binding(request) -> str:
    """The card's binding the SDK client is told to use."""
    return request.param


# --- the SDK side ------------------------------------------------------------------------


def agent_url(live, slug: str) -> str:
    return f"{live.url}/agents/acme/{slug}/"


@asynccontextmanager
async def sdk_client(
    live,
    slug: str,
    key: str | None,
    *,
    binding: str,
    interceptors: list | None = None,
    streaming: bool = False,
) -> AsyncIterator[tuple[Client, AgentCard]]:
    """An SDK client for one agent over `binding`: API key and A2A-Version as default headers
    of our httpx client."""
    headers = {VERSION_HEADER: PROTOCOL_VERSION_1_0}
    if key:
        headers["X-API-Key"] = key
    unknown_fields: list[str] = []
    hooks = {"response": [_strict_parser(unknown_fields)]}
    async with httpx.AsyncClient(headers=headers, timeout=30, event_hooks=hooks) as http:
        card = await A2ACardResolver(http, agent_url(live, slug)).get_agent_card()
        config = ClientConfig(
            streaming=streaming, polling=False, httpx_client=http, supported_protocol_bindings=[binding]
        )
        async with ClientFactory(config).create(card, interceptors=interceptors) as client:
            assert isinstance(client._transport, TRANSPORTS[binding])  # noqa: SLF001 - which one it chose
            yield client, card
    assert not unknown_fields, unknown_fields


def _kind(request: httpx.Request) -> str | None:
    """The method a request calls: a card, a JSON-RPC method, or the one of an HTTP+JSON route."""
    path = request.url.path
    if path.endswith("/agent-card.json"):
        return "card"
    for http_method, pattern, method in REST_ROUTES:
        if request.method == http_method and pattern.search(path):
            return method
    if request.method == "POST" and path.endswith("/"):
        return orjson.loads(request.content)["method"]
    return None


def _strict_parser(problems: list[str]):
    """The SDK parses leniently (unknown fields are dropped silently); this httpx hook parses
    every card and result again strictly against the SDK's protobuf types."""

    async def check(response: httpx.Response) -> None:
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return  # streams are checked event by event by the scenario
        await response.aread()
        kind = _kind(response.request)
        if kind is None or kind not in STRICT_TYPES or response.status_code != 200:
            return
        payload = response.json()
        if "jsonrpc" in payload:  # a JSON-RPC response; HTTP+JSON's body is the result itself
            payload = payload.get("result")
        if payload is None:
            return
        try:
            ParseDict(payload, STRICT_TYPES[kind]())
        except ParseError as exc:
            problems.append(f"{kind}: {exc}")

    return check


async def send(
    client: Client,
    text: str,
    *,
    task_id: str | None = None,
    context: ClientCallContext | None = None,
) -> Task:
    """A blocking SendMessage through the SDK; the server must answer with a task."""
    message = new_text_message(text, role=Role.ROLE_USER, task_id=task_id)
    replies = [r async for r in client.send_message(SendMessageRequest(message=message), context=context)]
    assert len(replies) == 1 and replies[0].HasField("task"), replies
    return replies[0].task


def artifact_text(task: Task) -> str:
    return "".join(get_artifact_text(a, delimiter="") for a in task.artifacts)


def user_texts(task: Task) -> list[str]:
    return [get_message_text(m) for m in task.history if m.role == Role.ROLE_USER]


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


# --- scenarios ---------------------------------------------------------------------------


def test_the_sdk_resolves_the_card_and_picks_its_1_0_interface_of_the_binding(live, binding, echo_agent, alice_key):
    async def scenario():
        async with sdk_client(live, "echo", alice_key, binding=binding) as (_, card):
            assert [(i.protocol_binding, i.protocol_version, i.url) for i in card.supported_interfaces] == [
                ("JSONRPC", "1.0", agent_url(live, "echo")),
                ("HTTP+JSON", "1.0", agent_url(live, "echo")),
            ]
            assert card.capabilities.streaming and card.capabilities.push_notifications
            scheme = card.security_schemes["apiKey"].api_key_security_scheme
            assert (scheme.location, scheme.name) == ("header", "X-API-Key")
            assert [list(r.schemes) for r in card.security_requirements] == [["apiKey"]]

    run(scenario)


def test_the_sdk_s_signature_verifier_accepts_the_live_card_with_the_key_set_its_jku_names(live, echo_agent):
    import jwt
    from a2a.utils.signing import create_signature_verifier

    named: list[tuple[str | None, str | None]] = []

    def key_provider(kid: str | None, jku: str | None) -> jwt.PyJWK:
        named.append((kid, jku))
        keys = httpx.get(jku or "", timeout=10).json()["keys"]  # the live server's own key set
        return jwt.PyJWK(next(k for k in keys if k["kid"] == kid))

    verifier = create_signature_verifier(key_provider, ["ES256"])

    async def scenario():
        async with httpx.AsyncClient(timeout=30) as http:
            for version in ("1.0", "0.3"):
                card = await A2ACardResolver(http, agent_url(live, "echo")).get_agent_card(
                    http_kwargs={"headers": {VERSION_HEADER: version}}, signature_verifier=verifier
                )
                assert card.signatures

    run(scenario)
    assert {jku for _, jku in named} == {f"{agent_url(live, 'echo')}.well-known/agent-card-jwks.json"}


def test_a_blocking_send_to_echo_completes_with_its_artifact_and_get_task_returns_the_same_task(
    live,
    binding,
    echo_agent,
    alice_key,
):
    async def scenario():
        async with sdk_client(live, "echo", alice_key, binding=binding) as (client, _):
            sent = await send(client, "hello from the sdk")
            assert sent.id and sent.context_id
            assert sent.status.state == COMPLETED
            assert artifact_text(sent) == "echo: hello from the sdk"

            fetched = await client.get_task(GetTaskRequest(id=sent.id))
            assert (fetched.id, fetched.context_id) == (sent.id, sent.context_id)
            assert fetched.status.state == COMPLETED
            assert artifact_text(fetched) == "echo: hello from the sdk"
            assert user_texts(fetched) == ["hello from the sdk"]

    run(scenario)


def test_list_tasks_shows_the_callers_tasks_and_never_another_callers(live, binding, echo_agent, alice_key, bob_key):
    async def scenario():
        async with (
            sdk_client(live, "echo", alice_key, binding=binding) as (alice, _),
            sdk_client(live, "echo", bob_key, binding=binding) as (bob, _),
        ):
            alice_first = await send(alice, "alice one")
            alice_second = await send(alice, "alice two")
            bob_task = await send(bob, "bob one")
            for task in (alice_first, alice_second, bob_task):
                assert task.status.state == COMPLETED

            alice_list = await alice.list_tasks(ListTasksRequest())
            assert {t.id for t in alice_list.tasks} == {alice_first.id, alice_second.id}
            assert alice_list.total_size == 2
            assert all(t.status.state == COMPLETED for t in alice_list.tasks)

            bob_list = await bob.list_tasks(ListTasksRequest())
            assert [t.id for t in bob_list.tasks] == [bob_task.id]

            by_context = await alice.list_tasks(ListTasksRequest(context_id=alice_first.context_id))
            assert [t.id for t in by_context.tasks] == [alice_first.id]

            with pytest.raises(TaskNotFoundError):
                await alice.get_task(GetTaskRequest(id=bob_task.id))

    run(scenario)


def test_cancel_task_cancels_a_task_that_waits_for_input(live, binding, writer_agent, alice_key):
    async def scenario():
        async with sdk_client(live, "writer", alice_key, binding=binding) as (client, _):
            waiting = await send(client, AMBIGUOUS_REQUEST)
            assert waiting.status.state == INPUT_REQUIRED
            assert "What should I write?" in get_message_text(waiting.status.message)

            canceled = await client.cancel_task(CancelTaskRequest(id=waiting.id))
            assert (canceled.id, canceled.context_id) == (waiting.id, waiting.context_id)
            assert canceled.status.state == CANCELED

            fetched = await client.get_task(GetTaskRequest(id=waiting.id))
            assert fetched.status.state == CANCELED
            assert not fetched.artifacts

            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=waiting.id))

    run(scenario)


def test_a_follow_up_with_only_the_task_id_continues_an_input_required_task_to_completion(
    live,
    binding,
    writer_agent,
    alice_key,
):
    async def scenario():
        async with sdk_client(live, "writer", alice_key, binding=binding) as (client, _):
            waiting = await send(client, AMBIGUOUS_REQUEST)
            assert waiting.status.state == INPUT_REQUIRED
            assert not waiting.artifacts

            done = await send(client, "A poem about the sea.", task_id=waiting.id)
            assert (done.id, done.context_id) == (waiting.id, waiting.context_id)
            assert done.status.state == COMPLETED
            assert [a.name for a in done.artifacts] == ["poem.txt"]
            text = artifact_text(done)
            assert "poem about the sea" in text and text.count("\n") == 4

            fetched = await client.get_task(GetTaskRequest(id=waiting.id))
            assert fetched.status.state == COMPLETED
            assert user_texts(fetched) == [AMBIGUOUS_REQUEST, "A poem about the sea."]
            assert artifact_text(fetched) == text

            in_context = await client.list_tasks(ListTasksRequest(context_id=waiting.context_id))
            assert [t.id for t in in_context.tasks] == [waiting.id]

    run(scenario)


def test_the_sdks_auth_interceptor_authenticates_from_the_cards_api_key_scheme(live, binding, echo_agent, alice_key):
    async def scenario():
        credentials = InMemoryContextCredentialStore()
        await credentials.set_credentials("alice-session", "apiKey", alice_key)
        async with sdk_client(live, "echo", None, binding=binding, interceptors=[AuthInterceptor(credentials)]) as (
            client,
            _,
        ):
            as_alice = ClientCallContext(state={"sessionId": "alice-session"})
            sent = await send(client, "keyed by the card", context=as_alice)
            assert sent.status.state == COMPLETED
            assert artifact_text(sent) == "echo: keyed by the card"

            with pytest.raises(A2AClientError, match="401"):
                await send(client, "no key at all")

    run(scenario)


def test_the_sdks_streaming_send_and_subscribe_see_the_writers_events_in_order(live, binding, writer_agent, alice_key):
    async def scenario():
        async with sdk_client(live, "writer", alice_key, binding=binding, streaming=True) as (client, _):
            message = new_text_message("a haiku about snow", role=Role.ROLE_USER)
            events = [e async for e in client.send_message(SendMessageRequest(message=message))]
            kinds = [e.WhichOneof("payload") for e in events]
            assert kinds[0] == "task" and kinds[-1] == "status_update", kinds
            assert events[-1].status_update.status.state == COMPLETED
            chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
            assert [(c.append, c.last_chunk) for c in chunks] == [(False, False), (True, False), (True, True)]
            task_id = events[0].task.id

            waiting = [
                e
                async for e in client.send_message(
                    SendMessageRequest(message=new_text_message("write", role=Role.ROLE_USER))
                )
            ]
            assert waiting[-1].status_update.status.state == INPUT_REQUIRED
            subscribed = client.subscribe(SubscribeToTaskRequest(id=waiting[0].task.id))
            first = await anext(subscribed)
            assert first.task.status.state == INPUT_REQUIRED
            await client.cancel_task(CancelTaskRequest(id=waiting[0].task.id))
            rest = [e async for e in subscribed]
            assert rest[-1].status_update.status.state == CANCELED

            fetched = await client.get_task(GetTaskRequest(id=task_id))
            assert fetched.status.state == COMPLETED and "snow" in artifact_text(fetched).lower()

    run(scenario)
