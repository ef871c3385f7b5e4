"""AIP's notification style (seed 004, 6.3): notification/set (create or update by id, on a
task or ahead of it), get, delete (one or all), start (a start naming the config, with
notifyOnStates); deliveries POST the Task with X-ACPS-AIP-Notification-Token through push's
machinery (its log, retries, signature and SSRF guard), to a real loopback receiver."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from push.models import PendingPushConfig, PushConfig, PushDelivery
from tasks_app.executors import REGISTRY
from tests.conftest import drain_push_jobs, make_agent
from tests.test_aip import Planner, message, new_id, rpc

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "/agents/acme/planner/aip"


@pytest.fixture
def planner(tenant, monkeypatch):
    monkeypatch.setitem(REGISTRY, Planner.name, Planner)
    return make_agent(tenant, "planner", Planner.name, streaming=True, push_notifications=True)


def call(client, method: str, params: dict[str, Any], key: str) -> dict[str, Any]:
    body = orjson.dumps({"jsonrpc": "2.0", "id": "n", "method": method, "params": params})
    response = client.post(f"{BASE}/{method}", data=body, content_type="application/json", headers={"X-API-Key": key})
    assert response.status_code == 200
    return orjson.loads(response.content)


def started(client, key: str, task_id: str, config_id: str, text: str = "plan", states: Any = None) -> dict:
    params: dict[str, Any] = {"notificationConfigId": config_id}
    if states is not None:
        params["notifyOnStates"] = states
    return call(client, "notification/start", {"message": message("start", task_id, text, commandParams=params)}, key)


def test_the_seeds_set_get_delete_answer_as_its_examples(client, planner, alice_key, receiver):
    task_id = new_id()
    config = {"url": receiver.url(), "token": "your_token", "taskId": task_id}
    created = call(client, "notification/set", config, alice_key)["result"]
    assert set(created) == {"id", "url", "token", "taskId"}
    assert created["url"] == receiver.url() and created["token"] == "your_token" and created["taskId"] == task_id
    assert call(client, "notification/get", {"taskId": task_id}, alice_key)["result"] == [created]
    ids = {"taskId": task_id, "notificationConfigId": created["id"]}
    assert call(client, "notification/get", ids, alice_key)["result"] == [created]
    assert call(client, "notification/delete", ids, alice_key)["result"] == {"success": True}
    assert call(client, "notification/get", {"taskId": task_id}, alice_key)["error"]["code"] == -32001


def test_set_with_an_id_updates_that_config(client, planner, alice_key, receiver):
    task_id = new_id()
    first = call(client, "notification/set", {"url": receiver.url(), "token": "a", "taskId": task_id}, alice_key)
    config_id = first["result"]["id"]
    update = {"id": config_id, "url": receiver.url("/other"), "token": "b", "taskId": task_id}
    assert call(client, "notification/set", update, alice_key)["result"]["url"].endswith("/other")
    [only] = call(client, "notification/get", {"taskId": task_id}, alice_key)["result"]
    assert (only["id"], only["token"]) == (config_id, "b")


def test_notification_start_delivers_the_task_at_each_state_asked_with_the_aip_token(
    client, planner, alice_key, receiver, push_jobs
):
    task_id = new_id()
    config = call(
        client, "notification/set", {"url": receiver.url(), "token": "your_token", "taskId": task_id}, alice_key
    )
    answer = started(
        client, alice_key, task_id, config["result"]["id"], states=["working", "awaiting-completion", "failed"]
    )
    assert answer["result"]["status"]["state"] == "awaiting-completion"
    assert not PendingPushConfig.objects.exists()  # moved onto the task
    drain_push_jobs(push_jobs)
    bodies = [r.json for r in receiver.requests]
    assert [b["status"]["state"] for b in bodies] == ["working", "awaiting-completion"]
    assert {b["type"] for b in bodies} == {"task"} and {b["id"] for b in bodies} == {task_id}
    headers = receiver.requests[0].headers
    assert headers["x-acps-aip-notification-token"] == "your_token"
    assert headers["content-type"] == "application/json"
    assert headers["a2a-push-signature"]  # signed as every push is; AIP receivers may ignore it
    # The Leader completes: completed is not among the states asked for.
    rpc(client, alice_key, "complete", task_id)
    drain_push_jobs(push_jobs)
    assert len(receiver.requests) == 2
    delivered = PushDelivery.objects.filter(config__task__client_task_id=task_id).values_list("seq", flat=True)
    assert sorted(delivered) == [2, 4]  # working; the product (3) is passed over; awaiting-completion


def test_without_notify_on_states_every_change_after_the_start_is_delivered(
    client, planner, alice_key, receiver, push_jobs
):
    task_id = new_id()
    config = call(client, "notification/set", {"url": receiver.url(), "token": "t", "taskId": task_id}, alice_key)
    started(client, alice_key, task_id, config["result"]["id"], states=[])
    rpc(client, alice_key, "complete", task_id)
    drain_push_jobs(push_jobs)
    states = [r.json["status"]["state"] for r in receiver.requests]
    # working, the product, awaiting-completion (with the product), completed.
    assert states[0] == "working" and states[-2:] == ["awaiting-completion", "completed"]
    assert receiver.requests[-1].json["products"][0]["id"] == "product-1"


def test_notify_on_states_takes_the_enum_member_names_too(client, planner, alice_key, receiver, push_jobs):
    task_id = new_id()
    config = call(client, "notification/set", {"url": receiver.url(), "token": "t", "taskId": task_id}, alice_key)
    started(client, alice_key, task_id, config["result"]["id"], text="fail", states=["Working", "Failed"])
    drain_push_jobs(push_jobs)
    assert [r.json["status"]["state"] for r in receiver.requests] == ["working", "failed"]
    assert PushConfig.objects.get(task__client_task_id=task_id).notify_on_states == ["failed", "working"]


def test_notification_start_naming_no_config_is_invalid_params_and_starts_nothing(client, planner, alice_key):
    task_id = new_id()
    answer = started(client, alice_key, task_id, "nope")
    assert answer["error"]["code"] == -32602 and "nope" in answer["error"]["data"]["details"]
    assert call(client, "notification/get", {"taskId": task_id}, alice_key)["error"]["code"] == -32001
    assert rpc(client, alice_key, "start", task_id, "plan")["status"]["state"] == "awaiting-completion"


def test_delete_without_an_id_deletes_every_config_of_the_task(client, planner, alice_key, receiver):
    task_id = new_id()
    rpc(client, alice_key, "start", task_id, "ask")
    for token in ("a", "b"):
        call(client, "notification/set", {"url": receiver.url(), "token": token, "taskId": task_id}, alice_key)
    assert len(call(client, "notification/get", {"taskId": task_id}, alice_key)["result"]) == 2
    assert call(client, "notification/delete", {"taskId": task_id}, alice_key)["result"] == {"success": True}
    assert call(client, "notification/get", {"taskId": task_id}, alice_key)["result"] == []
    assert not PushConfig.objects.filter(task__client_task_id=task_id, deleted_at__isnull=True).exists()


@pytest.mark.parametrize("host", ["127.0.0.2", "[::ffff:127.0.0.3]"])
def test_a_receiver_outside_the_allow_list_is_refused_before_anything_is_stored(client, planner, alice_key, host):
    config = {"url": f"http://{host}:9/hook", "token": "t", "taskId": new_id()}
    answer = call(client, "notification/set", config, alice_key)
    assert answer["error"]["code"] == -32602
    assert not PendingPushConfig.objects.exists() and not PushConfig.objects.exists()


def test_notifications_are_refused_by_an_agent_without_them(client, tenant, alice_key, monkeypatch):
    monkeypatch.setitem(REGISTRY, Planner.name, Planner)
    make_agent(tenant, "quiet", Planner.name, push_notifications=False)
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "notification/get", "params": {"taskId": "t"}})
    response = client.post(
        "/agents/acme/quiet/aip/notification/get",
        data=body,
        content_type="application/json",
        headers={"X-API-Key": alice_key},
    )
    error = orjson.loads(response.content)["error"]
    assert error["code"] == -32003 and error["message"] == "Notification is not supported"


def test_another_callers_configs_are_not_theirs_to_read_or_delete(client, planner, alice_key, bob_key, receiver):
    task_id = new_id()
    created = call(client, "notification/set", {"url": receiver.url(), "token": "t", "taskId": task_id}, alice_key)
    ids = {"taskId": task_id, "notificationConfigId": created["result"]["id"]}
    assert call(client, "notification/get", ids, bob_key)["error"]["code"] == -32001
    call(client, "notification/delete", ids, bob_key)
    assert call(client, "notification/get", ids, alice_key)["result"] == [created["result"]]
