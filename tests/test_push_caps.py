"""The caps on push fan-out (docs/limits.md, docs/push.md): configs per task, in every dialect
that sets them, and AIP's configs set ahead of their task (per caller, and their expiry)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from push.models import PendingPushConfig, PushConfig
from tasks_app.models import Message
from tests.conftest import user_message
from tests.test_a2a_v01 import V01Client, new_id, seed_agent  # noqa: F401 - seed_agent is a fixture
from tests.test_aip import message
from tests.test_aip import new_id as aip_task_id
from tests.test_aip_notifications import call, planner, started  # noqa: F401 - planner is a fixture

pytestmark = pytest.mark.django_db(transaction=True)
ECHO = "/agents/acme/echo/"
PUBLIC = "/agents/acme/conformance/"
HOOK = "http://127.0.0.1:9/hook"  # allow-listed in the tests; nothing is delivered in-process here
QUOTA_EXCEEDED = -32030


def limits(tenant, **fields):
    for name, value in fields.items():
        setattr(tenant, name, value)
    tenant.save()


def create(rpc, key, task_id, config_id, path=ECHO):
    return rpc(path, "CreateTaskPushNotificationConfig", {"taskId": task_id, "id": config_id, "url": HOOK}, key=key)


def test_a_task_at_its_cap_refuses_a_new_config_but_takes_a_replacement_and_one_after_a_delete(
    rpc, tenant, echo_agent, alice_key
):
    limits(tenant, max_push_configs_per_task=2)
    task_id = rpc.send(ECHO, key=alice_key).result["task"]["id"]
    assert create(rpc, alice_key, task_id, "a").result["id"] == "a"
    assert create(rpc, alice_key, task_id, "b").result["id"] == "b"
    refused = create(rpc, alice_key, task_id, "c")
    assert refused.status == 200 and refused.error["code"] == QUOTA_EXCEEDED
    assert refused.error["message"].startswith(f"task {task_id} already has 2 push notification configs")
    assert refused.error["data"][0]["reason"] == "TOO_MANY_PUSH_CONFIGS"
    assert PushConfig.objects.filter(task_id=task_id).count() == 2
    assert create(rpc, alice_key, task_id, "a").result["id"] == "a"  # same id: a replacement
    rpc(ECHO, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "b"}, key=alice_key)
    assert create(rpc, alice_key, task_id, "c").result["id"] == "c"


def test_the_site_s_default_applies_until_the_tenant_sets_its_own_and_zero_lifts_it(
    rpc, settings, tenant, echo_agent, alice_key
):
    settings.PUSH_MAX_CONFIGS_PER_TASK = 1
    task_id = rpc.send(ECHO, key=alice_key).result["task"]["id"]
    assert create(rpc, alice_key, task_id, "a").result["id"] == "a"
    assert create(rpc, alice_key, task_id, "b").error["code"] == QUOTA_EXCEEDED
    limits(tenant, max_push_configs_per_task=0)
    assert [create(rpc, alice_key, task_id, f"n{i}").status for i in range(3)] == [200, 200, 200]


def test_an_inline_config_past_the_cap_refuses_the_follow_up_and_stores_none_of_it(
    rpc, tenant, conformance_agent, alice_key
):
    limits(tenant, max_push_configs_per_task=1)
    task = rpc.send(PUBLIC, key=alice_key, messageId="tck-input-required-1").result["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert create(rpc, alice_key, task["id"], "a", path=PUBLIC).result["id"] == "a"
    before = Message.objects.filter(task_id=task["id"]).count()
    params = {
        "message": user_message("more", taskId=task["id"]),
        "configuration": {"taskPushNotificationConfig": {"url": HOOK, "id": "inline"}},
    }
    refused = rpc(PUBLIC, "SendMessage", params, key=alice_key)
    assert refused.error["code"] == QUOTA_EXCEEDED
    assert Message.objects.filter(task_id=task["id"]).count() == before


def test_over_http_json_the_cap_is_429_resource_exhausted(rest, tenant, echo_agent, alice_key):
    limits(tenant, max_push_configs_per_task=1)
    body = {"message": user_message(), "configuration": {"returnImmediately": True}}
    task_id = rest("POST", ECHO, "message:send", key=alice_key, body=body).body["task"]["id"]
    configs = f"tasks/{task_id}/pushNotificationConfigs"
    assert rest("POST", ECHO, configs, key=alice_key, body={"id": "a", "url": HOOK}).status == 200
    refused = rest("POST", ECHO, configs, key=alice_key, body={"id": "b", "url": HOOK})
    assert refused.status == 429
    assert refused.status_error["status"] == "RESOURCE_EXHAUSTED" and refused.reason == "TOO_MANY_PUSH_CONFIGS"
    assert "already has 1 push notification configs" in refused.status_error["message"]


def test_in_0_3_the_cap_is_the_server_s_quota_error_and_the_list_is_bounded_by_it(rpc03, tenant, echo_agent, alice_key):
    limits(tenant, max_push_configs_per_task=2)
    task_id = rpc03.send(ECHO, key=alice_key).result["id"]

    def set_(config_id):
        params = {"taskId": task_id, "pushNotificationConfig": {"id": config_id, "url": HOOK}}
        return rpc03(ECHO, "tasks/pushNotificationConfig/set", params, key=alice_key)

    assert [set_(c).result["pushNotificationConfig"]["id"] for c in "ab"] == ["a", "b"]
    refused = set_("c").error
    assert refused["code"] == QUOTA_EXCEEDED and "already has 2 push notification configs" in refused["message"]
    assert refused["data"] == {"reason": "TOO_MANY_PUSH_CONFIGS", "domain": "agentserver"}
    listed = rpc03(ECHO, "tasks/pushNotificationConfig/list", {"id": task_id}, key=alice_key).result
    assert len(listed) == 2


def test_in_0_1_a_task_has_one_config_which_set_replaces_so_the_cap_is_never_in_the_way(
    client,
    tenant,
    seed_agent,  # noqa: F811
    alice_key,
):
    limits(tenant, max_push_configs_per_task=1)
    v01 = V01Client(client)
    task_id = new_id()
    message_ = {"role": "user", "parts": [{"type": "text", "text": "hi"}]}
    sent = v01("tasks/send", {"id": task_id, "message": message_}, path="/agents/acme/seed/", key=alice_key)
    assert sent.result["id"] == task_id
    for url in (HOOK, "http://127.0.0.1:9/moved"):
        params = {"id": task_id, "pushNotificationConfig": {"url": url}}
        assert v01("tasks/pushNotification/set", params, path="/agents/acme/seed/", key=alice_key).status == 200
    assert PushConfig.objects.filter(deleted_at__isnull=True).count() == 1


# --- AIP -------------------------------------------------------------------------------------


def aip_set(client, key, task_id, config_id=None):
    config = {"url": HOOK, "token": "t", "taskId": task_id, **({"id": config_id} if config_id else {})}
    return call(client, "notification/set", config, key)


def test_aip_set_on_a_task_at_its_cap_is_refused_with_the_reason_in_data(
    client,
    tenant,
    planner,  # noqa: F811
    alice_key,
):
    limits(tenant, max_push_configs_per_task=1)
    task_id = aip_task_id()
    assert "result" in call(client, "rpc", {"message": message("start", task_id, "plan")}, alice_key)
    assert "result" in aip_set(client, alice_key, task_id)
    error = aip_set(client, alice_key, task_id)["error"]
    assert error["code"] == QUOTA_EXCEEDED and error["data"]["reason"] == "TOO_MANY_PUSH_CONFIGS"
    assert "already has 1 push notification configs" in error["data"]["details"]


def test_aip_configs_set_ahead_are_capped_per_caller_and_per_task(
    client,
    tenant,
    planner,  # noqa: F811
    alice_key,
    bob_key,
):
    limits(tenant, max_pending_push_configs=3, max_push_configs_per_task=2)
    first, second = aip_task_id(), aip_task_id()
    assert "result" in aip_set(client, alice_key, first)
    assert "result" in aip_set(client, alice_key, first)
    per_task = aip_set(client, alice_key, first)["error"]
    assert per_task["code"] == QUOTA_EXCEEDED and "set ahead of it" in per_task["data"]["details"]
    assert "result" in aip_set(client, alice_key, second, "s1")
    per_caller = aip_set(client, alice_key, aip_task_id())["error"]
    assert per_caller["code"] == QUOTA_EXCEEDED
    assert "already has 3 notification configs set for tasks it has not started" in per_caller["data"]["details"]
    assert "result" in aip_set(client, alice_key, second, "s1")  # a replacement still passes
    assert "result" in aip_set(client, bob_key, aip_task_id())  # another caller has its own
    assert PendingPushConfig.objects.count() == 4


def test_an_expired_config_set_ahead_is_ignored_does_not_count_and_is_swept(
    client,
    settings,
    tenant,
    planner,  # noqa: F811
    alice_key,
):
    from push import services
    from push.tasks import sweep_deliveries

    settings.PUSH_PENDING_CONFIG_TTL = 60
    limits(tenant, max_pending_push_configs=1)
    task_id = aip_task_id()
    config_id = aip_set(client, alice_key, task_id)["result"]["id"]
    PendingPushConfig.objects.update(updated_at=timezone.now() - timedelta(seconds=61))
    assert call(client, "notification/get", {"taskId": task_id}, alice_key)["error"]["code"] == -32001
    refused = started(client, alice_key, task_id, config_id)["error"]
    assert f"notificationConfigId {config_id!r} names no notification config" in refused["data"]["details"]
    # It no longer counts: a new one fits under the cap of 1, and the sweep takes the old one.
    other = aip_task_id()
    assert "result" in aip_set(client, alice_key, other)
    assert PendingPushConfig.objects.count() == 2
    sweep_deliveries()
    assert list(PendingPushConfig.objects.values_list("client_task_id", flat=True)) == [other]
    assert services.pending_configs_sweep() == 0
