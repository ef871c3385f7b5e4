"""Push notification configs over A2A 1.0 JSON-RPC: Create, Get, List, Delete, inline in
SendMessage; their errors; who may see them; and how their secrets are stored."""

import pytest
from django.db import connection

from push.models import PushConfig
from tasks_app.models import Task
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db(transaction=True)
ECHO = "/agents/acme/echo/"
HOOK = "http://127.0.0.1:9/hook"  # allow-listed in the tests; nothing is delivered in-process here


@pytest.fixture
def task_id(rpc, echo_agent, alice_key) -> str:
    return rpc.send(ECHO, key=alice_key).result["task"]["id"]


def create(rpc, key, task_id, **config):
    return rpc(ECHO, "CreateTaskPushNotificationConfig", {"taskId": task_id, "url": HOOK, **config}, key=key)


def assert_error(response, code, *fragments):
    assert response.error["code"] == code, response.error
    for fragment in fragments:
        assert fragment in response.error["message"], response.error["message"]


def test_a_created_config_can_be_read_listed_and_deleted_and_its_credentials_are_never_shown(rpc, alice_key, task_id):
    auth = {"scheme": "Bearer", "credentials": "s3cret-credentials"}
    created = create(rpc, alice_key, task_id, id="mine", token="t0ken", authentication=auth).result
    redacted = {"scheme": "Bearer", "credentials": "[redacted]"}
    assert created == {"id": "mine", "taskId": task_id, "url": HOOK, "token": "t0ken", "authentication": redacted}
    assert (
        rpc(ECHO, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "mine"}, key=alice_key).result == created
    )
    listed = rpc(ECHO, "ListTaskPushNotificationConfigs", {"taskId": task_id}, key=alice_key).result
    assert listed == {"configs": [created], "nextPageToken": ""}
    assert rpc(ECHO, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "mine"}, key=alice_key).result == {}
    gone = rpc(ECHO, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "mine"}, key=alice_key)
    assert_error(gone, -32001, "push notification config 'mine' not found")
    assert rpc(ECHO, "ListTaskPushNotificationConfigs", {"taskId": task_id}, key=alice_key).result["configs"] == []


def test_delete_is_idempotent(rpc, alice_key, task_id):
    create(rpc, alice_key, task_id, id="once")
    for _ in range(2):
        assert (
            rpc(ECHO, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "once"}, key=alice_key).result == {}
        )
    assert rpc(ECHO, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "never"}, key=alice_key).result == {}


def test_the_redaction_read_back_is_not_taken_for_credentials(rpc, alice_key, task_id):
    response = create(rpc, alice_key, task_id, authentication={"scheme": "Bearer", "credentials": "[redacted]"})
    assert_error(response, -32602, "send the credentials themselves")


def test_the_server_chooses_an_id_when_the_client_gives_none(rpc, alice_key, task_id):
    created = create(rpc, alice_key, task_id).result
    assert len(created["id"]) == 36
    assert "token" not in created and "authentication" not in created


def test_a_task_has_several_configs_and_the_same_id_replaces_one(rpc, alice_key, task_id):
    create(rpc, alice_key, task_id, id="a")
    create(rpc, alice_key, task_id, id="b")
    create(rpc, alice_key, task_id, id="a", url="http://127.0.0.1:9/moved")
    configs = rpc(ECHO, "ListTaskPushNotificationConfigs", {"taskId": task_id}, key=alice_key).result["configs"]
    assert [(c["id"], c["url"]) for c in configs] == [("a", "http://127.0.0.1:9/moved"), ("b", HOOK)]


def test_configs_are_listed_in_pages(rpc, alice_key, task_id):
    for name in "abc":
        create(rpc, alice_key, task_id, id=name)
    seen, token = [], ""
    while True:
        page = rpc(
            ECHO,
            "ListTaskPushNotificationConfigs",
            {"taskId": task_id, "pageSize": 2, "pageToken": token},
            key=alice_key,
        ).result
        seen += [c["id"] for c in page["configs"]]
        token = page["nextPageToken"]
        if not token:
            break
    assert seen == ["a", "b", "c"]
    bad = rpc(ECHO, "ListTaskPushNotificationConfigs", {"taskId": task_id, "pageToken": "bogus"}, key=alice_key)
    assert_error(bad, -32602, "pageToken")


