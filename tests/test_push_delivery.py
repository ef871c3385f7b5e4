"""Delivering push notifications in-process, to a real HTTP receiver on 127.0.0.1: order,
signatures, retries with backoff and Retry-After, dead deliveries and their revival, the
guard at delivery time, leases, the sweeper and the admin. Jobs are recorded instead of
queued (tests/conftest.py::push_jobs) and run here with `drain_push_jobs`."""

import hashlib
import socket

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from push import delivery, dispatch, selectors, services, tasks
from push.models import ConfigStatus, DeliveryState, PushConfig, PushDelivery
from push.verify import StaticJwks, verify_notification
from tasks_app.models import Task
from tests.conftest import drain_push_jobs, make_agent
from tests.receiver import Answer

pytestmark = pytest.mark.django_db(transaction=True)
WRITER = "/agents/acme/writer/"
ECHO = "/agents/acme/echo/"
BEARER = {"scheme": "Bearer", "credentials": "receiver-secret"}


def send_with_push(rpc, path, key, url, text="a poem about rivers", **config):
    inline = {"url": url, **config}
    return rpc.send(path, text, key=key, configuration={"taskPushNotificationConfig": inline}).result["task"]


def seqs(requests):
    return [r.seq for r in requests]


def test_every_event_of_the_writer_arrives_in_order_signed_and_verifiable(
    rpc, client, writer_agent, alice_key, receiver, push_jobs
):
    task = send_with_push(rpc, WRITER, alice_key, receiver.url(), id="mine", token="tok-1", authentication=BEARER)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    drain_push_jobs(push_jobs)
    last_seq = Task.objects.get(pk=task["id"]).last_seq
    assert last_seq == 8  # submitted, working, working, four chunks, completed
    assert seqs(receiver.requests) == list(range(1, last_seq + 1))
    jwks = StaticJwks(client.get("/.well-known/jwks.json").json())
    for request in receiver.requests:
        assert request.headers["content-type"] == "application/a2a+json"
        assert request.headers["authorization"] == "Bearer receiver-secret"
        assert request.headers["x-a2a-notification-token"] == "tok-1"
        assert request.headers["a2a-push-attempt"] == "1"
        verified = verify_notification(
            body=request.body,
            headers=request.headers,
            jwks=jwks,
            issuer=settings.PUSH_JWS_ISSUER,
            audience=receiver.url(),
        )
        assert verified.event_id == f"{task['id']}:{request.seq}" == request.event_id
        assert verified.claims["request_body_sha256"] == hashlib.sha256(request.body).hexdigest()
    kinds = [next(iter(r.json)) for r in receiver.requests]
    assert kinds == ["statusUpdate"] * 3 + ["artifactUpdate"] * 4 + ["statusUpdate"]
    states = [r.json["statusUpdate"]["status"]["state"] for r in receiver.requests if "statusUpdate" in r.json]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert receiver.requests[-1].json["statusUpdate"]["taskId"] == task["id"]
    # After the terminal event nothing more is due, and every delivery is logged as delivered.
    assert not selectors.configs_stalled()
    assert set(PushDelivery.objects.values_list("state", flat=True)) == {DeliveryState.DELIVERED}


def test_a_receiver_failing_twice_gets_the_event_on_the_third_attempt_and_the_rest_in_order(
    rpc, echo_agent, alice_key, receiver, push_jobs
):
    receiver.answer(Answer(500, {}, b"down"), Answer(500))
    task = send_with_push(rpc, ECHO, alice_key, receiver.url())
    drain_push_jobs(push_jobs)
    assert seqs(receiver.requests)[:3] == [1, 1, 1]
    assert [r.headers["a2a-push-attempt"] for r in receiver.requests[:3]] == ["1", "2", "3"]
    assert sorted(set(seqs(receiver.requests))) == seqs(receiver.requests)[2:]  # then each event once, in order
    first = PushDelivery.objects.get(config__task_id=task["id"], seq=1)
    assert first.state == DeliveryState.DELIVERED and first.attempts == 3
    log = list(first.attempt_log.order_by("id").values_list("status_code", "error"))
    assert log == [(500, "HTTP 500: down"), (500, "HTTP 500"), (200, "")]
    assert len({a.jti for a in first.attempt_log.all()}) == 3  # a fresh signature per attempt


