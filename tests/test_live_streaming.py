"""Live streams across the real thing: two daphne processes that share nothing but Postgres
and Redis, and a Celery worker that runs the agents in a third process."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import make_agent, user_message

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def live(live_each_mode):
    """Each test here runs against both modes: Celery workers, and the embedded mode's threads."""
    return live_each_mode


@contextmanager
def stream(
    base: str,
    path: str,
    method: str,
    params: dict,
    *,
    key: str | None = None,
    last_event_id: int | None = None,
    version: str | None = "1.0",
) -> Iterator[Iterator[tuple[int | None, dict[str, Any]]]]:
    """(id, result) of each event of one SSE response, as they arrive. `version` None sends no
    A2A-Version header, as 0.1's clients do."""
    headers = {"Accept": "text/event-stream", **({"A2A-Version": version} if version else {})}
    if key:
        headers["X-API-Key"] = key
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    with httpx.stream("POST", f"{base}{path}", json=body, headers=headers, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream"), response.read()

        def events():
            # Keep-alives keep every read short, so bound the whole stream: a stuck task
            # must fail the test, not hang the suite.
            deadline = time.monotonic() + 30
            event_id = None
            for line in response.iter_lines():
                assert time.monotonic() < deadline, "the stream did not end within 30 s"
                if line.startswith("id:"):
                    event_id = int(line[3:].strip())
                elif line.startswith("data:"):
                    payload = orjson.loads(line[5:].strip())
                    assert payload["id"] == body["id"] and "result" in payload, payload
                    yield event_id, payload["result"]
                    event_id = None

        yield events()


def state(result: dict) -> str:
    return (result.get("statusUpdate") or result.get("task"))["status"]["state"].removeprefix("TASK_STATE_")


def describe(result: dict) -> str:
    if "artifactUpdate" in result:
        update = result["artifactUpdate"]
        return f"chunk append={update['append']} last={update['lastChunk']}"
    return next(iter(result)) + ":" + state(result) if "message" not in result else "message"


@pytest.fixture
def slow_writer(tenant):
    return make_agent(tenant, "slowwriter", "writer", settings={"delay": 0.25, "paragraphs": 4})


WRITER_EVENTS = [
    "task:SUBMITTED",
    "statusUpdate:WORKING",
    "statusUpdate:WORKING",
    "chunk append=False last=False",
    "chunk append=True last=False",
    "chunk append=True last=False",
    "chunk append=True last=True",
    "statusUpdate:COMPLETED",
]


def test_the_writer_streams_progress_and_chunks_in_order_then_the_stream_ends(live, writer_agent, alice_key):
    with stream(
        live.url,
        "/agents/acme/writer/",
        "SendStreamingMessage",
        {"message": user_message("a poem about rivers")},
        key=alice_key,
    ) as events:
        received = list(events)
    assert [describe(r) for _, r in received] == WRITER_EVENTS
    assert [i for i, _ in received] == list(range(1, 9))
    text = "".join(r["artifactUpdate"]["artifact"]["parts"][0]["text"] for _, r in received if "artifactUpdate" in r)
    assert text.count("rivers") == 8  # four paragraphs, each naming the topic twice


def test_an_ambiguous_request_streams_until_the_writer_asks_for_input(live, writer_agent, alice_key):
    with stream(
        live.url,
        "/agents/acme/writer/",
        "SendStreamingMessage",
        {"message": user_message("write something")},
        key=alice_key,
    ) as events:
        received = [describe(r) for _, r in events]
    assert received == ["task:SUBMITTED", "statusUpdate:INPUT_REQUIRED"]


@pytest.mark.parametrize(
    "prefix, expected",
    [
        (
            "tck-stream-001",
            ["task:SUBMITTED", "statusUpdate:WORKING", "chunk append=False last=True", "statusUpdate:COMPLETED"],
        ),
        ("tck-stream-002", ["task:SUBMITTED", "statusUpdate:COMPLETED"]),
        (
            "tck-stream-artifact-chunked",
            ["task:SUBMITTED", "chunk append=True last=False", "chunk append=True last=True", "statusUpdate:COMPLETED"],
        ),
        ("tck-message-response", ["message"]),
    ],
)
def test_the_conformance_agent_streams_what_the_suite_expects(live, conformance_agent, prefix, expected):
    message = user_message("go", messageId=f"{prefix}-{uuid.uuid4().hex[:8]}")
    with stream(live.url, "/agents/acme/conformance/", "SendStreamingMessage", {"message": message}) as events:
        assert [describe(r) for _, r in events] == expected


def test_subscribers_on_either_web_process_see_the_same_events(live, slow_writer, alice_key):
    with stream(
        live.urls[0],
        "/agents/acme/slowwriter/",
        "SendStreamingMessage",
        {"message": user_message("a story about owls")},
        key=alice_key,
    ) as sender:
        first_id, first = next(sender)
        task_id = first["task"]["id"]
        with (
            stream(live.urls[1], "/agents/acme/slowwriter/", "SubscribeToTask", {"id": task_id}, key=alice_key) as one,
            stream(live.urls[1], "/agents/acme/slowwriter/", "SubscribeToTask", {"id": task_id}, key=alice_key) as two,
        ):
            from_sender = [(first_id, first)] + list(sender)
            seen = [list(one), list(two)]
    assert [describe(r) for _, r in from_sender] == WRITER_EVENTS
    for subscriber in seen:
        snapshot_id, snapshot = subscriber[0]
        assert "task" in snapshot
        # After its snapshot, a subscriber gets exactly what the sender got after that point.
        assert subscriber[1:] == [(i, r) for i, r in from_sender if i > snapshot_id]


def test_a_client_that_reconnects_on_the_other_process_gets_exactly_the_rest(live, slow_writer, alice_key):
    with stream(
        live.urls[0],
        "/agents/acme/slowwriter/",
        "SendStreamingMessage",
        {"message": user_message("a letter about tea")},
        key=alice_key,
    ) as events:
        before = [next(events) for _ in range(3)]  # then the connection drops
    task_id = before[0][1]["task"]["id"]
    with stream(
        live.urls[1],
        "/agents/acme/slowwriter/",
        "SubscribeToTask",
        {"id": task_id},
        key=alice_key,
        last_event_id=before[-1][0],
    ) as events:
        after = list(events)
    ids = [i for i, _ in before + after]
    assert ids == list(range(1, 9))  # no gap, no duplicate
    assert [describe(r) for _, r in before + after] == WRITER_EVENTS


def _open_streams(base: str) -> int:
    return httpx.get(f"{base}/healthz", timeout=5).json()["streams"]


def test_a_client_that_disconnects_frees_its_stream_at_once(live, tenant, alice_key):
    make_agent(tenant, "asker", "writer")
    with stream(
        live.url, "/agents/acme/asker/", "SendStreamingMessage", {"message": user_message("hmm")}, key=alice_key
    ) as events:
        task_id = next(events)[1]["task"]["id"]
    # The task waits for input: a subscription to it would last until the client leaves.
    with stream(live.urls[1], "/agents/acme/asker/", "SubscribeToTask", {"id": task_id}, key=alice_key) as events:
        next(events)
        while_open = _open_streams(live.urls[1])
    deadline = time.monotonic() + 5
    while (left := _open_streams(live.urls[1])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (while_open, left) == (1, 0)


def test_idle_streams_hold_no_database_connection_or_transaction(live, tenant, alice_key):
    """The web process has DB_POOL_MAX=8 connections here: if idle streams held one each,
    twenty of them would leave none for the request made while they are open."""
    from django.db import connection

    make_agent(tenant, "idler", "writer")
    task_ids = [
        call_rpc(live.urls[1], "/agents/acme/idler/", "SendMessage", {"message": user_message("hmm")}, alice_key)[
            "task"
        ]["id"]
        for _ in range(20)
    ]
    with ExitStack() as held:
        streams = [
            held.enter_context(
                stream(live.urls[1], "/agents/acme/idler/", "SubscribeToTask", {"id": task_id}, key=alice_key)
            )
            for task_id in task_ids
        ]
        for events in streams:  # (a generator dropped would close its connection)
            next(events)
        assert _open_streams(live.urls[1]) == 20
        fetched = call_rpc(live.urls[1], "/agents/acme/idler/", "GetTask", {"id": task_ids[0]}, alice_key, timeout=5)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid()"
            )
            (in_transaction,) = cursor.fetchone()
    assert fetched["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert in_transaction == 0


def call_rpc(base: str, path: str, method: str, params: dict, key: str, timeout: float = 30) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = httpx.post(f"{base}{path}", json=body, headers={"A2A-Version": "1.0", "X-API-Key": key}, timeout=timeout)
    return response.json()["result"]


# --- A2A 0.1 over the live stack -------------------------------------------------------------


def describe_v01(result: dict) -> str:
    if "artifact" in result:
        artifact = result["artifact"]
        return f"chunk {artifact['index']} append={artifact['append']} last={artifact['lastChunk']}"
    return f"{result['status']['state']} final={result['final']}"


V01_WRITER_EVENTS = [
    "submitted final=False",
    "working final=False",
    "working final=False",
    "chunk 0 append=False last=False",
    "chunk 0 append=True last=False",
    "chunk 0 append=True last=False",
    "chunk 0 append=True last=True",
    "completed final=True",
]


def test_a_0_1_send_subscribe_and_resubscribe_across_web_processes_end_with_final(live, slow_writer, alice_key):
    task_id = uuid.uuid4().hex  # the client's id
    params = {
        "id": task_id,
        "message": {"role": "user", "parts": [{"type": "text", "text": "a story about owls"}]},
    }
    with stream(
        live.urls[0], "/agents/acme/slowwriter/", "tasks/sendSubscribe", params, key=alice_key, version=None
    ) as sent:
        first_id, first = next(sent)
        assert first["id"] == task_id
        # Another process follows the same task by the client's id, from its current status.
        with stream(
            live.urls[1], "/agents/acme/slowwriter/", "tasks/resubscribe", {"id": task_id}, key=alice_key, version=None
        ) as again:
            from_sender = [(first_id, first), *sent]
            followed = list(again)
    assert [describe_v01(r) for _, r in from_sender] == V01_WRITER_EVENTS
    assert {r["id"] for _, r in from_sender} == {task_id}
    # The subscriber ends on the same final event, having seen the rest of the same log.
    assert followed[-1][1]["final"] is True and followed[-1][1]["status"]["state"] == "completed"
    snapshot_id, snapshot = followed[0]
    assert "status" in snapshot and snapshot["id"] == task_id
    assert [i for i, _ in followed[1:]] == [i for i, _ in from_sender if i > snapshot_id]
    # A resubscription with Last-Event-ID replays what came after it, to the final event.
    with stream(
        live.urls[1],
        "/agents/acme/slowwriter/",
        "tasks/resubscribe",
        {"id": task_id},
        key=alice_key,
        last_event_id=4,
        version=None,
    ) as replay:
        replayed = list(replay)
    assert [describe_v01(r) for _, r in replayed] == V01_WRITER_EVENTS[4:]
    assert [i for i, _ in replayed] == [5, 6, 7, 8]