def test_configs_of_another_callers_task_look_like_nothing_at_all(rpc, alice_key, bob_key, task_id):
    create(rpc, alice_key, task_id, id="alices")
    for method, params in [
        ("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": HOOK}),
        ("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "alices"}),
        ("ListTaskPushNotificationConfigs", {"taskId": task_id}),
        ("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "alices"}),
    ]:
        assert_error(rpc(ECHO, method, params, key=bob_key), -32001, f"task {task_id!r} not found")
    assert PushConfig.objects.filter(config_id="alices", deleted_at__isnull=True).exists()


def test_a_config_is_found_only_under_its_own_task(rpc, alice_key, task_id):
    other = rpc.send(ECHO, key=alice_key).result["task"]["id"]
    create(rpc, alice_key, task_id, id="here")
    assert_error(rpc(ECHO, "GetTaskPushNotificationConfig", {"taskId": other, "id": "here"}, key=alice_key), -32001)


def test_an_unknown_task_is_task_not_found(rpc, echo_agent, alice_key):
    for task_id in ("not-a-uuid", "7b0f0f3e-8a47-4a8c-9d55-0c0c7c1e2a10"):
        assert_error(create(rpc, alice_key, task_id), -32001, "not found")


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({"url": HOOK}, "params.taskId"),
        ({"taskId": "x"}, "params.url"),
        ({"taskId": "x", "url": 7}, "params.url"),
        ({"taskId": "x", "url": HOOK, "authentication": {"credentials": "c"}}, "authentication.scheme"),
        ({"taskId": "x", "url": HOOK, "authentication": {"scheme": "Bearer\r\nX-Evil: 1"}}, "authentication scheme"),
        ({"taskId": "x", "url": HOOK, "token": "line\nbreak"}, "token must be printable"),
        ({"taskId": "x", "url": "ftp://example.com/hook"}, "http or https"),
    ],
)
def test_malformed_configs_are_invalid_params(rpc, echo_agent, alice_key, params, fragment):
    assert_error(rpc(ECHO, "CreateTaskPushNotificationConfig", params, key=alice_key), -32602, fragment)


@pytest.mark.parametrize(
    "url, host",
    [
        ("http://127.0.0.2:8080/hook", "127.0.0.2"),
        ("http://[::ffff:127.0.0.3]/hook", "[::ffff:127.0.0.3]"),
        ("http://hooks.example.test/a2a", "hooks.example.test"),
        ("http://mapped.example.test/a2a", "mapped.example.test"),
    ],
)
def test_a_url_the_guard_refuses_is_refused_at_creation_naming_only_the_host_given(
    rpc, alice_key, task_id, dns, caplog, url, host
):
    # What the name resolves to and why that is refused would map the private network for any
    # caller (an anonymous one of a public agent too): the caller reads "not allowed", the log why.
    dns["hooks.example.test"] = ["127.0.0.2"]
    dns["mapped.example.test"] = ["::ffff:127.0.0.3"]
    caplog.set_level("INFO", logger="outbound.ssrf")
    response = create(rpc, alice_key, task_id, url=url)
    assert_error(response, -32602, f"url refused: this address is not allowed: {host}")
    message = response.error["message"] + str(response.error.get("data", ""))
    for hidden in ("resolves", "loopback", "127.0.0.2" if "example" in host else "resolves", "7f00", "OUTBOUND"):
        assert hidden not in message, message
    assert "it is a loopback address" in caplog.text
    assert not PushConfig.objects.exists()


def test_a_name_that_does_not_resolve_yet_is_accepted(rpc, alice_key, task_id):
    # The A2A TCK registers https://example.com/... on machines that may not resolve it.
    assert create(rpc, alice_key, task_id, url="https://example.com/tck-push-webhook").result["url"].startswith("https")