def test_retries_back_off_exponentially_with_jitter(settings):
    settings.PUSH_BACKOFF_BASE, settings.PUSH_BACKOFF_CAP, settings.PUSH_RETRY_AFTER_MAX = 2.0, 60.0, 1800
    assert [services.retry_delay(n, rand=1.0) for n in (1, 2, 3, 4, 5, 6, 7)] == [2, 4, 8, 16, 32, 60, 60]
    assert [services.retry_delay(n, rand=0.0) for n in (1, 2, 3)] == [1, 2, 4]
    assert services.retry_delay(1, retry_after=30, rand=1.0) == 30
    settings.PUSH_RETRY_AFTER_MAX = 10
    assert services.retry_delay(1, retry_after=3600, rand=1.0) == 10


def test_retry_after_is_honoured(rpc, echo_agent, alice_key, receiver, push_jobs):
    receiver.answer(Answer(503, {"Retry-After": "1"}))
    send_with_push(rpc, ECHO, alice_key, receiver.url())
    config = PushConfig.objects.get()
    push_jobs.clear()
    assert delivery.run(config_pk=config.pk) == "retry"
    [(pk, countdown)] = push_jobs
    assert pk == config.pk and countdown >= 1.0  # not the 0.05 s the test backoff would give
    config.refresh_from_db()
    first = config.deliveries.get().attempt_log.get()
    assert (config.next_attempt_at - first.started_at).total_seconds() >= 1.0
    # A job for a newer event may not jump the queue while the config waits.
    assert delivery.run(config_pk=config.pk) == "skipped"
    drain_push_jobs(push_jobs)
    assert receiver.requests[1].at - receiver.requests[0].at >= 1.0
    assert seqs(receiver.requests)[:2] == [1, 1]


def test_a_delivery_that_runs_out_of_attempts_is_dead_and_stops_its_config_until_retried(
    rpc, echo_agent, alice_key, receiver, push_jobs
):
    receiver.answer(*[Answer(500)] * settings.PUSH_MAX_ATTEMPTS)
    task = send_with_push(rpc, ECHO, alice_key, receiver.url())
    drain_push_jobs(push_jobs)
    assert seqs(receiver.requests) == [1] * settings.PUSH_MAX_ATTEMPTS  # nothing after it: order is kept
    dead = PushDelivery.objects.get(config__task_id=task["id"], seq=1)
    assert dead.state == DeliveryState.DEAD and dead.attempts == settings.PUSH_MAX_ATTEMPTS
    assert PushConfig.objects.get().status == ConfigStatus.DEAD
    # New events (here: another job) do not wake a dead config.
    dispatch.enqueue_delivery(config_pk=dead.config_id)
    assert drain_push_jobs(push_jobs) == ["skipped"]
    # The operator retries it: the config resumes from the dead event and catches up.
    assert services.deliveries_retry(delivery_pks=[dead.pk]) == 1
    drain_push_jobs(push_jobs)
    last_seq = Task.objects.get(pk=task["id"]).last_seq
    assert seqs(receiver.requests)[settings.PUSH_MAX_ATTEMPTS :] == list(range(1, last_seq + 1))
    assert PushConfig.objects.get().status == ConfigStatus.ACTIVE


def test_the_admin_shows_attempts_and_retries_dead_deliveries(rpc, client, echo_agent, alice_key, receiver, push_jobs):
    receiver.answer(*[Answer(500)] * settings.PUSH_MAX_ATTEMPTS)
    send_with_push(
        rpc, ECHO, alice_key, receiver.url(), authentication={"scheme": "Bearer", "credentials": "never-shown-9f8e"}
    )
    drain_push_jobs(push_jobs)
    dead = PushDelivery.objects.get(state=DeliveryState.DEAD)
    client.force_login(get_user_model().objects.create_superuser("op", "op@example.com", "pw-for-tests-only"))
    page = client.get(f"/admin/push/pushdelivery/{dead.pk}/change/").content.decode()
    assert page.count("HTTP 500") >= settings.PUSH_MAX_ATTEMPTS
    config_page = client.get(f"/admin/push/pushconfig/{dead.config_id}/change/").content.decode()
    assert "never-shown-9f8e" not in config_page and "Bearer" in config_page
    response = client.post(
        "/admin/push/pushdelivery/", {"action": "retry_dead", "_selected_action": [dead.pk]}, follow=True
    )
    assert "1 dead deliveries queued again" in response.content.decode()
    drain_push_jobs(push_jobs)
    assert PushDelivery.objects.get(pk=dead.pk).state == DeliveryState.DELIVERED


