"""AIP across the real thing: daphne, a Celery worker that runs the agent, schedules the
timeouts and delivers the notifications, Postgres and Redis."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import make_agent
from tests.test_aip import message, new_id

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def live(live_each_mode):
    """Each test here runs against both modes: Celery workers, and the embedded mode's threads."""
    return live_each_mode


@pytest.fixture
def writer(tenant):
    return make_agent(tenant, "aipwriter", "writer", streaming=True, push_notifications=True)


def call(base: str, key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = httpx.post(
        f"{base}/agents/acme/aipwriter/aip/{method}", json=body, headers={"X-API-Key": key}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.json()


def eventually(read, until, seconds: float = 10) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = read()
        if until(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_the_worker_cancels_a_task_left_awaiting_input_past_its_timeout(live, writer, alice_key):
    task_id = new_id()
    params = {"message": message("start", task_id, "hello", commandParams={"awaitingInputTimeout": 400})}
    started = call(live.url, alice_key, "rpc", params)["result"]
    assert started["status"]["state"] == "awaiting-input"  # the writer asks what to write

    def get() -> dict[str, Any]:
        return call(live.urls[1], alice_key, "rpc", {"message": message("get", task_id)})["result"]

    task = eventually(get, lambda t: t["status"]["state"] != "awaiting-input")
    assert task["status"]["state"] == "canceled"
    assert "awaitingInputTimeout of 400 ms" in task["status"]["dataItems"][0]["text"]


def test_the_worker_delivers_notifications_of_the_states_asked_with_the_aip_token(live, writer, alice_key, receiver):
    task_id = new_id()
    config = {"url": receiver.url(), "token": "your_token", "taskId": task_id}
    config_id = call(live.url, alice_key, "notification/set", config)["result"]["id"]
    command = {"notificationConfigId": config_id, "notifyOnStates": ["awaiting-completion", "completed"]}
    params = {"message": message("start", task_id, "a poem about rivers", commandParams=command)}
    assert call(live.url, alice_key, "notification/start", params)["result"]["status"]["state"] == "awaiting-completion"
    call(live.urls[1], alice_key, "rpc", {"message": message("complete", task_id)})
    requests = eventually(lambda: list(receiver.requests), lambda r: len(r) >= 2)
    assert [r.json["status"]["state"] for r in requests] == ["awaiting-completion", "completed"]
    assert {r.headers["x-acps-aip-notification-token"] for r in requests} == {"your_token"}
    assert requests[0].json["products"][0]["dataItems"][0]["type"] == "text"
