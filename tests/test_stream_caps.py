"""The cap on open SSE streams per caller (docs/limits.md): refused with 429 and Retry-After
in each dialect's form before anything is stored; counted per key (or anonymous address)
within a tenant, across processes in Redis; a slot comes back when its stream ends, and one
a killed process left behind expires unless a live stream renews it."""

from __future__ import annotations

import asyncio

import orjson
import pytest
import redis

from protocols import stream_slots
from tasks_app.models import Task
from tests.conftest import make_agent, user_message
from tests.test_aip import Planner, message, new_id
from tests.test_streams import SseCall, run, subscribe

pytestmark = pytest.mark.django_db(transaction=True)
PUBLIC = "/agents/acme/conformance/"


@pytest.fixture
def held_task(echo_agent, monkeypatch):
    """A submitted task of alice's that no agent touches: a subscription to it stays open."""
    from tasks_app import dispatch
    from tests.test_services import receive

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    return receive(echo_agent)


@pytest.fixture(autouse=True)
def slots(settings):
    """The slots of this test session's Redis database, none before and after each test."""
    store = redis.Redis.from_url(settings.RATE_LIMIT_REDIS_URL)

    def clear():
        for key in store.scan_iter(stream_slots.KEY_PREFIX + "*"):
            store.delete(key)

    clear()
    yield store
    clear()
    store.close()


def limits(tenant, **fields):
    for name, value in fields.items():
        setattr(tenant, name, value)
    tenant.save()


async def opened(call: SseCall) -> SseCall:
    status, headers = await call.start()
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), (status, headers)
    assert (await call.event()).data is not None  # the first event: the stream is open
    return call


async def refusal(call: SseCall) -> tuple[int, dict[str, str], dict]:
    status, headers = await call.start()
    body = await call.communicator.receive_output(5)
    return status, headers, orjson.loads(body["body"])


def test_a_key_at_its_cap_is_refused_429_another_key_is_not_and_a_closed_stream_frees_a_slot(
    held_task, tenant, alice_key, bob_key
):
    limits(tenant, max_streams_per_caller=2)

    async def scenario():
        first, second = await opened(subscribe(held_task, alice_key)), await opened(subscribe(held_task, alice_key))
        refused = await refusal(subscribe(held_task, alice_key))
        # Bob has a budget of his own (a streaming send: the task's first frame waits for the
        # agent, which never comes, so the stream is open once its response has started).
        bobs = SseCall("SendStreamingMessage", {"message": user_message()}, key=bob_key)
        assert (await bobs.start())[0] == 200
        await first.disconnect()
        again = await opened(subscribe(held_task, alice_key))
        for call in (second, bobs, again):
            await call.disconnect()
        return refused

    status, headers, body = run(scenario())
    assert status == 429 and headers["retry-after"] == "30" and headers["content-type"] == "application/json"
    assert body["id"] == 9 and body["error"]["code"] == -32029
    assert body["error"]["message"] == (
        "this API key has already 2 streams open at this tenant, the most a caller may have; "
        "close one first (retry in 30 s)"
    )
    assert body["error"]["data"][0]["reason"] == "TOO_MANY_STREAMS"


def test_a_streaming_send_at_the_cap_is_refused_before_its_message_is_stored(held_task, tenant, alice_key):
    limits(tenant, max_streams_per_caller=1)

    async def scenario():
        holder = await opened(subscribe(held_task, alice_key))
        refused = await refusal(SseCall("SendStreamingMessage", {"message": user_message()}, key=alice_key))
        await holder.disconnect()
        return refused

    before = Task.objects.count()
    status, _, body = run(scenario())
    assert status == 429 and body["error"]["data"][0]["reason"] == "TOO_MANY_STREAMS"
    assert Task.objects.count() == before


def test_the_site_s_default_applies_and_zero_lifts_it(held_task, settings, tenant, alice_key):
    settings.STREAM_MAX_PER_CALLER = 1

    async def scenario(expect_refusal: bool):
        holder = await opened(subscribe(held_task, alice_key))
        if expect_refusal:
            outcome = (await refusal(subscribe(held_task, alice_key)))[0]
        else:
            extra = await opened(subscribe(held_task, alice_key))
            await extra.disconnect()
            outcome = 200
        await holder.disconnect()
        return outcome

    assert run(scenario(True)) == 429
    limits(tenant, max_streams_per_caller=0)
    assert run(scenario(False)) == 200


def test_anonymous_callers_are_counted_per_address(tenant, conformance_agent, monkeypatch):
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)  # the tasks stay submitted
    limits(tenant, max_streams_per_caller=1)

    def send(address: str) -> SseCall:
        return SseCall("SendStreamingMessage", {"message": user_message()}, path=PUBLIC, client=(address, 4000))

    async def scenario():
        # A streaming send to a new task opens with the agent's first event: the response
        # starts at once, its first frame waits, so the stream is open once it has started.
        first = send("192.0.2.1")
        assert (await first.start())[0] == 200
        refused = (await refusal(send("192.0.2.1")))[0]
        other = send("192.0.2.2")
        other_status = (await other.start())[0]
        for call in (first, other):
            await call.disconnect()
        return refused, other_status

    assert run(scenario()) == (429, 200)