def test_a_destination_refused_at_delivery_gets_nothing_and_the_delivery_is_dead(
    rpc, echo_agent, alice_key, receiver, push_jobs, settings
):
    send_with_push(rpc, ECHO, alice_key, receiver.url())
    settings.OUTBOUND_ALLOW_NETS = []  # the operator closed loopback after the config was made
    drain_push_jobs(push_jobs)
    assert receiver.requests == []
    dead = PushDelivery.objects.get()
    assert dead.state == DeliveryState.DEAD and dead.attempts == 1
    assert dead.last_error.endswith("this address is not allowed: 127.0.0.1") and "loopback" not in dead.last_error


def test_a_name_that_resolves_to_a_refused_address_at_delivery_gets_nothing(
    rpc, echo_agent, alice_key, receiver, push_jobs, dns
):
    # Registered while the name did not resolve; by delivery it points at 127.0.0.2.
    send_with_push(rpc, ECHO, alice_key, f"http://rebound.example.test:{receiver.port}/hook")
    dns["rebound.example.test"] = ["127.0.0.2"]
    drain_push_jobs(push_jobs)
    assert receiver.requests == []
    last_error = PushDelivery.objects.get().last_error
    assert last_error.endswith("this address is not allowed: rebound.example.test") and "127.0.0.2" not in last_error


def test_a_name_that_does_not_resolve_for_a_while_is_retried_and_delivered_once_it_does(
    rpc, echo_agent, alice_key, receiver, push_jobs, dns
):
    send_with_push(rpc, ECHO, alice_key, f"http://late.example.test:{receiver.port}/hook")
    config = PushConfig.objects.get()
    push_jobs.clear()
    for _ in range(2):  # the resolver fails, as DNS does during an outage
        assert delivery.run(config_pk=config.pk) == "retry"
        PushConfig.objects.update(next_attempt_at=None)  # the backoff is over
    attempts = PushDelivery.objects.get(seq=1).attempt_log.order_by("id")
    assert [a.error for a in attempts] == ["this address is not allowed: late.example.test"] * 2
    assert PushConfig.objects.get().status == ConfigStatus.ACTIVE

    dns["late.example.test"] = ["127.0.0.1"]
    push_jobs.clear()
    delivery.run(config_pk=config.pk)
    drain_push_jobs(push_jobs)
    assert seqs(receiver.requests) == list(range(1, Task.objects.get().last_seq + 1))


def test_a_receiver_that_answers_gone_gets_nothing_more(rpc, echo_agent, alice_key, receiver, push_jobs):
    receiver.answer(Answer(410, {}, b"this hook was removed"))
    send_with_push(rpc, ECHO, alice_key, receiver.url())
    drain_push_jobs(push_jobs)
    assert seqs(receiver.requests) == [1]
    dead = PushDelivery.objects.get()
    assert dead.state == DeliveryState.DEAD and dead.attempts == 1
    assert PushConfig.objects.get().status == ConfigStatus.DEAD


def test_a_name_that_resolves_to_an_allowed_address_is_delivered_with_its_host(
    rpc, echo_agent, alice_key, receiver, push_jobs, dns
):
    dns["receiver.example.test"] = ["127.0.0.1"]
    send_with_push(rpc, ECHO, alice_key, receiver.url(host="receiver.example.test"))
    drain_push_jobs(push_jobs)
    assert receiver.requests and {r.headers["host"] for r in receiver.requests} == {
        f"receiver.example.test:{receiver.port}"
    }


def test_a_receiver_that_never_answers_times_out_and_is_retried(rpc, echo_agent, alice_key, push_jobs, settings):
    settings.PUSH_TIMEOUT = 0.3
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        send_with_push(rpc, ECHO, alice_key, f"http://127.0.0.1:{silent.getsockname()[1]}/hook")
        config = PushConfig.objects.get()
        push_jobs.clear()
        assert delivery.run(config_pk=config.pk) == "retry"
    attempt = PushDelivery.objects.get().attempt_log.get()
    assert attempt.status_code is None and "Timeout" in attempt.error and attempt.latency_ms >= 300


