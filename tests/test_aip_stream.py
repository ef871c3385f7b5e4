"""AIP's streaming style (seed 004, 6.2): `stream` answers text/event-stream, each event a
JSON-RPC response whose result is {eventSeq, eventData}; re-stream replays after lastEventSeq
and follows on; the closing rules. In-process for what ends by itself, and over two daphne
processes and a real Celery worker for the rest."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest
from asgiref.sync import async_to_sync

from tests.conftest import make_agent
from tests.test_aip import Planner, message, new_id, rpc

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def live(live_each_mode):
    """Each test here runs against both modes: Celery workers, and the embedded mode's threads."""
    return live_each_mode


@pytest.fixture
def planner(tenant, monkeypatch):
    from tasks_app.executors import REGISTRY

    monkeypatch.setitem(REGISTRY, Planner.name, Planner)
    return make_agent(tenant, "planner", Planner.name, streaming=True, push_notifications=True)


def drained(client, path: str, params: dict[str, Any], *, key: str, method: str = "stream") -> list[dict[str, Any]]:
    """The JSON-RPC responses of a stream that ends, in order."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params})
    response = client.post(f"{path}/{method}", data=body, content_type="application/json", headers={"X-API-Key": key})
    if not response.streaming:
        return [orjson.loads(response.content)]
    assert response["Content-Type"].startswith("text/event-stream")

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    frames = async_to_sync(read)().split(b"\n\n")
    return [orjson.loads(line[5:]) for f in frames for line in f.split(b"\n") if line.startswith(b"data:")]


PLANNER = "/agents/acme/planner/aip"


def test_a_start_the_agent_rejects_streams_only_the_rejected_task_and_closes(client, planner, alice_key):
    task_id = new_id()
    events = drained(client, PLANNER, {"message": message("start", task_id, "reject")}, key=alice_key)
    assert [e["id"] for e in events] == ["s-1"]
    [only] = events
    assert only["result"]["eventData"]["type"] == "task"
    assert only["result"]["eventData"]["status"]["state"] == "rejected"
    assert b"accepted" not in orjson.dumps(events)


def test_a_failing_task_streams_to_its_failure_and_the_stream_closes(client, planner, alice_key):
    events = drained(client, PLANNER, {"message": message("start", new_id(), "fail")}, key=alice_key)
    last = events[-1]["result"]["eventData"]
    assert (last.get("status") or {}).get("state") == "failed"


def test_re_stream_replays_the_events_after_last_event_seq(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "fail")  # seq 1 accepted, 2 working, 3 failed
    params = {"message": message("re-stream", task_id, commandParams={"lastEventSeq": 1})}
    events = [e["result"] for e in drained(client, PLANNER, params, key=alice_key)]
    assert [e["eventSeq"] for e in events] == [2, 3]
    assert [e["eventData"]["type"] for e in events] == ["status-update", "status-update"]
    assert [e["eventData"]["status"]["state"] for e in events] == ["working", "failed"]
    assert {e["eventData"]["taskId"] for e in events} == {task_id}
    whole = [
        e["result"]["eventSeq"]
        for e in drained(client, PLANNER, {"message": message("re-stream", task_id)}, key=alice_key)
    ]
    assert whole == [1, 2, 3]


def test_re_stream_past_the_last_event_is_a_json_rpc_error(client, planner, alice_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "fail")
    params = {"message": message("re-stream", task_id, commandParams={"lastEventSeq": 99})}
    [answer] = drained(client, PLANNER, params, key=alice_key)
    assert answer["error"]["code"] == -32602 and "99" in answer["error"]["data"]["details"]


def test_re_stream_of_another_callers_task_is_task_not_found(client, planner, alice_key, bob_key):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "fail")
    [answer] = drained(client, PLANNER, {"message": message("re-stream", task_id)}, key=bob_key)
    assert answer["error"]["code"] == -32001


def test_streaming_is_refused_by_an_agent_without_it(client, tenant, alice_key, monkeypatch):
    from tasks_app.executors import REGISTRY

    monkeypatch.setitem(REGISTRY, Planner.name, Planner)
    make_agent(tenant, "quiet", Planner.name, streaming=False)
    [answer] = drained(client, "/agents/acme/quiet/aip", {"message": message("start", new_id(), "x")}, key=alice_key)
    assert answer["error"]["code"] == -32004


# --- over the live stack -------------------------------------------------------------------------


@contextmanager
def live_stream(base: str, params: dict[str, Any], key: str):
    body = {"jsonrpc": "2.0", "id": "live", "method": "stream", "params": params}
    headers = {"X-API-Key": key, "Accept": "text/event-stream"}
    with httpx.stream("POST", f"{base}/agents/acme/slowwriter/aip/stream", json=body, headers=headers, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.read()

        def events():
            deadline = time.monotonic() + 30
            for line in r.iter_lines():
                assert time.monotonic() < deadline, "the stream did not end within 30 s"
                if line.startswith("data:"):
                    payload = orjson.loads(line[5:])
                    assert payload["id"] == "live" and "result" in payload, payload
                    yield payload["result"]

        yield events()


def describe(result: dict[str, Any]) -> str:
    data = result["eventData"]
    if data["type"] == "product-chunk":
        return f"chunk append={data['append']} last={data['lastChunk']}"
    return f"{data['type']}:{data['status']['state']}"


@pytest.fixture
def slow_writer(tenant):
    return make_agent(tenant, "slowwriter", "writer", settings={"delay": 0.25, "paragraphs": 4})


def live_rpc(base: str, key: str, command: str, task_id: str, text: str | None = None) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "rpc", "params": {"message": message(command, task_id, text)}}
    response = httpx.post(f"{base}/agents/acme/slowwriter/aip/rpc", json=body, headers={"X-API-Key": key}, timeout=30)
    return response.json()["result"]


@pytest.mark.live
def test_a_stream_lasts_through_awaiting_completion_until_the_leader_completes_on_another_connection(
    live, slow_writer, alice_key
):
    task_id = new_id()
    received: list[dict[str, Any]] = []
    with live_stream(live.urls[0], {"message": message("start", task_id, "a poem about rivers")}, alice_key) as events:
        for result in events:
            received.append(result)
            if describe(result) == "status-update:awaiting-completion":
                break
        # The stream stays open; the Leader completes the task on a new connection (another
        # web process), which answers with the final task and ends the stream.
        done = live_rpc(live.urls[1], alice_key, "complete", task_id)
        rest = list(events)
    assert done["status"]["state"] == "completed"
    seqs = [r["eventSeq"] for r in received + rest]
    assert seqs == sorted(set(seqs)), seqs  # strictly increasing
    assert describe(received[0]).startswith("task:")
    assert "chunk append=False last=False" in [describe(r) for r in received]
    assert [describe(r) for r in rest] == ["status-update:completed"]


@pytest.mark.live
def test_a_re_stream_on_another_process_replays_from_last_event_seq_then_follows_live(live, slow_writer, alice_key):
    task_id = new_id()
    seen: list[dict[str, Any]] = []
    with live_stream(live.urls[0], {"message": message("start", task_id, "a poem about rivers")}, alice_key) as events:
        for result in events:
            seen.append(result)
            if len(seen) == 2:
                break  # the connection drops here
    last = seen[-1]["eventSeq"]
    params = {"message": message("re-stream", task_id, commandParams={"lastEventSeq": last})}
    resumed: list[dict[str, Any]] = []
    with live_stream(live.urls[1], params, alice_key) as events:
        for result in events:
            resumed.append(result)
            if describe(result) == "status-update:awaiting-completion":
                break
        live_rpc(live.urls[0], alice_key, "complete", task_id)
        resumed += list(events)
    assert [r["eventSeq"] for r in resumed] == list(range(last + 1, last + 1 + len(resumed)))
    assert describe(resumed[-1]) == "status-update:completed"


def test_message_ids_in_streams_are_unique_per_request(client, planner, alice_key):
    # Two streams of two tasks never mix their events (each names its own task).
    a, b = new_id(), new_id()
    first = drained(client, PLANNER, {"message": message("start", a, "fail")}, key=alice_key)
    second = drained(client, PLANNER, {"message": message("start", b, "reject")}, key=alice_key)
    assert {e["result"]["eventData"].get("id") or e["result"]["eventData"]["taskId"] for e in first} == {a}
    assert {e["result"]["eventData"].get("id") or e["result"]["eventData"]["taskId"] for e in second} == {b}