def test_over_http_json_and_aip_the_refusal_is_each_binding_s_429(held_task, tenant, alice_key, monkeypatch):
    from tasks_app.executors import REGISTRY

    monkeypatch.setitem(REGISTRY, Planner.name, Planner)
    make_agent(tenant, "planner", Planner.name, streaming=True)
    limits(tenant, max_streams_per_caller=1)

    async def scenario():
        holder = await opened(subscribe(held_task, alice_key))
        rest = SseCall("", {}, key=alice_key, path=f"/agents/acme/echo/tasks/{held_task.pk}:subscribe")
        rest.body = b""
        aip = SseCall(
            "stream",
            {"message": message("start", new_id(), "plan")},
            key=alice_key,
            version="",
            path="/agents/acme/planner/aip/stream",
        )
        answers = await refusal(rest), await refusal(aip)
        await holder.disconnect()
        return answers

    (rest_status, rest_headers, rest_body), (aip_status, aip_headers, aip_body) = run(scenario())
    assert rest_status == 429 and rest_headers["retry-after"] == "30"
    assert rest_body["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert rest_body["error"]["details"][0]["reason"] == "TOO_MANY_STREAMS"
    assert aip_status == 429 and aip_headers["retry-after"] == "30"
    assert aip_body["error"]["code"] == -32029 and aip_body["error"]["data"]["reason"] == "TOO_MANY_STREAMS"
    assert "already 1 streams open" in aip_body["error"]["data"]["details"]


def test_a_live_stream_renews_its_slot_and_one_a_killed_process_left_expires(
    held_task, settings, tenant, alice_key, slots, monkeypatch
):
    settings.SSE_HEARTBEAT = 0.2
    monkeypatch.setattr(stream_slots, "ttl", lambda: 0.6)
    limits(tenant, max_streams_per_caller=1)

    async def scenario():
        holder = await opened(subscribe(held_task, alice_key))
        await asyncio.sleep(1.5)  # well past the slot's lifetime: only its renewals keep it
        while_renewed = (await refusal(subscribe(held_task, alice_key)))[0]
        [key] = list(slots.scan_iter(stream_slots.KEY_PREFIX + "*"))
        await holder.disconnect()
        # Another process took a slot and was killed: nothing gives it back.
        seconds, micros = slots.time()
        slots.zadd(key, {"left-by-a-killed-process": seconds * 1000 + micros // 1000 + 600})
        while_fresh = (await refusal(subscribe(held_task, alice_key)))[0]
        await asyncio.sleep(0.7)
        after = await opened(subscribe(held_task, alice_key))
        await after.disconnect()
        return while_renewed, while_fresh

    assert run(scenario()) == (429, 429)


def test_when_redis_is_down_streams_open_without_a_slot(held_task, settings, tenant, alice_key, caplog):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.RATE_LIMIT_REDIS_URL = f"redis://127.0.0.1:{port}/0"
    limits(tenant, max_streams_per_caller=1)

    async def scenario():
        calls = [await opened(subscribe(held_task, alice_key)) for _ in range(2)]
        for call in calls:
            await call.disconnect()

    run(scenario())
    assert "stream cap: Redis unreachable" in caplog.text


def test_without_redis_the_slots_are_counted_in_the_process(held_task, settings, tenant, alice_key):
    settings.RATE_LIMIT_REDIS_URL = ""
    limits(tenant, max_streams_per_caller=1)

    async def scenario():
        holder = await opened(subscribe(held_task, alice_key))
        refused = (await refusal(subscribe(held_task, alice_key)))[0]
        await holder.disconnect()
        again = await opened(subscribe(held_task, alice_key))
        await again.disconnect()
        return refused

    assert run(scenario()) == 429


def test_two_web_processes_count_one_caller_s_slots_together(settings):
    """Two stores on one Redis, as two daphne processes have: the second sees the first's slot."""
    stores = [stream_slots._Redis(settings.RATE_LIMIT_REDIS_URL) for _ in range(2)]

    async def scenario():
        taken = [await stores[0].take("t:key:1", 2, "a"), await stores[1].take("t:key:1", 2, "b")]
        taken.append(await stores[1].take("t:key:1", 2, "c"))
        await stores[0].give_back("t:key:1", "a")
        taken.append(await stores[1].take("t:key:1", 2, "c"))
        for store in stores:
            await store.aclose()
        return taken

    assert run(scenario()) == [True, True, False, True]