def test_a_receiver_that_answers_a_byte_at_a_time_is_given_up_on_in_twice_the_timeout_and_retried(
    rpc, echo_agent, alice_key, receiver, push_jobs, settings
):
    settings.PUSH_TIMEOUT = 0.3
    # Each byte comes well within a read's timeout: only the attempt's own deadline ends it.
    receiver.answer(Answer(200, {"X-Padding": "x" * 100}, drip=0.02))
    send_with_push(rpc, ECHO, alice_key, receiver.url())
    config = PushConfig.objects.get()
    push_jobs.clear()
    assert delivery.run(config_pk=config.pk) == "retry"
    first = PushDelivery.objects.order_by("seq").first().attempt_log.get()
    assert first.status_code is None and "ReadTimeout" in first.error and 600 <= first.latency_ms < 1000
    drain_push_jobs(push_jobs)  # the next attempts get the receiver's quick answers
    assert set(PushDelivery.objects.values_list("state", flat=True)) == {DeliveryState.DELIVERED}


def test_a_job_for_a_config_another_job_holds_leaves_it_to_that_job(rpc, echo_agent, alice_key, receiver, push_jobs):
    send_with_push(rpc, ECHO, alice_key, receiver.url())
    config = PushConfig.objects.get()
    token = services.lease_take(config_pk=config.pk)
    assert delivery.run(config_pk=config.pk) == "skipped"
    services.lease_release(config_pk=config.pk, lease_token=token)
    push_jobs.clear()
    assert delivery.run(config_pk=config.pk) == "idle"  # it delivered everything, then found nothing
    assert seqs(receiver.requests) == list(range(1, Task.objects.get().last_seq + 1))


def test_each_delivered_event_of_a_batch_renews_the_lease_so_slow_attempts_never_let_a_second_job_in(
    rpc, echo_agent, alice_key, receiver
):
    from django.utils import timezone

    send_with_push(rpc, ECHO, alice_key, receiver.url())
    config = PushConfig.objects.get()
    token = services.lease_take(config_pk=config.pk)
    # The batch's earlier attempts were slow: the lease is about to run out.
    PushConfig.objects.filter(pk=config.pk).update(lease_until=timezone.now() + timezone.timedelta(seconds=1))
    due = services.delivery_next(config_pk=config.pk, lease_token=token)
    assert delivery.attempt(due, lease_token=token).outcome == "delivered"
    config.refresh_from_db()
    assert config.lease_token == token and config.lease_until > timezone.now() + timezone.timedelta(seconds=30)
    assert services.lease_take(config_pk=config.pk) is None
    # The next event is still this job's to send.
    assert services.delivery_next(config_pk=config.pk, lease_token=token).seq == due.seq + 1


def test_a_job_whose_lease_ran_out_logs_its_attempt_but_leaves_the_delivery_to_the_new_holder(
    rpc, echo_agent, alice_key, receiver
):
    from django.utils import timezone

    send_with_push(rpc, ECHO, alice_key, receiver.url())
    config = PushConfig.objects.get()
    slow = services.lease_take(config_pk=config.pk)
    due = services.delivery_next(config_pk=config.pk, lease_token=slow)
    PushConfig.objects.filter(pk=config.pk).update(lease_until=timezone.now())  # it ran out
    fast = services.lease_take(config_pk=config.pk)
    started = timezone.now()
    assert (
        services.attempt_record(due=due, lease_token=fast, started_at=started, status_code=200, latency_ms=5).outcome
        == "delivered"
    )
    late = services.attempt_record(
        due=due, lease_token=slow, started_at=started, status_code=500, latency_ms=9000, error="HTTP 500"
    )
    assert late.outcome == "lost"
    delivered = PushDelivery.objects.get(config=config, seq=due.seq)
    assert (delivered.state, delivered.attempts, delivered.last_status_code) == (DeliveryState.DELIVERED, 1, 200)
    assert list(delivered.attempt_log.order_by("id").values_list("status_code", flat=True)) == [200, 500]