def test_credentials_and_token_are_not_readable_in_the_database(rpc, alice_key, task_id):
    create(
        rpc,
        alice_key,
        task_id,
        id="sealed",
        token="visible-token-123",
        authentication={"scheme": "Basic", "credentials": "dXNlcjpwYXNzd29yZA-secret"},
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(c)::text, credentials_sealed FROM push_pushconfig c")
        [(row, sealed)] = cursor.fetchall()
    assert "visible-token-123" not in row and "dXNlcjpwYXNzd29yZA-secret" not in row
    assert sealed.startswith("gAAAAA")  # a Fernet token


def test_a_config_whose_secrets_no_configured_key_opens_is_still_read_and_deleted(
    rpc, alice_key, task_id, settings, caplog
):
    from cryptography.fernet import Fernet

    create(rpc, alice_key, task_id, id="old", token="t0ken", authentication={"scheme": "Bearer", "credentials": "c"})
    settings.PUSH_CREDENTIALS_KEY = [Fernet.generate_key().decode()]  # the sealing key was dropped
    got = rpc(ECHO, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "old"}, key=alice_key).result
    assert got == {
        "id": "old",
        "taskId": task_id,
        "url": HOOK,
        "authentication": {"scheme": "Bearer", "credentials": "[redacted]"},
    }
    assert "cannot be decrypted" in caplog.text
    assert rpc(ECHO, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "old"}, key=alice_key).result == {}


def test_a_config_wants_the_events_from_its_creation_on_and_marks_the_task(rpc, alice_key, task_id, push_jobs):
    assert not Task.objects.get(pk=task_id).has_push_configs
    create(rpc, alice_key, task_id, id="late")
    config = PushConfig.objects.get(config_id="late")
    task = Task.objects.get(pk=task_id)
    assert config.delivered_seq == task.last_seq  # a completed task: nothing more is due
    assert task.has_push_configs
    assert push_jobs == [(config.pk, None)]
    rpc(ECHO, "DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "late"}, key=alice_key)
    assert not Task.objects.get(pk=task_id).has_push_configs


def test_an_inline_config_covers_the_new_task_from_its_first_event(rpc, echo_agent, alice_key, push_jobs):
    inline = {"id": "inline", "url": HOOK, "authentication": {"scheme": "Bearer", "credentials": "c"}}
    task = rpc.send(ECHO, key=alice_key, configuration={"taskPushNotificationConfig": inline}).result["task"]
    config = PushConfig.objects.get(task_id=task["id"])
    assert (config.config_id, config.delivered_seq) == ("inline", 0)
    assert Task.objects.get(pk=task["id"]).has_push_configs
    assert {pk for pk, _ in push_jobs} == {config.pk}
    got = rpc(ECHO, "GetTaskPushNotificationConfig", {"taskId": task["id"], "id": "inline"}, key=alice_key).result
    assert got["authentication"] == {"scheme": "Bearer", "credentials": "[redacted]"}


def test_an_inline_config_on_a_follow_up_covers_the_follow_up(rpc, tenant, alice_key, push_jobs):
    make_agent(tenant, "writer", "writer", settings={"delay": 0})
    asked = rpc.send("/agents/acme/writer/", "write", key=alice_key).result["task"]
    seq_before = Task.objects.get(pk=asked["id"]).last_seq
    rpc.send(
        "/agents/acme/writer/",
        "a haiku about snow",
        key=alice_key,
        taskId=asked["id"],
        configuration={"taskPushNotificationConfig": {"url": HOOK}},
    )
    assert PushConfig.objects.get(task_id=asked["id"]).delivered_seq == seq_before


def test_an_inline_config_the_guard_refuses_refuses_the_whole_message(rpc, echo_agent, alice_key):
    response = rpc.send(ECHO, key=alice_key, configuration={"taskPushNotificationConfig": {"url": "http://127.0.0.2/"}})
    assert_error(response, -32602, "url refused: this address is not allowed: 127.0.0.2")
    assert not Task.objects.exists()


def test_the_card_says_whether_push_is_on(client, tenant):
    make_agent(tenant, "loud", "echo")
    make_agent(tenant, "quiet", "echo", push_notifications=False)
    assert client.get("/agents/acme/loud/.well-known/agent-card.json").json()["capabilities"]["pushNotifications"]
    assert not client.get("/agents/acme/quiet/.well-known/agent-card.json").json()["capabilities"]["pushNotifications"]
