"""Fronted A2A agents: an agent whose logic is a remote A2A agent (the `a2a-upstream`
executor). Its upstream here is a real a2a-sdk server on 127.0.0.1 (tests/a2a_upstream.py),
speaking A2A 1.0, or only 0.3.

First the parts that need no server (the settings, the card, the translation of the
upstream's events), then whole exchanges in-process (the agent runs eagerly in the request's
thread), then through the live stack (daphne and a real Celery worker) with the official
a2a-sdk client in 1.0 mode on our side too: blocking, streaming, subscribing mid-run,
cancel, input-required and a follow-up, errors, and the address guard. No request leaves
127.0.0.1: refused destinations are refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.helpers import get_message_text, new_text_message
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, VERSION_HEADER
from google.protobuf.json_format import ParseDict

from accounts.agent_kinds import settings_problems
from accounts.services import agent_secret_set
from tasks_app import runner
from tasks_app.executors import REGISTRY
from tasks_app.executors.upstream import card as cards
from tasks_app.executors.upstream import config, session
from tasks_app.executors.upstream.translate import Chunk, Memory, Remember, Reply, Status, Translator
from tasks_app.models import Task as StoredTask
from tasks_app.models import TaskEvent
from tests.a2a_upstream import Upstream
from tests.conftest import make_agent, user_message

METHODS_0_3 = {"message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe"}


@pytest.fixture(autouse=True)
def _quiet_upstream():
    # The SDK's server logs an agent's exception with its traceback: expected here.
    logging.getLogger("a2a").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("a2a").setLevel(logging.NOTSET)


@pytest.fixture(autouse=True)
def _fresh_cards():
    cards.forget()
    yield
    cards.forget()


@pytest.fixture(params=["1.0", "0.3"])
def any_upstream(request) -> Iterator[Upstream]:
    running = Upstream(request.param).start()
    yield running
    running.stop()


def fronted(tenant, upstream_url: str, slug: str = "fronted", **settings: Any):
    return make_agent(tenant, slug, "a2a-upstream", settings={"url": upstream_url, **settings})


def texts(parts: list[dict]) -> str:
    return "".join(p.get("text", "") for p in parts)


def artifact_text(task: dict) -> str:
    return "".join(texts(a["parts"]) for a in task.get("artifacts", []))


def status_text(task: dict) -> str:
    return texts((task["status"].get("message") or {}).get("parts", []))


def state(task: dict) -> str:
    return task["status"]["state"].removeprefix("TASK_STATE_")


def failure(task: dict) -> tuple[str, str]:
    """Why the server failed the task (a misconfiguration's reason is for the operator: the
    client sees a failed task, the admin and the status history say why)."""
    stored = StoredTask.objects.get(pk=task["id"])
    return stored.failure, stored.status_changes.order_by("-id").first().reason


def stored_events(task_id: str) -> list[tuple[str, Any]]:
    return [
        (e.kind, e.payload.get("state") or e.payload.get("append"))
        for e in TaskEvent.objects.filter(task_id=task_id).order_by("seq")
    ]


# --- the settings -------------------------------------------------------------------------


def test_the_executor_is_built_in_and_its_settings_are_checked_when_an_agent_is_saved():
    assert "a2a-upstream" in REGISTRY
    assert settings_problems("a2a-upstream", {"url": "https://agent.example.test/"}) == []
    assert settings_problems("a2a-upstream", {}) == ["settings: 'url' is a required property"]
    problems = settings_problems(
        "a2a-upstream", {"url": "ftp://x", "protocol": "0.2", "timeout": 0, "auth_header": "X Key", "extra": 1}
    )
    assert [p.split(":")[0] for p in problems] == [
        "settings",
        "settings['auth_header']",
        "settings['protocol']",
        "settings['timeout']",
        "settings['url']",
    ]


@pytest.mark.parametrize(
    "url, card_url",
    [
        ("https://agent.example.test", "https://agent.example.test/.well-known/agent-card.json"),
        ("https://agent.example.test/", "https://agent.example.test/.well-known/agent-card.json"),
        ("https://host.test/agents/acme/echo/", "https://host.test/agents/acme/echo/.well-known/agent-card.json"),
        ("https://host.test/cards/echo.json", "https://host.test/cards/echo.json"),
        ("https://host.test/.well-known/agent-card.json", "https://host.test/.well-known/agent-card.json"),
    ],
)
def test_the_url_may_name_the_card_or_the_agent_under_which_the_card_lives(url, card_url):
    assert config.read({"url": url}, "").card_url == card_url


@pytest.mark.parametrize(
    "given, secret, headers",
    [
        ({}, "", {}),
        ({}, "s3cret", {"Authorization": "Bearer s3cret"}),
        ({"auth_header": "X-API-Key"}, "s3cret", {"X-API-Key": "s3cret"}),
        ({"auth_header": "Authorization", "auth_scheme": "Token"}, "s3cret", {"Authorization": "Token s3cret"}),
        ({"auth_header": "X-Auth", "auth_scheme": "Key"}, "s3cret", {"X-Auth": "Key s3cret"}),
    ],
)
def test_the_secret_goes_in_the_header_the_settings_name(given, secret, headers):
    assert config.read({"url": "https://a.test/", **given}, secret).auth == headers


def test_a_secret_may_not_ride_in_a_header_the_client_sets_itself():
    with pytest.raises(config.Misconfigured, match="cannot carry the secret"):
        config.read({"url": "https://a.test/", "auth_header": "Host"}, "s3cret")


# --- the card -----------------------------------------------------------------------------


def card_v1(*interfaces: tuple[str, str, str], streaming: bool = True) -> dict:
    return {
        "name": "up",
        "description": "an upstream",
        "version": "1",
        "supportedInterfaces": [
            {"url": url, "protocolBinding": binding, "protocolVersion": version} for url, binding, version in interfaces
        ],
        "capabilities": {"streaming": streaming},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }


CARD_03 = {
    "name": "up",
    "description": "an upstream",
    "version": "1",
    "url": "https://old.example.test/rpc",
    "protocolVersion": "0.3.0",
    "preferredTransport": "JSONRPC",
    "capabilities": {"streaming": False},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [],
}


def test_a_1_0_card_is_read_with_the_sdks_types_and_its_json_rpc_1_0_interface_is_chosen():
    card = cards.parse(
        card_v1(
            ("https://up.test/grpc", "GRPC", "1.0"),
            ("https://up.test/v03", "JSONRPC", "0.3"),
            ("https://up.test/rest", "HTTP+JSON", "1.0"),
            ("https://up.test/rpc", "JSONRPC", "1.0"),
        )
    )
    chosen = cards.choose(card, "auto")
    assert (chosen.interface.url, chosen.version, chosen.streams) == ("https://up.test/rpc", "1.0", True)
    assert [i.url for i in chosen.card.supported_interfaces] == ["https://up.test/rpc"]
    assert cards.choose(card, "0.3").interface.url == "https://up.test/v03"


def test_http_json_serves_when_the_card_offers_no_json_rpc():
    card = cards.parse(card_v1(("https://up.test/rest", "HTTP+JSON", "1.0")))
    assert cards.choose(card, "auto").interface.protocol_binding == "HTTP+JSON"


def test_a_0_3_card_is_read_with_the_sdks_0_3_types():
    chosen = cards.choose(cards.parse(CARD_03), "auto")
    assert (chosen.interface.url, chosen.version, chosen.streams) == ("https://old.example.test/rpc", "0.3", False)


def test_a_card_offering_nothing_the_client_speaks_is_refused_saying_what_it_offers():
    grpc_only = cards.parse(card_v1(("https://up.test/grpc", "GRPC", "1.0")))
    with pytest.raises(
        cards.CardProblem, match=r"no interface .*JSONRPC or HTTP\+JSON, A2A 1.0 or 0.3.*offers GRPC 1.0"
    ):
        cards.choose(grpc_only, "auto")
    with pytest.raises(cards.CardProblem, match=r"A2A 1.0\); it offers JSONRPC 0.3.0"):
        cards.choose(cards.parse(CARD_03), "1.0")


@pytest.mark.parametrize(
    "document, why",
    [
        ([], "is not a JSON object"),
        ({"name": "x"}, "neither supportedInterfaces"),
        ({**CARD_03, "capabilities": "lots"}, "not a valid A2A 0.3 card: capabilities"),
        ({**card_v1(), "supportedInterfaces": "everywhere"}, "not a valid A2A 1.0 card"),
    ],
)
def test_a_card_that_cannot_be_read_says_why(document, why):
    with pytest.raises(cards.CardProblem, match=why):
        cards.parse(document)


# --- translating the upstream's events ----------------------------------------------------


def response(**payload: Any) -> StreamResponse:
    return ParseDict(payload, StreamResponse())


def status_of(state_name: str, text: str = "", message_id: str = "m1", at: str = "") -> dict:
    status: dict[str, Any] = {"state": state_name}
    if text:
        status["message"] = {"messageId": message_id, "role": "ROLE_AGENT", "parts": [{"text": text}]}
    if at:
        status["timestamp"] = at
    return status


def test_a_stream_becomes_working_chunks_and_completed_with_the_upstreams_ids_kept_at_once():
    translator = Translator(Memory(card_url="c"))
    events = [
        {"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}},
        {"statusUpdate": {"taskId": "t1", "contextId": "c1", "status": status_of("TASK_STATE_WORKING", "on it")}},
        {"artifactUpdate": {"taskId": "t1", "artifact": {"artifactId": "a", "name": "n", "parts": [{"text": "x"}]}}},
        {
            "artifactUpdate": {
                "taskId": "t1",
                "append": True,
                "lastChunk": True,
                "artifact": {"artifactId": "a", "parts": [{"text": "y"}]},
            }
        },
        {"statusUpdate": {"taskId": "t1", "status": status_of("TASK_STATE_COMPLETED")}},
    ]
    seen = [action for event in events for action in translator.feed(response(**event))]
    assert isinstance(seen[0], Remember) and seen[0].memory["task_id"] == "t1" and seen[0].memory["context_id"] == "c1"
    assert seen[1] == Status("working", [{"type": "text", "text": "on it"}])
    assert [(c.artifact_id, c.append, c.last_chunk) for c in seen[2:4]] == [("a", False, False), ("a", True, True)]
    assert seen[4] == Status("completed", [])
    assert translator.settled and translator.terminal
    assert translator.memory.artifacts == {"a": 2}


def test_a_snapshot_forwards_only_what_was_not_forwarded_yet():
    translator = Translator(
        Memory(card_url="c", task_id="t1", artifacts={"a": 1}, status=["TASK_STATE_WORKING", "m1", ""])
    )
    snapshot = {
        "id": "t1",
        "status": status_of("TASK_STATE_WORKING", "on it"),
        "artifacts": [
            {"artifactId": "a", "parts": [{"text": "x"}, {"text": "y"}]},
            {"artifactId": "b", "parts": [{"text": "z"}]},
        ],
    }
    first = translator.feed(response(task=snapshot))
    assert [(c.artifact_id, texts(c.parts), c.append) for c in first if isinstance(c, Chunk)] == [
        ("a", "y", True),
        ("b", "z", False),
    ]
    assert not [a for a in first if isinstance(a, Status)]  # the same working status: said already
    assert translator.feed(response(task=snapshot)) == []  # polled again, nothing new


def test_the_old_question_in_a_follow_ups_first_snapshot_is_not_asked_again():
    asked = status_of("TASK_STATE_INPUT_REQUIRED", "Which colour?", at="2026-01-01T00:00:00Z")
    translator = Translator(Memory(card_url="c"))
    (remember, question) = translator.feed(response(task={"id": "t1", "contextId": "c1", "status": asked}))
    assert question.memory is not None  # kept before the question is asked: the next run reads it
    follow_up = Translator(Memory.from_state({"upstream": question.memory}, "c"))
    assert follow_up.feed(response(task={"id": "t1", "contextId": "c1", "status": asked})) == []
    assert not follow_up.settled
    assert follow_up.feed(response(statusUpdate={"taskId": "t1", "status": status_of("TASK_STATE_WORKING")})) == [
        Status("working", [])
    ]


@pytest.mark.parametrize(
    "upstream_state, ours, reason",
    [
        ("TASK_STATE_FAILED", "failed", "the upstream agent failed without saying why"),
        ("TASK_STATE_CANCELED", "failed", "the upstream agent canceled the task"),
        ("TASK_STATE_REJECTED", "rejected", ""),
        ("TASK_STATE_AUTH_REQUIRED", "auth-required", ""),
    ],
)
def test_how_the_upstreams_other_states_end_ours(upstream_state, ours, reason):
    (action,) = Translator(Memory(card_url="c", task_id="t1")).feed(
        response(statusUpdate={"taskId": "t1", "status": status_of(upstream_state)})
    )
    assert (action.state, texts(action.parts)) == (ours, reason)


def test_a_bare_message_is_a_reply_and_its_parts_keep_their_kinds():
    (reply,) = Translator(Memory(card_url="c")).feed(
        response(
            message={
                "messageId": "m",
                "role": "ROLE_AGENT",
                "metadata": {"k": 1},
                "parts": [
                    {"text": "hi"},
                    {"raw": "AAE=", "mediaType": "application/octet-stream", "filename": "b.bin"},
                    {"url": "https://f.test/r.pdf", "mediaType": "application/pdf"},
                    {"data": {"n": 1, "x": [1.5]}, "metadata": {"why": "because"}},
                ],
            }
        )
    )
    assert reply == Reply(
        [
            {"type": "text", "text": "hi"},
            {"type": "file", "bytes": "AAE=", "media_type": "application/octet-stream", "name": "b.bin"},
            {"type": "file", "uri": "https://f.test/r.pdf", "media_type": "application/pdf"},
            {"type": "data", "data": {"n": 1, "x": [1.5]}, "metadata": {"why": "because"}},
        ],
        {"k": 1},
    )


# --- whole exchanges, in-process -----------------------------------------------------------

in_process = pytest.mark.django_db(transaction=True)
FRONTED = "/agents/acme/fronted/"
STREAMED_ECHO = [
    ("status", "submitted"),
    ("status", "working"),
    ("artifact", False),
    ("artifact", True),
    ("artifact", True),
    ("status", "completed"),
]


def stream_method(upstream: Upstream) -> str:
    return "SendStreamingMessage" if upstream.version == "1.0" else "message/stream"


@in_process
def test_a_message_goes_to_the_upstream_and_its_streamed_events_become_the_tasks(rpc, tenant, alice_key, any_upstream):
    fronted(tenant, any_upstream.base)
    task = rpc.send(FRONTED, "echo hello", key=alice_key).result["task"]
    assert state(task) == "COMPLETED" and status_text(task) == "done"
    assert artifact_text(task) == "echo: hello [1] [2]"
    assert [a["name"] for a in task["artifacts"]] == ["echo.txt"]
    assert stored_events(task["id"]) == STREAMED_ECHO
    assert any_upstream.seen.methods() == [stream_method(any_upstream)]
    assert {c["version"] for c in any_upstream.seen.calls} == {any_upstream.version}
    assert any_upstream.seen.executions == [
        (StoredTask.objects.get(pk=task["id"]).executor_state["upstream"]["task_id"], "echo hello")
    ]


@in_process
def test_the_extensions_our_client_activated_and_their_metadata_are_passed_on(rpc, tenant, alice_key, any_upstream):
    tone = "https://example.com/ext/tone/v1"
    agent = fronted(tenant, any_upstream.base)
    agent.extensions = [{"uri": tone}]
    agent.save()
    params = {"message": user_message("echo hi", metadata={f"{tone}/mood": "dry"}), "metadata": {"other": 1}}
    task = rpc(FRONTED, "SendMessage", params, key=alice_key, headers={"A2A-Extensions": tone}).result["task"]
    assert state(task) == "COMPLETED"
    (call,) = any_upstream.seen.calls
    assert call["extensions"] == tone
    assert call["metadata"] == {f"{tone}/mood": "dry"}  # what was filed under it, nothing else
    plain = rpc.send(FRONTED, "echo hi", key=alice_key).result["task"]
    assert state(plain) == "COMPLETED"
    assert any_upstream.seen.calls[-1]["extensions"] == ""


@in_process
def test_without_streaming_the_message_is_sent_and_the_upstream_task_polled_until_it_settles(
    rpc, tenant, alice_key, any_upstream
):
    fronted(tenant, any_upstream.base, streaming=False)
    task = rpc.send(FRONTED, "drip slowly", key=alice_key).result["task"]
    assert state(task) == "COMPLETED" and artifact_text(task) == "echo: slowly [1] [2]"
    methods = any_upstream.seen.methods()
    send, get = ("SendMessage", "GetTask") if any_upstream.version == "1.0" else ("message/send", "tasks/get")
    assert methods[0] == send and set(methods[1:]) == {get} and len(methods) >= 3


@in_process
def test_an_upstream_that_speaks_only_0_3_is_spoken_to_in_0_3(rpc, tenant, alice_key, upstream_03):
    fronted(tenant, upstream_03.base)
    task = rpc.send(FRONTED, "echo old friend", key=alice_key).result["task"]
    assert state(task) == "COMPLETED" and artifact_text(task) == "echo: old friend [1] [2]"
    assert set(upstream_03.seen.methods()) <= METHODS_0_3


@in_process
def test_pinned_to_1_0_a_0_3_only_upstream_is_a_misconfiguration_saying_what_it_offers(
    rpc, tenant, alice_key, upstream_03
):
    fronted(tenant, upstream_03.base, protocol="1.0")
    task = rpc.send(FRONTED, "echo x", key=alice_key).result["task"]
    assert state(task) == "FAILED"
    kind, reason = failure(task)
    assert kind == "misconfigured"
    assert (
        reason.startswith("the agent is misconfigured: the upstream's card at ") and "it offers JSONRPC 0.3" in reason
    )
    assert upstream_03.seen.calls == []


@in_process
@pytest.mark.parametrize(
    "script, expected, message",
    [
        ("fail", "FAILED", "the upstream could not do it"),
        ("reject", "REJECTED", "not for me"),
        ("auth", "AUTH_REQUIRED", "sign in first"),
        ("cancel", "FAILED", "the upstream agent canceled the taskchanged my mind"),
        # A failed exchange (not the upstream's verdict): our client reads the error's code, the
        # admin its words too.
        ("boom", "FAILED", "the upstream agent answered with error -32603"),
    ],
)
def test_how_the_upstream_ends_is_how_our_task_ends(rpc, tenant, alice_key, any_upstream, script, expected, message):
    fronted(tenant, any_upstream.base)
    task = rpc.send(FRONTED, script, key=alice_key).result["task"]
    assert (state(task), status_text(task)) == (expected, message)
    if script == "boom":
        assert failure(task) == (
            "agent-error",
            "the upstream agent answered with error -32603: the upstream agent broke",
        )


@in_process
def test_a_bare_message_from_the_upstream_is_the_answer(rpc, tenant, alice_key, any_upstream):
    fronted(tenant, any_upstream.base)
    answer = rpc.send(FRONTED, "reply hi there", key=alice_key).result
    assert texts(answer["message"]["parts"]) == "reply: hi there"


@in_process
def test_every_kind_of_part_comes_through(rpc, tenant, alice_key, any_upstream):
    fronted(tenant, any_upstream.base)
    task = rpc.send(FRONTED, "files", key=alice_key).result["task"]
    assert state(task) == "COMPLETED"
    assert task["artifacts"][0]["parts"] == [
        {"text": "a text"},
        {"raw": "AAFiaW5hcnk=", "filename": "blob.bin", "mediaType": "application/octet-stream"},
        {"url": "https://files.example.test/report.pdf", "filename": "report.pdf", "mediaType": "application/pdf"},
        {"data": {"n": 1, "ok": True, "list": ["a"]}},
    ]


@in_process
@pytest.mark.parametrize("streaming", [True, False])
def test_input_required_then_a_follow_up_continues_the_same_upstream_task(
    rpc, tenant, alice_key, any_upstream, streaming
):
    fronted(tenant, any_upstream.base, streaming=streaming)
    asked = rpc.send(FRONTED, "ask", key=alice_key).result["task"]
    assert (state(asked), status_text(asked)) == ("INPUT_REQUIRED", "Which colour?")
    done = rpc.send(FRONTED, "blue", key=alice_key, taskId=asked["id"], contextId=asked["contextId"]).result["task"]
    assert (state(done), status_text(done), artifact_text(done)) == ("COMPLETED", "thanks", "colour: blue")
    (first, first_text), (second, second_text) = any_upstream.seen.executions
    assert first == second and (first_text, second_text) == ("ask", "blue")
    assert [k for k, s in stored_events(done["id"]) if (k, s) == ("status", "input-required")] == ["status"]


@in_process
def test_canceling_our_task_while_it_waits_for_input_cancels_the_upstream_task(rpc, tenant, alice_key, any_upstream):
    fronted(tenant, any_upstream.base)
    asked = rpc.send(FRONTED, "ask", key=alice_key).result["task"]
    assert state(asked) == "INPUT_REQUIRED"
    canceled = rpc(FRONTED, "CancelTask", {"id": asked["id"]}, key=alice_key).result
    assert state(canceled) == "CANCELED"
    # No run was active to see it: a worker told the executor, which told the upstream.
    assert any_upstream.seen.wait_for_cancel(timeout=5) == [upstream_task_of(asked["id"])]


@in_process
def test_a_canceled_task_whose_executor_kept_nothing_tells_no_upstream(rpc, tenant, alice_key, upstream):
    fronted(tenant, upstream.base)
    asked = rpc.send(FRONTED, "ask", key=alice_key).result["task"]
    StoredTask.objects.filter(pk=asked["id"]).update(executor_state={})
    rpc(FRONTED, "CancelTask", {"id": asked["id"]}, key=alice_key)
    assert upstream.seen.wait_for_cancel(timeout=0.5) == []
    assert runner.forward_cancel(task_id=asked["id"]) == "nothing to do"


@in_process
def test_the_agents_secret_is_sent_as_a_bearer_token_or_in_the_header_named(rpc, tenant, alice_key, upstream):
    agent_secret_set(agent=fronted(tenant, upstream.base), secret="s3cret")
    agent_secret_set(agent=fronted(tenant, upstream.base, slug="keyed", auth_header="X-API-Key"), secret="k3y")
    assert state(rpc.send(FRONTED, "echo a", key=alice_key).result["task"]) == "COMPLETED"
    assert state(rpc.send("/agents/acme/keyed/", "echo b", key=alice_key).result["task"]) == "COMPLETED"
    assert [(c["authorization"], c["x-api-key"]) for c in upstream.seen.calls] == [("Bearer s3cret", ""), ("", "k3y")]
    assert [(c["authorization"], c["x-api-key"]) for c in upstream.seen.card_requests] == [
        ("Bearer s3cret", ""),
        ("", "k3y"),  # the same card, fetched again with the other agent's credential
    ]


@in_process
def test_a_wrong_secret_fails_the_task_with_the_upstreams_http_status(rpc, tenant, alice_key, any_upstream):
    any_upstream.require_token("right")
    agent_secret_set(agent=fronted(tenant, any_upstream.base), secret="wrong")
    task = rpc.send(FRONTED, "echo x", key=alice_key).result["task"]
    assert (state(task), status_text(task)) == (
        "FAILED",
        "the upstream agent answered HTTP 401 (the agent's secret may not match the upstream's)",
    )
    assert failure(task) == ("agent-error", "the upstream agent answered HTTP 401 (is the agent's secret right?)")


@in_process
def test_an_upstream_that_does_not_answer_in_time_fails_the_task_saying_how_long_it_waited(rpc, tenant, alice_key):
    with socket.socket() as silent:  # it takes connections and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        fronted(tenant, f"http://127.0.0.1:{silent.getsockname()[1]}/", timeout=1)
        task = rpc.send(FRONTED, "echo x", key=alice_key).result["task"]
    assert state(task) == "FAILED"
    assert failure(task)[1].endswith("/.well-known/agent-card.json did not arrive within 1 s")
    assert status_text(task) == session.CARD_PUBLIC  # no URL


@in_process
def test_an_upstream_that_cannot_be_reached_fails_the_task_saying_so(rpc, tenant, alice_key, upstream):
    url = upstream.base
    upstream.stop()
    fronted(tenant, url)
    task = rpc.send(FRONTED, "echo x", key=alice_key).result["task"]
    assert state(task) == "FAILED"
    assert failure(task)[1].startswith(
        f"the agent is misconfigured: the upstream's card at {url}/.well-known/agent-card.json could not be "
        "fetched (ConnectError"
    )
    assert status_text(task) == session.CARD_PUBLIC and "127.0.0.1" not in str(task["status"])


@in_process
@pytest.mark.parametrize("host", ["127.0.0.2", "[::ffff:127.0.0.3]"])
def test_an_upstream_outside_the_allowed_networks_is_refused_by_the_guard(rpc, tenant, alice_key, host):
    fronted(tenant, f"http://{host}:8080/agent/")
    task = rpc.send(FRONTED, "echo x", key=alice_key).result["task"]
    assert state(task) == "FAILED"
    assert failure(task) == (
        "misconfigured",
        f"the agent is misconfigured: the upstream's card at http://{host}:8080/agent/.well-known/agent-card.json "
        f"may not be fetched: this address is not allowed: {host}",
    )


@in_process
def test_a_card_that_points_its_interface_at_a_refused_address_is_refused_too(
    rpc, tenant, alice_key, upstream, monkeypatch
):
    elsewhere = card_v1(("http://127.0.0.2:9/rpc", "JSONRPC", "1.0"))

    async def fetched(url: str, *, timeout: float, headers: dict[str, str]) -> AgentCard:
        return cards.parse(elsewhere)

    monkeypatch.setattr(cards, "fetch", fetched)
    fronted(tenant, upstream.base)
    task = rpc.send(FRONTED, "echo x", key=alice_key).result["task"]
    assert state(task) == "FAILED"
    assert failure(task)[1].startswith(
        "the agent is misconfigured: the upstream's address is refused: this address is not allowed: 127.0.0.2"
    )


@in_process
def test_a_stream_that_drops_is_read_again_by_resubscribing_without_repeating_a_thing(
    rpc, tenant, alice_key, any_upstream
):
    any_upstream.cut_streams(after=2, times=1)  # the task and "working", then the line goes dead
    fronted(tenant, any_upstream.base)
    task = rpc.send(FRONTED, "drip on", key=alice_key).result["task"]
    assert state(task) == "COMPLETED" and artifact_text(task) == "echo: on [1] [2]"
    resubscribe = "SubscribeToTask" if any_upstream.version == "1.0" else "tasks/resubscribe"
    assert any_upstream.seen.methods() == [stream_method(any_upstream), resubscribe]
    log = stored_events(task["id"])
    assert log[:2] == [("status", "submitted"), ("status", "working")] and log[-1] == ("status", "completed")
    assert [k for k, _ in log].count("status") == 3  # working once, whatever the snapshots repeat


@in_process
def test_when_resubscribing_keeps_failing_the_upstream_task_is_polled_to_its_end(rpc, tenant, alice_key, upstream):
    upstream.cut_streams(after=2, times=4)  # the stream, then each of the three resubscriptions
    fronted(tenant, upstream.base)
    task = rpc.send(FRONTED, "drip on", key=alice_key).result["task"]
    assert state(task) == "COMPLETED" and artifact_text(task) == "echo: on [1] [2]"
    methods = upstream.seen.methods()
    assert methods[:4] == ["SendStreamingMessage", "SubscribeToTask", "SubscribeToTask", "SubscribeToTask"]
    assert set(methods[4:]) == {"GetTask"}


# --- through the live stack, with the official client on our side too ---------------------


def live_stack(test: Any) -> Any:
    return pytest.mark.live(pytest.mark.django_db(transaction=True)(test))


COMPLETED, FAILED, CANCELED = TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED


@asynccontextmanager
async def our_client(base: str, key: str, *, streaming: bool) -> AsyncIterator[Any]:
    """The a2a-sdk client in 1.0 mode against our fronted agent, as an SDK user would build it."""
    headers = {VERSION_HEADER: PROTOCOL_VERSION_1_0, "X-API-Key": key}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, f"{base}{FRONTED}").get_agent_card()
        async with ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card) as client:
            yield client


def ask(text: str, task_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER, task_id=task_id or None))


def live_text(task: Task) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)


def upstream_task_of(our_task_id: str) -> str:
    return StoredTask.objects.get(pk=our_task_id).executor_state["upstream"]["task_id"]


@live_stack
def test_live_a_blocking_send_is_answered_by_the_upstream_of_either_version(live, tenant, alice_key, any_upstream):
    fronted(tenant, any_upstream.base)

    async def scenario() -> None:
        async with our_client(live.url, alice_key, streaming=False) as client:
            (reply,) = [r async for r in client.send_message(ask("echo through the server"))]
            assert reply.task.status.state == COMPLETED
            assert live_text(reply.task) == "echo: through the server [1] [2]"
            assert get_message_text(reply.task.status.message) == "done"
            fetched = await client.get_task(GetTaskRequest(id=reply.task.id))
            assert (fetched.status.state, live_text(fetched)) == (COMPLETED, "echo: through the server [1] [2]")

    asyncio.run(scenario())
    assert any_upstream.seen.methods() == [stream_method(any_upstream)]


@live_stack
def test_live_a_streaming_send_shows_the_upstreams_chunks_as_they_arrive(live, tenant, alice_key, any_upstream):
    fronted(tenant, any_upstream.base)

    async def scenario() -> list[tuple[float, StreamResponse]]:
        async with our_client(live.url, alice_key, streaming=True) as client:
            return [(time.monotonic(), e) async for e in client.send_message(ask("drip slowly"))]

    received = asyncio.run(scenario())
    kinds = [e.WhichOneof("payload") for _, e in received]
    assert kinds == ["task", "status_update", "artifact_update", "artifact_update", "artifact_update", "status_update"]
    assert [e.status_update.status.state for _, e in received if e.HasField("status_update")] == [
        TaskState.TASK_STATE_WORKING,
        COMPLETED,
    ]
    chunks = [(at, e.artifact_update) for at, e in received if e.HasField("artifact_update")]
    assert [(c.append, c.last_chunk) for _, c in chunks] == [(False, False), (True, False), (True, True)]
    assert "".join(p.text for _, c in chunks for p in c.artifact.parts) == "echo: slowly [1] [2]"
    # The upstream waits 0.3 s before each chunk: they reach our client as they are made.
    assert chunks[2][0] - chunks[0][0] > 0.4


@live_stack
def test_live_subscribing_to_our_task_mid_run_gets_the_task_so_far_then_the_rest_live(
    live, tenant, alice_key, upstream
):
    fronted(tenant, upstream.base)

    async def scenario() -> tuple[list[StreamResponse], list[StreamResponse]]:
        async with (
            our_client(live.urls[0], alice_key, streaming=True) as sender,
            our_client(live.urls[1], alice_key, streaming=True) as watcher,
        ):
            sent: list[StreamResponse] = []
            async for event in sender.send_message(ask("drip watched")):
                sent.append(event)
                if event.HasField("artifact_update"):
                    break  # the first chunk is in: subscribe now, on the other web process
            task_id = sent[0].task.id
            subscribed = [e async for e in watcher.subscribe(SubscribeToTaskRequest(id=task_id))]
            return sent, subscribed

    sent, subscribed = asyncio.run(scenario())
    snapshot = subscribed[0].task
    assert snapshot.status.state == TaskState.TASK_STATE_WORKING
    assert live_text(snapshot).startswith("echo: watched")
    rest = "".join(
        p.text for e in subscribed[1:] if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts
    )
    assert live_text(snapshot) + rest == "echo: watched [1] [2]"
    assert subscribed[-1].status_update.status.state == COMPLETED


@live_stack
def test_live_canceling_our_task_cancels_the_upstream_task(live, tenant, alice_key, any_upstream):
    fronted(tenant, any_upstream.base)

    async def scenario() -> tuple[str, float]:
        async with our_client(live.url, alice_key, streaming=True) as client:
            events = client.send_message(ask("slow"))
            first = await anext(events)
            async for event in events:
                if event.HasField("status_update") and event.status_update.status.state == TaskState.TASK_STATE_WORKING:
                    break  # the upstream is at work
            await events.aclose()
            canceled = await client.cancel_task(CancelTaskRequest(id=first.task.id))
            assert canceled.status.state == CANCELED
            return first.task.id, time.monotonic()

    task_id, canceled_at = asyncio.run(scenario())
    heard = any_upstream.seen.wait_for_cancel(timeout=2.5)
    latency = time.monotonic() - canceled_at
    assert heard == [upstream_task_of(task_id)]
    assert latency < 2.0, latency  # one look at our task every 0.5 s, then one CancelTask
    assert stream_method(any_upstream) in any_upstream.seen.methods()
    assert any_upstream.seen.methods()[-1] == ("CancelTask" if any_upstream.version == "1.0" else "tasks/cancel")


@live_stack
def test_live_an_upstream_task_that_outlasts_our_time_limit_fails_ours_and_is_canceled(
    live, tenant, alice_key, upstream
):
    fronted(tenant, upstream.base)

    async def scenario() -> Task:
        async with our_client(live.url, alice_key, streaming=False) as client:
            return [r.task async for r in client.send_message(ask("stall"))][0]

    task = asyncio.run(scenario())
    assert task.status.state == FAILED
    assert failure({"id": task.id}) == ("time-limit", "the agent exceeded its time limit of 3 s")
    assert upstream.seen.wait_for_cancel(timeout=5) == [upstream_task_of(task.id)]


@live_stack
def test_live_input_required_then_a_follow_up_continues_the_same_upstream_task(live, tenant, alice_key, any_upstream):
    fronted(tenant, any_upstream.base)

    async def scenario() -> tuple[Task, Task]:
        async with our_client(live.url, alice_key, streaming=False) as client:
            (asked,) = [r.task async for r in client.send_message(ask("ask"))]
            (done,) = [r.task async for r in client.send_message(ask("green", task_id=asked.id))]
            return asked, done

    asked, done = asyncio.run(scenario())
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert get_message_text(asked.status.message) == "Which colour?"
    assert (done.id, done.status.state, live_text(done)) == (asked.id, COMPLETED, "colour: green")
    upstream_task = upstream_task_of(asked.id)
    assert any_upstream.seen.executions == [(upstream_task, "ask"), (upstream_task, "green")]


@live_stack
def test_live_an_upstream_error_fails_our_task_with_the_upstreams_code_and_keeps_its_message_for_the_admin(
    live, tenant, alice_key, any_upstream
):
    fronted(tenant, any_upstream.base)

    async def scenario() -> Task:
        async with our_client(live.url, alice_key, streaming=True) as client:
            return [e async for e in client.send_message(ask("boom"))][0].task

    task_id = asyncio.run(scenario()).id
    stored = StoredTask.objects.get(pk=task_id)
    assert stored.state == "failed"
    assert texts(stored.status_message.parts) == "the upstream agent answered with error -32603"
    assert stored.status_changes.order_by("-id").first().reason == (
        "the upstream agent answered with error -32603: the upstream agent broke"
    )


@live_stack
@pytest.mark.parametrize("host", ["127.0.0.2", "[::ffff:127.0.0.3]"])
def test_live_an_upstream_outside_the_allowed_networks_is_refused_by_the_guard(live, tenant, alice_key, host):
    fronted(tenant, f"http://{host}:8080/")

    async def scenario() -> Task:
        async with our_client(live.url, alice_key, streaming=False) as client:
            return [r.task async for r in client.send_message(ask("echo x"))][0]

    task = asyncio.run(scenario())
    assert task.status.state == FAILED
    kind, reason = failure({"id": task.id})
    assert kind == "misconfigured"
    assert reason.endswith(f"this address is not allowed: {host}") and "loopback" not in reason


@pytest.mark.parametrize("allowed", [False, True])
def test_a_card_offering_a_plain_http_interface_is_used_only_where_plain_http_upstreams_are(settings, allowed):
    from a2a.types import AgentCard, AgentInterface

    from tasks_app.executors.upstream import card as cards
    from tasks_app.executors.upstream.config import chosen_interface

    card = AgentCard(name="u")
    card.supported_interfaces.append(
        AgentInterface(url="http://127.0.0.1:9/a2a", protocol_binding="JSONRPC", protocol_version="1.0")
    )
    settings.WEBHOOK_ALLOW_HTTP = allowed
    if allowed:
        assert chosen_interface(card, "auto").interface.url == "http://127.0.0.1:9/a2a"
    else:
        # At every run, not only when the agent was saved: the card may have changed since.
        with pytest.raises(cards.CardProblem, match="WEBHOOK_ALLOW_HTTP"):
            chosen_interface(card, "auto")