def test_a_deleted_config_gets_nothing_more(rpc, echo_agent, alice_key, receiver, push_jobs):
    task = send_with_push(rpc, ECHO, alice_key, receiver.url(), id="bye")
    rpc(ECHO, "DeleteTaskPushNotificationConfig", {"taskId": task["id"], "id": "bye"}, key=alice_key)
    drain_push_jobs(push_jobs)
    assert receiver.requests == []


def test_the_sweeper_restarts_configs_whose_jobs_were_lost(rpc, echo_agent, alice_key, receiver, push_jobs):
    send_with_push(rpc, ECHO, alice_key, receiver.url())
    push_jobs.clear()  # the broker lost them
    assert tasks.sweep_deliveries() == 1
    drain_push_jobs(push_jobs)
    assert seqs(receiver.requests) == list(range(1, Task.objects.get().last_seq + 1))
    assert tasks.sweep_deliveries() == 0


def test_a_sweep_while_another_process_sweeps_restarts_nothing_and_the_next_one_does(
    rpc, echo_agent, alice_key, receiver, push_jobs, settings
):
    from tasks_app.leases import lease

    settings.SWEEP_LEASE_SECONDS = 10
    send_with_push(rpc, ECHO, alice_key, receiver.url())
    push_jobs.clear()  # the broker lost them
    with lease("sweep-push-deliveries", seconds=10):  # another worker is sweeping
        assert tasks.sweep_deliveries() == "skipped"
    assert push_jobs == []
    assert tasks.sweep_deliveries() == 1
    drain_push_jobs(push_jobs)
    assert seqs(receiver.requests) == list(range(1, Task.objects.get().last_seq + 1))


def test_several_configs_of_one_task_each_get_every_event(rpc, tenant, alice_key, receiver, push_jobs):
    make_agent(tenant, "writer", "writer", settings={"delay": 0})
    asked = rpc.send(WRITER, "write", key=alice_key).result["task"]  # input-required
    for name in ("one", "two"):
        rpc(
            WRITER,
            "CreateTaskPushNotificationConfig",
            {"taskId": asked["id"], "id": name, "url": receiver.url(f"/{name}")},
            key=alice_key,
        )
    rpc.send(WRITER, "a haiku about snow", key=alice_key, taskId=asked["id"])
    drain_push_jobs(push_jobs)
    before = 2  # submitted and input-required happened before the configs existed
    last_seq = Task.objects.get().last_seq
    for name in ("one", "two"):
        assert [r.seq for r in receiver.requests if r.path == f"/{name}"] == list(range(before + 1, last_seq + 1))


def test_a_task_s_events_are_pushed_as_its_own_dialect_writes_them(
    rpc, echo_agent, alice_key, receiver, push_jobs, monkeypatch
):
    from tasks_app import encoders

    # A dialect of this server that writes events but registered no push encoder (A2A 0.1):
    # its notifications are its events (A2A 0.3's and AIP's are the task: their own tests).
    monkeypatch.setitem(
        encoders._encoders,
        "a2a/0.1",
        lambda task_id, context_id, kind, payload: {
            "kind": "status-update" if kind == "status" else kind,
            "taskId": task_id,
        },
    )
    task = send_with_push(rpc, ECHO, alice_key, receiver.url())
    Task.objects.filter(pk=task["id"]).update(dialect="a2a/0.1")  # as if that dialect had created it
    drain_push_jobs(push_jobs)
    assert [r.json for r in receiver.requests][:1] == [{"kind": "status-update", "taskId": task["id"]}]


def test_an_event_of_a_dialect_with_no_encoder_is_recorded_as_undeliverable(
    rpc, echo_agent, alice_key, receiver, push_jobs, monkeypatch
):
    from tasks_app import encoders

    monkeypatch.delitem(encoders._encoders, "a2a/1.0")
    send_with_push(rpc, ECHO, alice_key, receiver.url())
    drain_push_jobs(push_jobs)
    assert receiver.requests == []
    delivery = PushDelivery.objects.get(seq=1)
    assert delivery.state == DeliveryState.DEAD
    assert "no event encoder for the dialect 'a2a/1.0'" in delivery.attempt_log.get().error
