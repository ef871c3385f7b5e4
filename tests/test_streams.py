"""SSE streams through the ASGI application in-process: the Channels consumer, the event log,
hints, replay and cleanup. No worker: the test writes the agent's side through services, so
it decides exactly when each event is committed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator

from tasks_app import hints, selectors, services, streams
from tasks_app.lifecycle import TaskState
from tests.conftest import run_async
from tests.test_services import receive

pytestmark = pytest.mark.django_db(transaction=True)


run = run_async


@dataclass
class Frame:
    id: int | None
    data: dict[str, Any] | None
    comment: str | None

    @property
    def result(self) -> dict[str, Any]:
        assert self.data and "result" in self.data, self
        return self.data["result"]


class SseCall:
    """One POST to the application, read frame by frame as a client would."""

    def __init__(
        self,
        method: str,
        params: dict,
        *,
        key: str | None = None,
        last_event_id: str | None = None,
        path: str = "/agents/acme/echo/",
        client: tuple[str, int] = ("127.0.0.1", 50000),
        version: str = "1.0",
    ) -> None:
        from agentserver.asgi import application

        headers = [(b"content-type", b"application/json"), (b"host", b"testserver")]
        if version:
            headers.append((b"a2a-version", version.encode()))
        if key:
            headers.append((b"x-api-key", key.encode()))
        if last_event_id is not None:
            headers.append((b"last-event-id", last_event_id.encode()))
        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": headers,
            "server": ("testserver", 80),
            "client": client,
        }
        self.body = orjson.dumps({"jsonrpc": "2.0", "id": 9, "method": method, "params": params})
        self.communicator = ApplicationCommunicator(application, scope)
        self.buffer = b""
        self.ended = False

    async def start(self) -> tuple[int, dict[str, str]]:
        await self.communicator.send_input({"type": "http.request", "body": self.body, "more_body": False})
        start = await self.communicator.receive_output(5)
        assert start["type"] == "http.response.start", start
        return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}

    async def frame(self, timeout: float = 5) -> Frame | None:
        """The next frame (a heartbeat is a lone comment line: protocols.bindings.base); None
        when the response has ended."""
        while True:
            self.buffer = self.buffer.lstrip(b"\n")
            if self.buffer.startswith(b":") and b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                return Frame(id=None, data=None, comment=line[1:].decode().strip())
            if b"\n\n" in self.buffer:
                break
            if self.ended:
                return None
            message = await self.communicator.receive_output(timeout)
            self.buffer += message.get("body", b"")
            self.ended = not message.get("more_body", False)
        raw, self.buffer = self.buffer.split(b"\n\n", 1)
        fields: dict[str, str] = {}
        for line in raw.decode().split("\n"):
            name, _, value = line.partition(":")
            fields[name or "comment"] = value.strip()
        return Frame(
            id=int(fields["id"]) if "id" in fields else None,
            data=orjson.loads(fields["data"]) if "data" in fields else None,
            comment=fields.get("comment"),
        )

    async def event(self, timeout: float = 5) -> Frame | None:
        """The next frame that is not a keep-alive comment."""
        while (frame := await self.frame(timeout)) is not None and frame.data is None:
            pass
        return frame

    async def rest(self, timeout: float = 5) -> list[Frame]:
        events = []
        while (frame := await self.event(timeout)) is not None:
            events.append(frame)
        return events

    async def disconnect(self) -> None:
        await self.communicator.send_input({"type": "http.disconnect"})
        await self.communicator.wait(2)


def kind(frame: Frame) -> str:
    (name,) = frame.result.keys()
    return name


def state(frame: Frame) -> str:
    result = frame.result
    return (result.get("statusUpdate") or result.get("task"))["status"]["state"]


@pytest.fixture
def held_task(echo_agent, monkeypatch):
    """A submitted task no agent will touch: the test plays the agent."""
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    return receive(echo_agent)


agent_writes = sync_to_async(services.task_transition)
chunk_writes = sync_to_async(services.artifact_append)


def subscribe(task, key, **kw) -> SseCall:
    return SseCall("SubscribeToTask", {"id": str(task.pk)}, key=key, **kw)


# --- SubscribeToTask --------------------------------------------------------------------


def test_a_subscriber_gets_the_task_first_then_each_event_as_it_is_committed(held_task, alice_key):
    async def scenario():
        call = subscribe(held_task, alice_key)
        status, headers = await call.start()
        first = await call.event()
        await agent_writes(task_id=held_task.pk, state=TaskState.WORKING, parts=[{"type": "text", "text": "on it"}])
        working = await call.event()
        await chunk_writes(task_id=held_task.pk, parts=[{"type": "text", "text": "a"}], artifact_id="out", append=True)
        await chunk_writes(
            task_id=held_task.pk, parts=[{"type": "text", "text": "b"}], artifact_id="out", append=True, last_chunk=True
        )
        await agent_writes(task_id=held_task.pk, state=TaskState.COMPLETED)
        return status, headers, first, working, await call.rest()

    status, headers, first, working, rest = run(scenario())
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
    assert headers["content-encoding"] == "identity"
    assert (first.id, kind(first), state(first)) == (1, "task", "TASK_STATE_SUBMITTED")
    assert (working.id, state(working)) == (2, "TASK_STATE_WORKING")
    assert [f.id for f in rest] == [3, 4, 5]
    chunks = [f.result["artifactUpdate"] for f in rest[:2]]
    assert [(c["artifact"]["parts"][0]["text"], c["append"], c["lastChunk"]) for c in chunks] == [
        ("a", True, False),
        ("b", True, True),
    ]
    assert state(rest[2]) == "TASK_STATE_COMPLETED"  # and then the response ended


def test_a_subscription_outlasts_an_input_request_and_ends_when_the_task_is_over(held_task, alice_key):
    async def scenario():
        call = subscribe(held_task, alice_key)
        await call.start()
        await agent_writes(task_id=held_task.pk, state=TaskState.INPUT_REQUIRED)
        await agent_writes(task_id=held_task.pk, state=TaskState.CANCELED)
        return await call.rest()

    assert [state(f) for f in run(scenario())] == [
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_CANCELED",
    ]


def test_a_reconnect_with_last_event_id_gets_exactly_the_events_it_missed(held_task, alice_key, store_path):
    async def scenario():
        first = subscribe(held_task, alice_key)
        await first.start()
        seen = [await first.event()]
        await agent_writes(task_id=held_task.pk, state=TaskState.WORKING)
        seen.append(await first.event())
        await first.disconnect()
        # Missed while away: three chunks. Then the client comes back, then the task ends.
        for text in "xyz":
            await chunk_writes(
                task_id=held_task.pk, parts=[{"type": "text", "text": text}], artifact_id="o", append=True
            )
        again = subscribe(held_task, alice_key, last_event_id=str(seen[-1].id))
        await again.start()
        missed = [await again.event() for _ in range(3)]
        await agent_writes(task_id=held_task.pk, state=TaskState.COMPLETED)
        return seen, missed, await again.rest()

    seen, missed, live = run(scenario())
    assert [f.id for f in seen] == [1, 2]
    assert [f.id for f in missed] == [3, 4, 5]
    assert [f.result["artifactUpdate"]["artifact"]["parts"][0]["text"] for f in missed] == ["x", "y", "z"]
    assert [(f.id, state(f)) for f in live] == [(6, "TASK_STATE_COMPLETED")]


def test_a_reconnect_after_the_task_finished_replays_the_end_and_closes(held_task, alice_key):
    async def scenario():
        await agent_writes(task_id=held_task.pk, state=TaskState.WORKING)
        await agent_writes(task_id=held_task.pk, state=TaskState.COMPLETED)
        call = subscribe(held_task, alice_key, last_event_id="1")
        await call.start()
        return await call.rest()

    assert [(f.id, state(f)) for f in run(scenario())] == [(2, "TASK_STATE_WORKING"), (3, "TASK_STATE_COMPLETED")]


def test_two_subscribers_each_get_every_event_in_order_from_one_read_per_wake_up(held_task, alice_key, monkeypatch):
    reads = []
    real = selectors.events_after
    monkeypatch.setattr(selectors, "events_after", lambda *a, **kw: reads.append(a) or real(*a, **kw))

    async def scenario():
        calls = [subscribe(held_task, alice_key) for _ in range(2)]
        for call in calls:
            await call.start()
            await call.event()
        reads.clear()
        for text in "abc":
            await chunk_writes(
                task_id=held_task.pk, parts=[{"type": "text", "text": text}], artifact_id="o", append=True
            )
            for call in calls:
                await call.event()
        await agent_writes(task_id=held_task.pk, state=TaskState.COMPLETED)
        return [await call.rest() for call in calls]

    first, second = run(scenario())
    assert [f.id for f in first] == [f.id for f in second] == [5]
    # Four events, two streams: reading for itself, each stream would make four reads (eight
    # in all). Shared, it is one per event, plus at most each stream's own first read.
    assert len(reads) <= 6, reads


def test_a_lost_hint_still_delivers_the_event_within_one_heartbeat(held_task, alice_key, settings, monkeypatch):
    settings.SSE_HEARTBEAT = 0.3
    monkeypatch.setattr(hints, "publish", lambda task_id, state="", **_: None)  # every hint is lost

    async def scenario():
        call = subscribe(held_task, alice_key)
        await call.start()
        await call.event()
        while (await call.frame()).comment is None:  # idle now: it has read the log and waits
            pass
        await agent_writes(task_id=held_task.pk, state=TaskState.COMPLETED)
        return await call.rest(timeout=2)  # no hint will come: only the heartbeat's read finds it

    assert [(f.id, state(f)) for f in run(scenario())] == [(2, "TASK_STATE_COMPLETED")]


def test_a_client_that_leaves_frees_its_stream_feed_and_hint_registration(held_task, alice_key):
    async def scenario():
        call = subscribe(held_task, alice_key)
        await call.start()
        await call.event()
        during = streams.open_feeds(), dict(hints.listener().watches)
        await call.disconnect()  # returns only once the consumer has finished
        return during, streams.open_feeds(), dict(hints.listener().watches)

    during, after, watches_after = run(scenario())
    assert during[0] == {str(held_task.pk): 1} and str(held_task.pk) in during[1]
    assert after == {} and str(held_task.pk) not in watches_after


# --- what is refused before a stream opens (plain JSON-RPC answers) ------------------------


def _refusal(call: SseCall) -> dict[str, Any]:
    async def scenario():
        status, headers = await call.start()
        body = await call.communicator.receive_output(5)
        return status, headers, orjson.loads(body["body"])

    status, headers, body = run(scenario())
    assert status == 200 and headers["content-type"] == "application/json"
    return body["error"]


def test_subscribing_to_an_unknown_task_is_task_not_found(echo_agent, alice_key):
    assert (
        _refusal(SseCall("SubscribeToTask", {"id": "4c9c5d3e-0000-4000-8000-000000000000"}, key=alice_key))["code"]
        == -32001
    )


def test_subscribing_to_another_callers_task_is_task_not_found(held_task, bob_key):
    assert _refusal(subscribe(held_task, bob_key))["code"] == -32001


def test_subscribing_to_a_finished_task_is_an_unsupported_operation(held_task, alice_key):
    services.task_transition(task_id=held_task.pk, state=TaskState.COMPLETED)
    error = _refusal(subscribe(held_task, alice_key))
    assert error["code"] == -32004 and "completed" in error["message"]


def test_a_last_event_id_beyond_the_log_is_invalid_params(held_task, alice_key):
    error = _refusal(subscribe(held_task, alice_key, last_event_id="99"))
    assert error["code"] == -32602 and "ahead" in error["message"]


def test_a_last_event_id_that_is_not_a_number_is_invalid_params(held_task, alice_key):
    assert _refusal(subscribe(held_task, alice_key, last_event_id="abc"))["code"] == -32602


def test_streaming_methods_need_the_api_key_like_any_other(held_task):
    async def scenario():
        return await subscribe(held_task, None).start()

    status, headers = run(scenario())
    assert status == 401 and "x-api-key" in headers["www-authenticate"].lower()


# --- SendStreamingMessage ---------------------------------------------------------------


def test_send_streaming_message_streams_the_echo_task_to_its_end(echo_agent, alice_key):
    """Celery runs eagerly in-process here: the agent has finished before the stream reads,
    so everything comes from the log, in order."""

    async def scenario():
        call = SseCall(
            "SendStreamingMessage",
            {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "ping"}]}},
            key=alice_key,
        )
        await call.start()
        return await call.rest()

    frames = run(scenario())
    assert kind(frames[0]) == "task" and frames[0].id == 1 and state(frames[0]) == "TASK_STATE_SUBMITTED"
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert state(frames[-1]) == "TASK_STATE_COMPLETED"


def test_a_bare_message_reply_is_the_whole_stream(conformance_agent):
    async def scenario():
        call = SseCall(
            "SendStreamingMessage",
            {"message": {"messageId": "tck-message-response-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
            path="/agents/acme/conformance/",
        )
        await call.start()
        return await call.rest()

    (only,) = run(scenario())
    assert kind(only) == "message" and "taskId" not in only.result["message"]


def test_a_streaming_send_takes_an_inline_push_config_too(echo_agent, alice_key, push_jobs):
    from push.models import PushConfig

    inline = {"id": "inline", "url": "http://127.0.0.1:9/hook"}

    async def scenario():
        call = SseCall(
            "SendStreamingMessage",
            {
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "ping"}]},
                "configuration": {"taskPushNotificationConfig": inline},
            },
            key=alice_key,
        )
        await call.start()
        return await call.rest()

    frames = run(scenario())
    config = PushConfig.objects.get(task_id=frames[0].result["task"]["id"])
    assert (config.config_id, config.delivered_seq) == ("inline", 0)  # from the task's first event
    assert state(frames[-1]) == "TASK_STATE_COMPLETED" and push_jobs
