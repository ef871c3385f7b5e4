"""Nothing a Leader sends to an AIP path is an internal error: property tests with hostile
requests to every AIP method (tests/hostile.py's values, mutations and envelopes over AIP's
own shapes). Each answer is an AIP JSON-RPC response, or a stream of them, with the request's
id when it had a usable one; never HTTP 5xx, never -32603; a code from the seed's table or
JSON-RPC's own. And the tasks stored before the run still read back whole after it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests import hostile
from tests.conftest import make_agent
from tests.test_aip import message

pytestmark = pytest.mark.django_db(transaction=True)

METHODS = ["rpc", "stream", "notification/set", "notification/get", "notification/delete", "notification/start"]
ALLOWED = frozenset({-32700, -32600, -32601, -32602, *range(-32010, -32000), -32029, -32030})
PUSH_URLS = ("http://127.0.0.2:9/hook", "http://[::ffff:127.0.0.3]:9/hook", "https://push.example.test/hook")


@pytest.fixture
def world(tenant, dns):
    from accounts.services import api_key_create

    dns["push.example.test"] = ["93.184.216.34"]  # faked: nothing is sent (push_jobs records only)
    make_agent(tenant, "echo", "echo", streaming=True, push_notifications=True)
    return api_key_create(tenant=tenant, name="alice", principal="alice")[1]


def aip_params(method: str, task_ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Well-formed params of `method`, on the stored tasks or fresh ids, to mutate."""
    ids = st.sampled_from([*task_ids, f"task-{uuid.uuid4()}", "t"])
    commands = st.sampled_from(["start", "continue", "cancel", "complete", "get", "re-stream"])
    params = st.fixed_dictionaries(
        {},
        optional={
            "lastEventSeq": st.integers(-2, 12),
            "lastMessageSentAt": st.sampled_from([None, "2025-09-01T11:58:00+08:00", "2099-01-01T00:00:00Z"]),
            "responseTimeout": st.integers(0, 50),
            "awaitingInputTimeout": st.integers(1, 10**6),
            "maxProductsBytes": st.integers(0, 10**6),
            "notificationConfigId": st.sampled_from(["cfg", "nope"]),
            "notifyOnStates": st.sampled_from([["working"], ["Working", "Failed"], [], None]),
        },
    )
    msg = st.builds(
        lambda command, task_id, text, extra: message(command, task_id, text, commandParams=extra),
        commands,
        ids,
        st.sampled_from(["hi", "a poem", None]),
        params,
    )
    if method in ("rpc", "stream", "notification/start"):
        return msg.map(lambda m: {"message": m})
    if method == "notification/set":
        return st.fixed_dictionaries(
            {"url": st.sampled_from(PUSH_URLS), "token": st.text(max_size=8), "taskId": ids},
            optional={"id": st.sampled_from(["cfg", None, ""])},
        )
    return st.fixed_dictionaries({"taskId": ids}, optional={"notificationConfigId": st.sampled_from(["cfg", None])})


@st.composite
def hostile_body(draw, method: str, task_ids: list[str]) -> tuple[bytes, Any]:
    params = draw(aip_params(method, task_ids))
    if draw(st.booleans()):
        params = draw(hostile.mutated(params))
    obj = draw(hostile.envelope(method, params, broken=draw(st.integers(0, 4)) == 0))
    text = hostile.encode(obj)
    request_id = obj.get("id") if isinstance(obj, dict) else None
    return text.encode("utf-8", "surrogatepass"), request_id


def judged(status: int, content_type: str, body: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC responses of one answer, checked against the invariants."""
    assert status < 500, f"HTTP {status}: {body[:300]!r}"
    if content_type.startswith("text/event-stream"):
        frames = [line[5:] for line in body.split(b"\n") if line.startswith(b"data:")]
        answers = [orjson.loads(f) for f in frames]
    else:
        assert content_type.startswith("application/json"), content_type
        answers = [orjson.loads(body)]
    for answer in answers:
        assert answer.get("jsonrpc") == "2.0", answer
        if "error" in answer:
            error = answer["error"]
            assert error["code"] in ALLOWED, answer
            assert isinstance(error["message"], str) and isinstance(error["data"]["details"], str), answer
    return answers


@pytest.mark.parametrize("method", METHODS)
def test_no_hostile_aip_request_is_an_internal_error(client, world, push_jobs, caplog, method):
    key = world
    task_ids = []
    for text in ("the canary", "another"):
        task_id = f"task-{uuid.uuid4()}"
        body = orjson.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "rpc", "params": {"message": message("start", task_id, text)}}
        )
        answer = client.post(
            "/agents/acme/echo/aip/rpc", data=body, content_type="application/json", headers={"X-API-Key": key}
        ).json()
        complete = message("complete", task_id)  # over: a stream of it ends at once
        client.post(
            "/agents/acme/echo/aip/rpc",
            data=orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "rpc", "params": {"message": complete}}),
            content_type="application/json",
            headers={"X-API-Key": key},
        )
        assert answer["result"]["status"]["state"] == "awaiting-completion", answer
        task_ids.append(task_id)

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(sent=hostile_body(method, task_ids), keyed=st.integers(0, 9))
    def attempt(sent: tuple[bytes, Any], keyed: int) -> None:
        body, request_id = sent
        note(f"body: {body[:600]!r}")
        headers = {"X-API-Key": key} if keyed else {}
        status, content_type, raw = async_to_sync(exchanged)(f"/agents/acme/echo/aip/{method}", body, headers)
        answers = judged(status, content_type, raw)
        if not keyed:
            assert status == 401 and answers[0]["error"]["code"] == -32008, answers
        usable = isinstance(request_id, (str, int)) and not isinstance(request_id, bool) and len(str(request_id)) < 100
        # A re-stream from past the task's last event may stay quiet: no answer yet is no error.
        if usable and status == 200 and answers and "error" not in answers[0]:
            assert all(a["id"] == request_id for a in answers), answers

    attempt()
    # What was stored before the run reads back whole.
    for task_id in task_ids:
        got = client.post(
            "/agents/acme/echo/aip/rpc",
            data=orjson.dumps(
                {"jsonrpc": "2.0", "id": 3, "method": "rpc", "params": {"message": message("get", task_id)}}
            ),
            content_type="application/json",
            headers={"X-API-Key": key},
        ).json()
        assert got["result"]["status"]["state"] == "completed", got
        assert got["result"]["products"][0]["dataItems"][0]["text"].startswith("echo: "), got
    logged = [r for r in caplog.records if r.exc_info]
    assert not logged, [f"{r.name}: {r.getMessage()[:300]}" for r in logged[:5]]


QUIET = 1.0  # seconds a stream may be quiet before the reader has all it will get


async def exchanged(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
    """One request through the ASGI handler, and its answer: a stream is read in the same
    event loop that serves it, until it ends or is quiet for QUIET seconds (an AIP stream lasts
    until its task is over, and a task awaiting the Leader's completion never is here)."""
    response = await AsyncClient().post(path, data=body, content_type="application/json", headers=headers)
    content_type = response.get("Content-Type", "")
    if not response.streaming:
        return response.status_code, content_type, response.content
    chunks = []
    events = aiter(response.streaming_content)
    try:
        while True:
            chunks.append(await asyncio.wait_for(anext(events), timeout=QUIET))
    except (StopAsyncIteration, TimeoutError):
        pass
    finally:
        await events.aclose()
    return response.status_code, content_type, b"".join(chunks)
