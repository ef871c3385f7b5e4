"""HTTP+JSON across the real thing: two daphne processes (the routes' consumer), Postgres,
Redis and a Celery worker. Streams carry bare StreamResponses, resume on either process, and
end or free themselves as the JSON-RPC binding's do."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import make_agent, user_message
from tests.test_live_streaming import WRITER_EVENTS, describe

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def live(live_each_mode):
    """Each test here runs against both modes: Celery workers, and the embedded mode's threads."""
    return live_each_mode


@contextmanager
def rest_stream(
    base: str,
    route: str,
    *,
    http_method: str = "POST",
    body: dict | None = None,
    key: str | None = None,
    last_event_id: int | None = None,
) -> Iterator[Iterator[tuple[int | None, dict[str, Any]]]]:
    """(id, StreamResponse) of each event of one SSE response, as they arrive."""
    headers = {"A2A-Version": "1.0", "Accept": "text/event-stream"}
    if key:
        headers["X-API-Key"] = key
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    with httpx.stream(http_method, f"{base}{route}", json=body, headers=headers, timeout=30) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")

        def events():
            deadline = time.monotonic() + 30
            event_id = None
            for line in response.iter_lines():
                assert time.monotonic() < deadline, "the stream did not end within 30 s"
                if line.startswith("id:"):
                    event_id = int(line[3:].strip())
                elif line.startswith("event:"):
                    raise AssertionError(f"an {line} frame: {response.read()!r}")
                elif line.startswith("data:"):
                    payload = orjson.loads(line[5:].strip())
                    assert "jsonrpc" not in payload and "result" not in payload, payload
                    yield event_id, payload
                    event_id = None

        yield events()


@pytest.fixture
def slow_writer(tenant):
    return make_agent(tenant, "slowwriter", "writer", settings={"delay": 0.25, "paragraphs": 4})


SLOW = "/agents/acme/slowwriter/"


def test_the_writer_streams_progress_and_chunks_in_order_as_bare_stream_responses(live, writer_agent, alice_key):
    body = {"message": user_message("a poem about rivers")}
    with rest_stream(live.url, "/agents/acme/writer/message:stream", body=body, key=alice_key) as events:
        received = list(events)
    assert [describe(r) for _, r in received] == WRITER_EVENTS
    assert [i for i, _ in received] == list(range(1, 9))


def test_the_conformance_agent_s_bare_reply_is_the_whole_stream(live, conformance_agent):
    body = {"message": user_message("go", messageId=f"tck-message-response-{uuid.uuid4().hex[:8]}")}
    with rest_stream(live.url, "/agents/acme/conformance/message:stream", body=body) as events:
        assert [describe(r) for _, r in events] == ["message"]


@pytest.mark.parametrize("http_method", ["GET", "POST"])
def test_subscribers_on_the_other_web_process_see_the_same_events(live, slow_writer, alice_key, http_method):
    body = {"message": user_message("a story about owls")}
    with rest_stream(live.urls[0], f"{SLOW}message:stream", body=body, key=alice_key) as sender:
        first_id, first = next(sender)
        route = f"{SLOW}tasks/{first['task']['id']}:subscribe"
        with rest_stream(live.urls[1], route, http_method=http_method, key=alice_key) as subscriber:
            from_sender = [(first_id, first), *sender]
            seen = list(subscriber)
    assert [describe(r) for _, r in from_sender] == WRITER_EVENTS
    snapshot_id, snapshot = seen[0]
    assert "task" in snapshot
    assert seen[1:] == [(i, r) for i, r in from_sender if i > snapshot_id]


def test_a_client_that_reconnects_on_the_other_process_gets_exactly_the_rest(live, slow_writer, alice_key):
    body = {"message": user_message("a letter about tea")}
    with rest_stream(live.urls[0], f"{SLOW}message:stream", body=body, key=alice_key) as events:
        before = [next(events) for _ in range(3)]  # then the connection drops
    route = f"{SLOW}tasks/{before[0][1]['task']['id']}:subscribe"
    with rest_stream(live.urls[1], route, http_method="GET", key=alice_key, last_event_id=before[-1][0]) as events:
        after = list(events)
    assert [i for i, _ in before + after] == list(range(1, 9))
    assert [describe(r) for _, r in before + after] == WRITER_EVENTS


def test_a_subscriber_that_disconnects_frees_its_stream_at_once(live, tenant, alice_key):
    make_agent(tenant, "asker", "writer")
    sent = httpx.post(
        f"{live.url}/agents/acme/asker/message:send",
        json={"message": user_message("hmm")},
        headers={"A2A-Version": "1.0", "X-API-Key": alice_key},
        timeout=30,
    ).json()["task"]
    route = f"/agents/acme/asker/tasks/{sent['id']}:subscribe"
    with rest_stream(live.urls[1], route, http_method="GET", key=alice_key) as events:
        next(events)
        while_open = httpx.get(f"{live.urls[1]}/healthz", timeout=5).json()["streams"]
    deadline = time.monotonic() + 5
    while (left := httpx.get(f"{live.urls[1]}/healthz", timeout=5).json()["streams"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (while_open, left) == (1, 0)


def test_under_daphne_the_card_is_still_the_card_and_other_paths_answer_as_routes(live, echo_agent, alice_key):
    card = httpx.get(f"{live.url}/agents/acme/echo/.well-known/agent-card.json", timeout=10)
    assert card.status_code == 200 and card.json()["name"] == "Echo"
    headers = {"A2A-Version": "1.0", "X-API-Key": alice_key}
    nothing = httpx.get(f"{live.url}/agents/acme/echo/nothing", headers=headers, timeout=10)
    assert nothing.status_code == 404 and nothing.json()["error"]["status"] == "NOT_FOUND"
    wrong = httpx.get(f"{live.url}/agents/acme/echo/message:send", headers=headers, timeout=10)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    anonymous = httpx.get(f"{live.url}/agents/acme/echo/tasks", headers={"A2A-Version": "1.0"}, timeout=10)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["status"] == "UNAUTHENTICATED"
    sent = httpx.post(f"{live.url}/agents/acme/echo/message:send", json={"message": user_message()}, headers=headers)
    task = sent.json()["task"]
    got = httpx.get(f"{live.urls[1]}/agents/acme/echo/tasks/{task['id']}", params={"historyLength": 1}, headers=headers)
    assert got.status_code == 200 and got.headers["content-type"] == "application/json"
    assert got.json()["status"]["state"] == "TASK_STATE_COMPLETED" and len(got.json()["history"]) == 1


def test_a_terminal_task_s_subscription_is_refused_before_any_stream(live, echo_agent, alice_key):
    headers = {"A2A-Version": "1.0", "X-API-Key": alice_key}
    task = httpx.post(
        f"{live.url}/agents/acme/echo/message:send", json={"message": user_message()}, headers=headers, timeout=30
    ).json()["task"]
    refused = httpx.post(f"{live.url}/agents/acme/echo/tasks/{task['id']}:subscribe", headers=headers, timeout=10)
    assert refused.status_code == 400 and refused.headers["content-type"] == "application/json"
    assert refused.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"
