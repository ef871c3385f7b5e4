"""Push notifications across the real thing: daphne, Postgres, Redis and a Celery worker
deliver to a real HTTP receiver on 127.0.0.1 (the only address the test settings allow)."""

import hashlib
import uuid

import httpx
import pytest
from django.conf import settings

from push.models import PushDelivery
from push.verify import JwksCache, verify_notification
from tasks_app.models import Task
from tests.conftest import user_message
from tests.receiver import Answer

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def live(live_each_mode):
    """Each test here runs against both modes: Celery workers, and the embedded mode's threads."""
    return live_each_mode


V1 = {"A2A-Version": "1.0"}
BEARER = {"scheme": "Bearer", "credentials": "live-receiver-secret"}


def call(live, path, method, params, key):
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    response = httpx.post(f"{live.url}{path}", json=body, headers={**V1, "X-API-Key": key}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def send(live, path, key, text, config=None, **message):
    params = {"message": user_message(text, **message)}
    if config:
        params["configuration"] = {"taskPushNotificationConfig": config}
    return call(live, path, "SendMessage", params, key)["result"]["task"]


def every_event(receiver, task_id):
    """Wait until the receiver has seen each of the (settled) task's events; return what it got."""
    last_seq = Task.objects.get(pk=task_id).last_seq
    return receiver.wait_for(lambda got: {r.seq for r in got} == set(range(1, last_seq + 1))), last_seq


def test_the_writer_pushes_every_event_in_order_signed_with_a_key_from_the_served_jwks(
    live, writer_agent, alice_key, receiver
):
    path = "/agents/acme/writer/"
    config = {"id": "live", "url": receiver.url(), "token": "live-token", "authentication": BEARER}
    asked = send(live, path, alice_key, "write", config)
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    done = send(live, path, alice_key, "a poem about rivers", taskId=asked["id"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"

    got, last_seq = every_event(receiver, asked["id"])
    assert [r.seq for r in got] == list(range(1, last_seq + 1))  # in order, each once
    jwks = JwksCache(f"{live.url}/.well-known/jwks.json")
    for request in got:
        verified = verify_notification(
            body=request.body,
            headers=request.headers,
            jwks=jwks,
            issuer=settings.PUSH_JWS_ISSUER,
            audience=receiver.url(),
        )
        assert verified.event_id == request.event_id == f"{asked['id']}:{request.seq}"
        assert verified.claims["request_body_sha256"] == hashlib.sha256(request.body).hexdigest()
        assert request.headers["authorization"] == "Bearer live-receiver-secret"
        assert request.headers["x-a2a-notification-token"] == "live-token"
    states = [r.json["statusUpdate"]["status"]["state"] for r in got if "statusUpdate" in r.json]
    assert states[:2] == ["TASK_STATE_SUBMITTED", "TASK_STATE_INPUT_REQUIRED"]
    assert states[-1] == "TASK_STATE_COMPLETED"
    assert sum("artifactUpdate" in r.json for r in got) == 4


def test_a_receiver_answering_500_twice_gets_the_event_on_the_third_attempt(live, echo_agent, alice_key, receiver):
    receiver.answer(Answer(500), Answer(500))
    task = send(live, "/agents/acme/echo/", alice_key, "hello", {"url": receiver.url()})
    got, last_seq = every_event(receiver, task["id"])
    assert [r.seq for r in got] == [1, 1, 1, *range(2, last_seq + 1)]
    assert [r.headers["a2a-push-attempt"] for r in got[:3]] == ["1", "2", "3"]
    first = PushDelivery.objects.get(config__task_id=task["id"], seq=1)
    assert list(first.attempt_log.order_by("id").values_list("status_code", flat=True)) == [500, 500, 200]


def test_retry_after_is_honoured_by_the_worker(live, echo_agent, alice_key, receiver):
    receiver.answer(Answer(503, {"Retry-After": "1"}))
    task = send(live, "/agents/acme/echo/", alice_key, "hello", {"url": receiver.url()})
    got, _ = every_event(receiver, task["id"])
    assert got[0].seq == got[1].seq == 1
    # The test backoff is 0.05 s; the receiver asked for a second.
    assert got[1].at - got[0].at >= 1.0


def test_a_private_address_is_refused_when_the_config_is_created(live, echo_agent, alice_key):
    task = send(live, "/agents/acme/echo/", alice_key, "hello")
    error = call(
        live,
        "/agents/acme/echo/",
        "CreateTaskPushNotificationConfig",
        {"taskId": task["id"], "url": "http://127.0.0.2:8080/hook"},
        alice_key,
    )["error"]
    assert error["code"] == -32602
    assert error["message"].endswith("this address is not allowed: 127.0.0.2") and "loopback" not in error["message"]
