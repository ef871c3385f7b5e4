"""Per-caller rate limits and per-tenant caps (docs/limits.md): what a client sees when it
passes one, and that the counts are shared, per caller and cheap."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import uuid

import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.conftest import user_message

# A database of its own per pytest worker (agentserver/test_settings.py), flushed around each test.
LIMITER_REDIS = os.environ["TEST_LIMITER_REDIS_URL"]
ECHO = "/agents/acme/echo/"
PUBLIC = "/agents/acme/conformance/"


@pytest.fixture(autouse=True)
def limiter_redis(settings):
    """The limiter on a Redis database of its own, empty before and after each test."""
    settings.RATE_LIMIT_REDIS_URL = LIMITER_REDIS
    store = redis.Redis.from_url(LIMITER_REDIS)
    store.flushdb()
    yield store
    store.flushdb()
    store.close()


def limits(tenant, **fields):
    for name, value in fields.items():
        setattr(tenant, name, value)
    tenant.save()
    return tenant


def get_task(rpc, path=ECHO, *, key=None, request_id=1):
    return rpc(path, "GetTask", {"id": str(uuid.uuid4())}, key=key, request_id=request_id)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


# --- rate limits ----------------------------------------------------------------------------


def test_a_key_past_its_tenant_s_rate_limit_gets_429_with_retry_after_and_a_json_rpc_error(
    rpc, tenant, echo_agent, alice_key
):
    from protocols import jsonrpc

    limits(tenant, rate_limit_per_minute=3)
    assert [get_task(rpc, key=alice_key).status for _ in range(3)] == [200, 200, 200]
    refused = get_task(rpc, key=alice_key, request_id=7)
    assert refused.status == 429
    assert refused.headers["Retry-After"] == "20"  # one request's share of the minute
    assert refused.body["id"] is None  # refused before the body is read
    assert refused.error["code"] == jsonrpc.RATE_LIMITED
    assert refused.error["message"] == ("rate limit of 3 requests per minute for this API key exceeded; retry in 20 s")


def test_an_anonymous_address_is_limited_by_the_tenant_s_anonymous_rate(rpc, tenant, conformance_agent):
    limits(tenant, anonymous_rate_limit_per_minute=2, rate_limit_per_minute=1)
    assert [get_task(rpc, PUBLIC).status for _ in range(2)] == [200, 200]
    refused = get_task(rpc, PUBLIC)
    assert refused.status == 429 and int(refused.headers["Retry-After"]) == 30
    assert "2 requests per minute for anonymous callers from this address" in refused.error["message"]


def test_an_x_forwarded_for_a_client_wrote_itself_does_not_make_it_a_new_anonymous_caller(
    rpc, settings, tenant, conformance_agent
):
    limits(tenant, anonymous_rate_limit_per_minute=2)
    spoofed = [
        get_task_from(rpc, forwarded=f"203.0.113.{n}").status for n in range(3)
    ]  # NUM_PROXIES is 0: the header is not read
    assert spoofed == [200, 200, 429]


def test_behind_one_proxy_the_address_it_appended_is_the_anonymous_caller(rpc, settings, tenant, conformance_agent):
    settings.NUM_PROXIES = 1
    limits(tenant, anonymous_rate_limit_per_minute=1)
    # The proxy appends the address it saw; what the client wrote before it is not taken.
    assert get_task_from(rpc, forwarded="198.51.100.7, 192.0.2.1").status == 200
    assert get_task_from(rpc, forwarded="198.51.100.8, 192.0.2.1").status == 429
    assert get_task_from(rpc, forwarded="198.51.100.7, 192.0.2.2").status == 200


def get_task_from(rpc, *, forwarded: str):
    return rpc(PUBLIC, "GetTask", {"id": str(uuid.uuid4())}, headers={"X-Forwarded-For": forwarded})


def test_the_site_s_default_applies_until_the_tenant_sets_its_own(rpc, settings, tenant, echo_agent, alice_key):
    settings.RATE_LIMIT_PER_MINUTE = 2
    assert [get_task(rpc, key=alice_key).status for _ in range(3)] == [200, 200, 429]
    limits(tenant, rate_limit_per_minute=5)
    # The key has used 2 of its 5: three more pass.
    assert [get_task(rpc, key=alice_key).status for _ in range(4)] == [200, 200, 200, 429]


def test_zero_means_unlimited(rpc, settings, tenant, echo_agent, alice_key):
    settings.RATE_LIMIT_PER_MINUTE = 1
    limits(tenant, rate_limit_per_minute=0)
    assert {get_task(rpc, key=alice_key).status for _ in range(20)} == {200}


def test_two_keys_do_not_share_a_budget(rpc, tenant, echo_agent, alice_key, bob_key):
    limits(tenant, rate_limit_per_minute=2)
    assert [get_task(rpc, key=alice_key).status for _ in range(3)] == [200, 200, 429]
    assert [get_task(rpc, key=bob_key).status for _ in range(3)] == [200, 200, 429]


def test_a_refused_credential_is_answered_401_and_costs_no_budget(rpc, tenant, echo_agent, alice_key):
    limits(tenant, rate_limit_per_minute=1)
    assert get_task(rpc, key="not-a-key").status == 401
    assert get_task(rpc, key=alice_key).status == 200


def test_two_limiters_on_the_same_redis_count_together_as_two_web_processes_would():
    from protocols.throttle import RedisLimiter

    async def hits():
        first, second = RedisLimiter(LIMITER_REDIS), RedisLimiter(LIMITER_REDIS)
        try:
            outcomes = [await first.hit("t:key:1", 3), await second.hit("t:key:1", 3), await first.hit("t:key:1", 3)]
            outcomes += [await second.hit("t:key:1", 3), await first.hit("t:key:1", 3)]
            return outcomes
        finally:
            await first.aclose()
            await second.aclose()

    outcomes = asyncio.run(hits())
    assert outcomes[:3] == [None, None, None]
    assert [o.retry_after for o in outcomes[3:]] == [20, 20]


def test_the_limiter_admits_evenly_after_a_burst_so_no_window_edge_doubles_the_rate():
    from protocols.throttle import LocalLimiter

    limiter, second = LocalLimiter(), 1_000_000
    assert all(limiter.hit_at("b", 60, 0) is None for _ in range(60))  # a minute's allowance at once
    assert limiter.hit_at("b", 60, 0).retry_after == 1
    # Thirty seconds on, thirty more have come back, not a whole minute's worth.
    assert sum(limiter.hit_at("b", 60, 30 * second) is None for _ in range(60)) == 30


@given(limit=st.integers(1, 5000), start=st.integers(0, 2**60))
@hypothesis_settings(max_examples=300, deadline=None)
def test_a_burst_gets_exactly_a_minute_s_allowance_whatever_the_limit_and_the_clock(limit, start):
    """The sums of a full burst land on the line between admitted and refused, where rounding
    once refused a limit-1 caller's very first request (the clock's reading decided)."""
    from protocols.throttle import LocalLimiter

    limiter = LocalLimiter()
    admitted = [limiter.hit_at("b", limit, start) is None for _ in range(limit + 1)]
    assert admitted == [True] * limit + [False]


def test_in_process_the_requests_counted_keep_counting_when_the_limit_changes():
    from protocols.throttle import LocalLimiter

    limiter = LocalLimiter()
    assert all(limiter.hit_at("b", 60, 5) is None for _ in range(30))  # half of 60 a minute
    assert limiter.hit_at("b", 30, 5).retry_after == 2  # 30 are the whole of 30 a minute
    assert limiter.hit_at("b", 120, 5) is None  # and 31 of 120


@pytest.mark.parametrize("limit", [1, 3, 7, 60, 601])
def test_in_redis_a_burst_gets_exactly_a_minute_s_allowance(limit):
    from protocols.throttle import RedisLimiter

    async def burst():
        limiter = RedisLimiter(LIMITER_REDIS)
        try:
            # All at once, pipelined on the limiter's one line: Redis runs them back to back in
            # the order sent. One after another, the 602 round trips of limit 601 outlasted its
            # 0.1 s interval on a busy machine, and the bucket had room for one more.
            hits = [limiter.hit(f"t:key:{limit}", limit) for _ in range(limit + 1)]
            return [refused is None for refused in await asyncio.gather(*hits)]
        finally:
            await limiter.aclose()

    assert asyncio.run(burst()) == [True] * limit + [False]


def test_without_redis_an_in_process_limiter_counts_the_same_way(rpc, settings, tenant, echo_agent, alice_key):
    settings.RATE_LIMIT_REDIS_URL = ""  # the embedded mode
    limits(tenant, rate_limit_per_minute=2)
    refused = [get_task(rpc, key=alice_key) for _ in range(3)][-1]
    assert refused.status == 429 and refused.headers["Retry-After"] == "30"


def test_when_redis_is_down_requests_are_served_and_one_warning_is_logged(
    rpc, settings, tenant, echo_agent, alice_key, caplog
):
    from protocols import throttle

    throttle.FAILING.last_warning = 0.0
    settings.RATE_LIMIT_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    limits(tenant, rate_limit_per_minute=1)
    with caplog.at_level(logging.WARNING, logger="protocols.throttle"):
        assert {get_task(rpc, key=alice_key).status for _ in range(5)} == {200}
    warnings = [r for r in caplog.records if r.name == "protocols.throttle"]
    assert len(warnings) == 1 and "serving requests unthrottled" in warnings[0].getMessage()


# --- request size -----------------------------------------------------------------------------


def test_a_body_past_the_tenant_s_own_size_limit_gets_413_naming_it(rpc, tenant, echo_agent, alice_key):
    limits(tenant, max_request_bytes=400)
    refused = rpc.send(ECHO, "x" * 500, key=alice_key)
    assert refused.status == 413
    assert refused.error["message"] == "request body is larger than this tenant's limit of 400 bytes"
    assert rpc.send(ECHO, "small", key=alice_key, configuration={"returnImmediately": True}).status == 200


# --- active tasks -----------------------------------------------------------------------------


@pytest.fixture
def runs(transactional_db, monkeypatch) -> list[dict]:
    """Runs are recorded (once their send commits), not run: the tasks stay active until a
    test runs them."""
    from tasks_app import dispatch

    enqueued: list[dict] = []
    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: enqueued.append(kw))
    return enqueued


def start(rpc, path=ECHO, text="hello", *, key, **fields):
    """A send that answers at once with the task, as its run is recorded and not run."""
    return rpc.send(path, text, key=key, configuration={"returnImmediately": True}, **fields)


def run(enqueued: dict) -> str:
    from tasks_app import runner

    return runner.run(task_id=enqueued["task_id"], run_token=enqueued["run_token"])


def stored_rows() -> tuple[int, int, int]:
    from tasks_app.models import Message, Task, TaskEvent

    return Task.objects.count(), Message.objects.count(), TaskEvent.objects.count()


def test_a_send_past_the_tenant_s_active_task_cap_gets_429_stores_nothing_and_passes_once_a_task_finishes(
    rpc, tenant, echo_agent, alice_key, runs, store_path
):
    from protocols import jsonrpc

    limits(tenant, max_active_tasks=2)
    assert [start(rpc, key=alice_key).status for _ in range(2)] == [200, 200]
    before = stored_rows()
    params = {"message": user_message(), "configuration": {"returnImmediately": True}}
    refused = rpc(ECHO, "SendMessage", params, key=alice_key, request_id="r-9")
    assert refused.status == 429 and refused.headers["Retry-After"] == "5"
    assert refused.body["id"] == "r-9"
    assert refused.error["code"] == jsonrpc.RATE_LIMITED
    assert refused.error["message"].startswith("the tenant already has 2 tasks queued or running, its limit")
    assert refused.error["data"][0]["reason"] == "TOO_MANY_ACTIVE_TASKS"
    assert stored_rows() == before
    assert run(runs[0]) == "done"
    assert start(rpc, key=alice_key).status == 200


def test_a_streaming_send_past_the_cap_is_refused_before_any_stream_opens(rpc, tenant, echo_agent, alice_key, runs):
    limits(tenant, max_active_tasks=1)
    start(rpc, key=alice_key)
    refused = rpc(ECHO, "SendStreamingMessage", {"message": user_message()}, key=alice_key, request_id=3)
    assert refused.status == 429 and refused.headers["Content-Type"] == "application/json"
    assert refused.body["id"] == 3 and refused.error["data"][0]["reason"] == "TOO_MANY_ACTIVE_TASKS"


def test_the_site_s_default_cap_applies_and_zero_lifts_it(rpc, settings, tenant, echo_agent, alice_key, runs):
    settings.TENANT_MAX_ACTIVE_TASKS = 1
    assert [start(rpc, key=alice_key).status for _ in range(2)] == [200, 429]
    limits(tenant, max_active_tasks=0)
    assert {start(rpc, key=alice_key).status for _ in range(3)} == {200}


def test_a_follow_up_counts_against_the_cap_as_it_makes_its_task_active_again(
    rpc, tenant, conformance_agent, alice_key, runs, store_path
):
    from tasks_app.models import Message

    limits(tenant, max_active_tasks=1)
    waiting = start(rpc, PUBLIC, key=alice_key, messageId="tck-input-required-1").result["task"]
    assert run(runs.pop()) == "done"  # now input-required: no longer active
    assert start(rpc, PUBLIC, key=alice_key).status == 200  # the one active task
    messages = Message.objects.filter(task_id=waiting["id"]).count()
    follow_up = start(rpc, PUBLIC, "more", key=alice_key, taskId=waiting["id"])
    assert follow_up.status == 429 and follow_up.error["data"][0]["reason"] == "TOO_MANY_ACTIVE_TASKS"
    assert Message.objects.filter(task_id=waiting["id"]).count() == messages


def test_the_cap_is_checked_against_the_tenant_s_count_not_by_counting_its_tasks(
    rpc, tenant, echo_agent, alice_key, runs
):
    from tasks_app.models import ActiveTaskCount

    limits(tenant, max_active_tasks=3)
    assert start(rpc, key=alice_key).status == 200
    # The count says the tenant is at its cap, though it has one task: the send is refused.
    ActiveTaskCount.objects.filter(tenant=tenant).update(active=3)
    refused = start(rpc, key=alice_key)
    assert refused.status == 429 and refused.error["data"][0]["reason"] == "TOO_MANY_ACTIVE_TASKS"


def test_anonymous_callers_have_their_own_share_so_keyed_callers_still_start_tasks(
    rpc, tenant, conformance_agent, alice_key, runs, store_path
):
    from protocols import jsonrpc

    limits(tenant, max_active_tasks=4, max_active_anonymous_tasks=2)
    assert [start(rpc, PUBLIC, key=None).status for _ in range(2)] == [200, 200]
    before = stored_rows()
    refused = start(rpc, PUBLIC, key=None)
    assert refused.status == 429 and refused.headers["Retry-After"] == "5"
    assert refused.error["code"] == jsonrpc.RATE_LIMITED
    assert refused.error["message"].startswith("callers without an API key already have 2 tasks queued or running")
    assert refused.error["data"][0]["reason"] == "TOO_MANY_ACTIVE_TASKS"
    assert stored_rows() == before
    # The tenant's other two are the keyed callers' to take; then the whole cap holds.
    assert [start(rpc, PUBLIC, key=alice_key).status for _ in range(3)] == [200, 200, 429]
    assert run(runs[0]) == "done"  # an anonymous task finishes: an anonymous send passes again
    assert start(rpc, PUBLIC, key=None).status == 200


def test_the_site_s_default_anonymous_share_applies_and_zero_lifts_it(rpc, settings, tenant, conformance_agent, runs):
    settings.TENANT_MAX_ACTIVE_ANONYMOUS_TASKS = 1
    assert [start(rpc, PUBLIC, key=None).status for _ in range(2)] == [200, 429]
    limits(tenant, max_active_anonymous_tasks=0)
    assert {start(rpc, PUBLIC, key=None).status for _ in range(3)} == {200}


def test_an_anonymous_follow_up_counts_against_the_anonymous_share(rpc, tenant, conformance_agent, runs, store_path):
    limits(tenant, max_active_anonymous_tasks=1)
    waiting = start(rpc, PUBLIC, key=None, messageId="tck-input-required-1").result["task"]
    assert run(runs.pop()) == "done"  # input-required: no longer active
    assert start(rpc, PUBLIC, key=None).status == 200
    follow_up = start(rpc, PUBLIC, "more", key=None, taskId=waiting["id"])
    assert follow_up.status == 429 and "callers without an API key" in follow_up.error["message"]


def test_the_rate_limit_and_the_active_task_cap_share_their_code():
    from protocols import jsonrpc
    from tasks_app.errors import StorageQuotaExceeded, TooManyActiveTasks

    assert TooManyActiveTasks.code == jsonrpc.RATE_LIMITED
    assert StorageQuotaExceeded.code == jsonrpc.QUOTA_EXCEEDED
    assert not set(range(-32009, -32000)) & {jsonrpc.RATE_LIMITED, jsonrpc.QUOTA_EXCEEDED}


# --- stored bytes ------------------------------------------------------------------------------


def count_stored_bytes(**kw) -> dict:
    from tasks_app import services

    return services.stored_bytes_count(settle=kw.get("settle", 0), recount_every=kw.get("recount_every", 3600))


def stored_bytes(tenant) -> int:
    from tasks_app.models import TenantStorage

    row = TenantStorage.objects.filter(tenant=tenant).first()
    return row.stored_bytes if row else 0


def test_a_tenant_past_its_storage_quota_gets_the_dialect_s_error_and_nothing_is_stored(
    rpc, tenant, echo_agent, alice_key, runs, store_path
):
    from protocols import jsonrpc

    limits(tenant, max_stored_bytes=1000)
    assert start(rpc, ECHO, "x" * 2000, key=alice_key).status == 200  # the count is behind: taken
    count_stored_bytes()
    assert stored_bytes(tenant) > 2000
    before = stored_rows()
    params = {"message": user_message(), "configuration": {"returnImmediately": True}}
    refused = rpc(ECHO, "SendMessage", params, key=alice_key, request_id=4)
    assert refused.status == 200 and refused.body["id"] == 4  # not a retry-later answer
    assert refused.error["code"] == jsonrpc.QUOTA_EXCEEDED
    assert refused.error["message"].startswith("the tenant's storage quota of 1000 bytes is used up")
    assert refused.error["data"][0] == {
        "@type": jsonrpc.ERROR_INFO_TYPE,
        "reason": "STORAGE_QUOTA_EXCEEDED",
        "domain": "agentserver",
    }
    assert stored_rows() == before
    limits(tenant, max_stored_bytes=0)
    assert start(rpc, key=alice_key).status == 200


def test_the_site_s_default_storage_quota_is_a_gibibyte_and_holds_a_tenant_without_its_own(
    rpc, settings, tenant, echo_agent, alice_key, runs
):
    from agentserver import settings as production
    from tasks_app.models import TenantStorage

    assert production.TENANT_MAX_STORED_BYTES == settings.TENANT_MAX_STORED_BYTES == 1024**3
    TenantStorage.objects.update_or_create(tenant=tenant, defaults={"stored_bytes": 1024**3})
    refused = start(rpc, key=alice_key)
    assert refused.error["message"].startswith(f"the tenant's storage quota of {1024**3} bytes is used up")


def test_counting_twice_counts_each_row_once_and_a_full_recount_agrees(rpc, tenant, echo_agent, alice_key, runs):
    from tasks_app.models import StorageCount

    start(rpc, ECHO, "a" * 300, key=alice_key)
    count_stored_bytes()
    first = stored_bytes(tenant)
    count_stored_bytes()
    assert stored_bytes(tenant) == first
    start(rpc, ECHO, "b" * 300, key=alice_key)
    count_stored_bytes()
    incremental = stored_bytes(tenant)
    assert incremental > first + 300
    StorageCount.objects.update(recounted_at=None)  # a full recount is due
    assert count_stored_bytes()["full"] == 1
    assert stored_bytes(tenant) == incremental


def test_a_full_recount_gives_back_what_deleted_tasks_stored(rpc, tenant, echo_agent, alice_key, runs):
    from tasks_app.models import StorageCount, Task

    start(rpc, ECHO, "a" * 300, key=alice_key)
    count_stored_bytes()
    assert stored_bytes(tenant) > 300
    Task.objects.filter(tenant=tenant).delete()
    StorageCount.objects.update(recounted_at=None)
    count_stored_bytes()
    assert stored_bytes(tenant) == 0


def test_rows_younger_than_the_settling_time_wait_for_the_next_count(rpc, tenant, echo_agent, alice_key, runs):
    start(rpc, ECHO, "a" * 300, key=alice_key)
    count_stored_bytes(settle=3600)
    assert stored_bytes(tenant) == 0
    count_stored_bytes(settle=0)
    assert stored_bytes(tenant) > 300


def test_the_counting_job_takes_no_arguments_and_is_scheduled(settings):
    from tasks_app import tasks

    assert settings.CELERY_BEAT_SCHEDULE["count-stored-bytes"]["task"] == tasks.count_stored_bytes.name


# --- hostile input at the caps -------------------------------------------------------------------


hostile_bodies = st.one_of(
    st.binary(max_size=600),
    st.builds(  # the stdlib's JSON: ids past 64 bits too
        lambda request_id, text, extra: json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "SendMessage",
                "params": {"message": user_message(text), **extra},
            }
        ).encode(),
        st.one_of(st.none(), st.integers(), st.text(max_size=20), st.floats(allow_nan=False, allow_infinity=False)),
        st.text(max_size=500),
        st.dictionaries(st.sampled_from(["configuration", "metadata", "tenant"]), st.from_type(type(None)) | st.text()),
    ),
)


@hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=hostile_bodies, credential=st.sampled_from(["alice", "none", "bogus"]))
def test_hostile_requests_at_the_caps_never_get_a_500_nor_an_internal_error(
    rpc, tenant, echo_agent, conformance_agent, alice_key, runs, body, credential
):
    limits(
        tenant,
        max_active_tasks=1,
        max_active_anonymous_tasks=1,
        max_request_bytes=500,
        rate_limit_per_minute=30,
        anonymous_rate_limit_per_minute=30,
        max_push_configs_per_task=1,
        max_streams_per_caller=1,
    )
    if not runs:
        start(rpc, key=alice_key)  # the one active task the cap allows
    key = {"alice": alice_key, "none": None, "bogus": "bogus-key"}[credential]
    path = PUBLIC if key is None else ECHO
    answer = rpc.raw(path, body, key=key)
    assert answer.status < 500
    assert "error" in answer.body or "result" in answer.body
    if "error" in answer.body:
        assert answer.body["error"]["code"] != -32603
    if answer.status == 429:
        assert int(answer.headers["Retry-After"]) >= 1
    if answer.status == 200 and "result" in answer.body:
        assert "task" not in answer.body["result"]  # at the cap, no task is taken


# --- the embedded mode ---------------------------------------------------------------------------

EMBEDDED_SCRIPT = r"""
import json, uuid
import django
django.setup()
from django.core.management import call_command
from django.test import Client

call_command("migrate", verbosity=0)
call_command("seed_demo")
from accounts.models import Tenant
from accounts.services import api_key_create
from tasks_app import services
demo = Tenant.objects.get(slug="demo")
demo.rate_limit_per_minute, demo.max_stored_bytes = 2, 10
demo.save()
key = api_key_create(tenant=demo, name="t", principal="t")[1]
client = Client()

def send():
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    r = client.post("/agents/demo/echo/", data=json.dumps(body), content_type="application/json",
                    headers={"A2A-Version": "1.0", "X-API-Key": key})
    return [r.status_code, r.json().get("error", {}).get("code")]

answers = [send()]
services.stored_bytes_count(settle=0, recount_every=3600)
answers += [send(), send()]
print(json.dumps(answers))
"""


def test_the_embedded_mode_limits_in_process_and_counts_stored_bytes_on_sqlite(tmp_path):
    from tests.conftest import run_embedded

    answers = run_embedded(EMBEDDED_SCRIPT, tmp_path)
    # Taken; refused for the quota once counted; then over the rate limit of 2 a minute.
    assert answers == [[200, None], [200, -32030], [429, -32029]]
