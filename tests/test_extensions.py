"""Extensions (seed 002): activation by A2A-Extensions or X-A2A-Extensions, the echo of what
was activated, the required-extension error, what reaches the agent's run through
AgentContext, and the timestamp extension end to end."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from a2a.client import ClientCallContext
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from asgiref.sync import async_to_sync
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols import exchange
from tasks_app.executors import REGISTRY, AgentContext, Executor, register
from tasks_app.executors.extensions import EXTENSIONS
from tasks_app.executors.timestamp import FIELD as STAMP
from tasks_app.executors.timestamp import URI as TIMESTAMP
from tasks_app.models import Artifact, Message, TaskEvent

from .conftest import make_agent, user_message
from .test_interop_a2a_sdk import sdk_client
from .test_interop_a2a_sdk import send as sdk_send

pytestmark = pytest.mark.django_db(transaction=True)

TONE = "https://example.com/ext/tone/v1"
MUST = "https://example.com/ext/must/v1"


class ProbeExecutor(Executor):
    """Says what its context told it about extensions: in a data artifact, then asks for
    input the first time and completes the second."""

    name = "extension-probe"

    def execute(self, ctx: AgentContext) -> None:
        tone = ctx.extension(TONE)
        seen = {
            "extensions": ctx.extensions,
            "tone": None if tone is None else {"params": tone.params, "metadata": tone.metadata},
        }
        ctx.artifact([{"type": "data", "data": seen}], name="seen")
        if len(ctx.user_texts) == 1:
            ctx.require_input("and then?")
        else:
            ctx.complete("done")


@pytest.fixture
def probe(tenant):
    register(ProbeExecutor)
    yield make_agent(
        tenant,
        "probe",
        "extension-probe",
        extensions=[
            {"uri": TONE, "description": "a tone", "params": {"tones": ["dry", "warm"]}},
            {"uri": TIMESTAMP},
        ],
    )
    REGISTRY.pop(ProbeExecutor.name, None)


def seen(task_id: str, index: int = -1) -> dict[str, Any]:
    artifacts = Artifact.objects.filter(task_id=task_id, name="seen").order_by("id")
    return list(artifacts)[index].parts[0]["data"]


def send(rpc, path: str, key: str, headers: dict[str, str] | None = None, **params: Any):
    return rpc(path, "SendMessage", {"message": user_message("hi"), **params}, key=key, headers=headers)


async def _drained(content) -> bytes:
    return b"".join([chunk async for chunk in content])


# --- activation and echo -------------------------------------------------------------------


def test_an_extension_the_agent_declares_is_activated_and_echoed(rpc, probe, alice_key):
    response = send(rpc, "/agents/acme/probe/", alice_key, {"A2A-Extensions": TONE})
    assert response.headers["A2A-Extensions"] == TONE
    assert "X-A2A-Extensions" not in response.headers
    assert seen(response.result["task"]["id"])["extensions"] == [TONE]


def test_an_extension_the_agent_does_not_declare_is_ignored(rpc, probe, alice_key):
    headers = {"A2A-Extensions": "https://example.com/ext/unknown/v1, " + TONE}
    response = send(rpc, "/agents/acme/probe/", alice_key, headers)
    assert response.headers["A2A-Extensions"] == TONE
    assert seen(response.result["task"]["id"])["extensions"] == [TONE]


def test_nothing_activated_means_no_header_and_no_extensions_in_the_run(rpc, probe, alice_key):
    response = send(rpc, "/agents/acme/probe/", alice_key, {"A2A-Extensions": "https://example.com/other"})
    assert "A2A-Extensions" not in response.headers
    assert seen(response.result["task"]["id"])["extensions"] == []


def test_a_0_3_client_s_x_a2a_extensions_header_is_read_and_answered_under_both_names(rpc, probe, alice_key):
    response = send(rpc, "/agents/acme/probe/", alice_key, {"X-A2A-Extensions": f"{TIMESTAMP},{TONE}"})
    # In the card's order, whatever order the client wrote.
    assert response.headers["A2A-Extensions"] == f"{TONE}, {TIMESTAMP}"
    assert response.headers["X-A2A-Extensions"] == f"{TONE}, {TIMESTAMP}"
    assert seen(response.result["task"]["id"])["extensions"] == [TONE, TIMESTAMP]


def test_a_required_extension_activated_by_the_0_3_header_passes_the_check(rpc, tenant, alice_key):
    make_agent(tenant, "strict", "echo", extensions=[{"uri": MUST, "required": True}])
    refused = send(rpc, "/agents/acme/strict/", alice_key)
    assert refused.error["code"] == -32008
    assert MUST in refused.error["message"] and "A2A-Extensions" in refused.error["message"]
    assert Message.objects.count() == 0  # nothing was stored
    accepted = send(rpc, "/agents/acme/strict/", alice_key, {"X-A2A-Extensions": MUST})
    assert accepted.result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_the_echo_goes_with_a_stream_too(client, probe, alice_key):
    response = client.post(
        "/agents/acme/probe/",
        data={"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": user_message()}},
        content_type="application/json",
        headers={"A2A-Version": "1.0", "X-API-Key": alice_key, "A2A-Extensions": TONE},
    )
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["A2A-Extensions"] == TONE
    body = async_to_sync(_drained)(response.streaming_content)
    assert b"TASK_STATE_INPUT_REQUIRED" in body  # the stream ran to the end of the exchange


def test_the_echo_goes_with_an_http_json_answer(client, probe, alice_key):
    response = client.post(
        "/agents/acme/probe/message:send",
        data={"message": user_message()},
        content_type="application/json",
        headers={"A2A-Version": "1.0", "X-API-Key": alice_key, "A2A-Extensions": TONE},
    )
    assert response.status_code == 200, response.content
    assert response["A2A-Extensions"] == TONE
    assert seen(response.json()["task"]["id"])["extensions"] == [TONE]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    header=st.lists(
        st.sampled_from([TONE, TIMESTAMP, MUST, "", " ", ",", "urn:x", TONE.upper(), TONE + "/"]), max_size=6
    ).map(",".join)
)
def test_what_is_echoed_is_exactly_what_the_client_asked_for_and_the_card_declares(rpc, probe, alice_key, header):
    response = rpc(
        "/agents/acme/probe/", "GetTask", {"id": "no-such-task"}, key=alice_key, headers={"A2A-Extensions": header}
    )
    assert response.error["code"] == -32001  # got to the method: the header never breaks a request
    asked = {uri.strip() for uri in header.split(",")}
    expected = [uri for uri in (TONE, TIMESTAMP) if uri in asked]
    echoed = response.headers.get("A2A-Extensions")
    assert (echoed.split(", ") if echoed else []) == expected


# --- what reaches the run --------------------------------------------------------------------


def test_the_run_sees_the_card_s_params_and_the_request_s_metadata_filed_under_the_uri(rpc, probe, alice_key):
    message = user_message("hi", metadata={f"{TONE}/mood": "dry", "unrelated": 1})
    response = rpc(
        "/agents/acme/probe/",
        "SendMessage",
        {"message": message, "metadata": {f"{TONE}/level": 2, "example.com/ext/tone/v1/bare": True, "other": 0}},
        key=alice_key,
        headers={"A2A-Extensions": TONE},
    )
    tone = seen(response.result["task"]["id"])["tone"]
    assert tone["params"] == {"tones": ["dry", "warm"]}
    # The request's and the message's entries under the URI (with or without its scheme), no others.
    assert tone["metadata"] == {f"{TONE}/mood": "dry", f"{TONE}/level": 2, "example.com/ext/tone/v1/bare": True}


def test_activation_is_per_request_so_a_follow_up_without_the_header_has_none(rpc, probe, alice_key):
    first = send(rpc, "/agents/acme/probe/", alice_key, {"A2A-Extensions": TONE}).result["task"]
    assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    follow_up = user_message("more", taskId=first["id"])
    second = rpc("/agents/acme/probe/", "SendMessage", {"message": follow_up}, key=alice_key).result["task"]
    assert second["status"]["state"] == "TASK_STATE_COMPLETED"
    assert seen(first["id"], 0)["extensions"] == [TONE]
    assert seen(first["id"], 1)["extensions"] == []


def test_an_extension_the_tenant_removed_after_the_request_is_not_active_in_the_run(probe):
    ctx = AgentContext(
        task_id="t",
        context_id="c",
        message=None,  # type: ignore[arg-type]
        history=[],
        declared_extensions=[{"uri": TIMESTAMP}],
        activated_extensions=[{"uri": TONE, "metadata": {}}, {"uri": TIMESTAMP, "metadata": {}}],
    )
    assert ctx.extensions == [TIMESTAMP]
    assert ctx.extension(TONE) is None
    assert ctx.extension(TIMESTAMP).params == {}


@pytest.mark.parametrize(
    ("key", "filed"),
    [
        (f"{TONE}", True),
        (f"{TONE}/mood", True),
        ("example.com/ext/tone/v1/mood", True),
        (f"{TONE}x", False),
        ("https://example.com/ext/tone/v2/mood", False),
        ("mood", False),
    ],
)
def test_which_metadata_keys_belong_to_an_extension(key, filed):
    assert exchange._filed_under(TONE, key) is filed


def test_activation_is_not_shown_to_clients(rpc, probe, alice_key):
    task = send(rpc, "/agents/acme/probe/", alice_key, {"A2A-Extensions": TONE}).result["task"]
    got = rpc("/agents/acme/probe/", "GetTask", {"id": task["id"]}, key=alice_key).result
    assert "activated" not in str(got)
    assert Message.objects.get(task_id=task["id"], role="user").activated_extensions == [{"uri": TONE, "metadata": {}}]


# --- the timestamp extension -------------------------------------------------------------------


def stamp_of(metadata: dict[str, Any]) -> datetime:
    value = metadata[STAMP]
    assert value.endswith("Z")  # UTC, as the extension's specification asks
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_the_timestamp_extension_is_a_built_in_server_extension():
    assert EXTENSIONS[TIMESTAMP].uri == TIMESTAMP


def test_with_the_timestamp_extension_active_every_message_and_artifact_of_the_agent_has_its_time(
    rpc, probe, alice_key
):
    before = datetime.now(UTC)
    task = send(rpc, "/agents/acme/probe/", alice_key, {"A2A-Extensions": TIMESTAMP}).result["task"]
    after = datetime.now(UTC)
    # As clients read it: the status message and the artifact, in GetTask.
    got = rpc("/agents/acme/probe/", "GetTask", {"id": task["id"]}, key=alice_key).result
    message_time = stamp_of(got["status"]["message"]["metadata"])
    artifact_time = stamp_of(got["artifacts"][0]["metadata"])
    assert before <= artifact_time <= message_time <= after
    # And as a stream or a push receiver does: the events carry them too.
    events = TaskEvent.objects.filter(task_id=task["id"]).order_by("seq")
    stamped = [e.kind for e in events if STAMP in str(e.payload)]
    assert stamped == ["artifact", "status"]


def test_without_the_timestamp_extension_nothing_is_stamped(rpc, probe, alice_key):
    task = send(rpc, "/agents/acme/probe/", alice_key).result["task"]
    got = rpc("/agents/acme/probe/", "GetTask", {"id": task["id"]}, key=alice_key).result
    assert STAMP not in str(got)


def test_a_bare_reply_is_stamped_too(tenant, rpc, alice_key):
    class Replier(Executor):
        name = "stamped-replier"

        def execute(self, ctx: AgentContext) -> None:
            ctx.reply("just a message", metadata={"kept": True})

    register(Replier)
    try:
        make_agent(tenant, "replier", "stamped-replier", extensions=[{"uri": TIMESTAMP}])
        reply = send(rpc, "/agents/acme/replier/", alice_key, {"A2A-Extensions": TIMESTAMP}).result["message"]
    finally:
        REGISTRY.pop("stamped-replier", None)
    assert reply["metadata"]["kept"] is True
    stamp_of(reply["metadata"])


def test_an_agent_s_own_timestamp_is_kept(tenant, rpc, alice_key):
    class Punctual(Executor):
        name = "punctual"

        def execute(self, ctx: AgentContext) -> None:
            ctx.complete(artifact="x", metadata={STAMP: "2020-01-01T00:00:00Z"})

    register(Punctual)
    try:
        make_agent(tenant, "punctual", "punctual", extensions=[{"uri": TIMESTAMP}])
        task = send(rpc, "/agents/acme/punctual/", alice_key, {"A2A-Extensions": TIMESTAMP}).result["task"]
    finally:
        REGISTRY.pop("punctual", None)
    assert task["artifacts"][0]["metadata"][STAMP] == "2020-01-01T00:00:00Z"


# --- the official client, across daphne and a Celery worker ------------------------------------


@pytest.mark.live
@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_the_a2a_sdk_activates_the_timestamp_extension_on_a_live_server(live, binding, tenant, alice_key):
    make_agent(tenant, "stamped", "echo", extensions=[{"uri": TIMESTAMP, "description": "times"}])

    async def scenario():
        async with sdk_client(live, "stamped", alice_key, binding=binding) as (_, card):
            assert [e.uri for e in card.capabilities.extensions] == [TIMESTAMP]
        async with sdk_client(live, "stamped", alice_key, binding=binding) as (client, _):
            parameters = ServiceParametersFactory.create([with_a2a_extensions([TIMESTAMP])])
            stamped = await sdk_send(client, "hi", context=ClientCallContext(service_parameters=parameters))
            plain = await sdk_send(client, "hi")
        return stamped, plain

    stamped, plain = asyncio.run(scenario())
    assert stamp_of(dict(stamped.artifacts[0].metadata)) <= datetime.now(UTC)
    assert STAMP not in dict(plain.artifacts[0].metadata)
