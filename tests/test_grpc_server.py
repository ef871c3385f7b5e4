"""A2A 1.0 over gRPC across the real thing: `manage.py serve_grpc` (its own process), daphne,
Postgres, Redis and a Celery worker. The gRPC binding runs the same methods as JSON-RPC on the
same store: a task sent over gRPC is the task JSON-RPC reads; errors are the §5.4 status codes
with a google.rpc.ErrorInfo; streams replay from the event log; the official a2a-sdk gRPC
client drives it; hostile bytes never get an internal error and change nothing stored."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import grpc
import pytest
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, new_text_message
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskNotFoundError,
    TaskState,
    a2a_pb2,
    a2a_pb2_grpc,
)
from google.protobuf import json_format
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from protocols import cards
from protocols.bindings.grpc_binding import BINDING
from tasks_app.models import Task
from tests.grpc_support import as_dict, error_info, grpc_serving, metadata, text_message
from tests.test_live import call
from tests.test_live_streaming import WRITER_EVENTS, describe

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def grpc_address(live_celery):
    with grpc_serving(live_celery.env, live_celery.logs) as (address, _, _):
        yield address


@pytest.fixture
def stub(grpc_address):
    with grpc.insecure_channel(grpc_address) as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


def send(stub, key, text="hello over grpc", agent="acme/echo", **config):
    request = a2a_pb2.SendMessageRequest(
        message=text_message(text), configuration=a2a_pb2.SendMessageConfiguration(**config)
    )
    return stub.SendMessage(request, metadata=metadata(key=key, agent=agent), timeout=30)


# --- the methods -------------------------------------------------------------------------


def test_a_message_sent_over_grpc_completes_a_task_that_json_rpc_reads_the_same(live, stub, echo_agent, alice_key):
    answer = send(stub, alice_key)
    assert answer.WhichOneof("payload") == "task"
    task = answer.task
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "echo: hello over grpc"

    fetched = stub.GetTask(a2a_pb2.GetTaskRequest(id=task.id), metadata=metadata(key=alice_key))
    over_json_rpc = call(live, "/agents/acme/echo/", "GetTask", {"id": task.id}, alice_key)["result"]
    assert json_format.MessageToDict(fetched) == over_json_rpc
    assert json_format.ParseDict(over_json_rpc, a2a_pb2.Task()) == fetched


def test_list_tasks_and_cancel_over_grpc_see_only_the_callers_tasks(
    live, stub, echo_agent, writer_agent, alice_key, bob_key
):
    mine = send(stub, alice_key).task
    theirs = send(stub, bob_key).task
    listed = stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=metadata(key=alice_key))
    assert [t.id for t in listed.tasks] == [mine.id] and listed.total_size == 1
    assert theirs.id not in {t.id for t in listed.tasks}

    waiting = send(stub, alice_key, "Please write something for me.", agent="acme/writer").task
    assert waiting.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    canceled = stub.CancelTask(
        a2a_pb2.CancelTaskRequest(id=waiting.id), metadata=metadata(key=alice_key, agent="acme/writer")
    )
    assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED

    with pytest.raises(grpc.RpcError) as failed:
        stub.CancelTask(a2a_pb2.CancelTaskRequest(id=waiting.id), metadata=metadata(key=alice_key, agent="acme/writer"))
    assert error_info(failed.value) == (grpc.StatusCode.FAILED_PRECONDITION, "TASK_NOT_CANCELABLE", "a2a-protocol.org")


def test_the_writer_streams_over_grpc_in_order_and_a_subscription_to_a_finished_task_fails(
    live, stub, writer_agent, alice_key
):
    request = a2a_pb2.SendMessageRequest(message=text_message("a poem about rivers"))
    received = [
        as_dict(r)
        for r in stub.SendStreamingMessage(request, metadata=metadata(key=alice_key, agent="acme/writer"), timeout=30)
    ]
    assert [describe(r) for r in received] == WRITER_EVENTS
    task_id = received[0]["task"]["id"]

    # The task is done: a subscription fails as §10.4.6 says, over gRPC as over JSON-RPC.
    with pytest.raises(grpc.RpcError) as failed:
        list(
            stub.SubscribeToTask(
                a2a_pb2.SubscribeToTaskRequest(id=task_id),
                metadata=metadata(key=alice_key, agent="acme/writer"),
                timeout=30,
            )
        )
    assert error_info(failed.value)[:2] == (grpc.StatusCode.UNIMPLEMENTED, "UNSUPPORTED_OPERATION")


def test_a_client_that_drops_its_stream_resubscribes_with_its_last_event_id_and_gets_exactly_the_rest(
    live, stub, slow_writer_agent, alice_key
):
    where = metadata(key=alice_key, agent="acme/slowgrpc")
    request = a2a_pb2.SendMessageRequest(message=text_message("a letter about tea"))
    call = stub.SendStreamingMessage(request, metadata=where, timeout=30)
    before = [as_dict(next(call)) for _ in range(3)]
    call.cancel()  # the connection drops after the third event (seq 3)
    task_id = before[0]["task"]["id"]
    resumed = stub.SubscribeToTask(
        a2a_pb2.SubscribeToTaskRequest(id=task_id), metadata=[*where, ("last-event-id", "3")], timeout=30
    )
    after = [as_dict(r) for r in resumed]
    assert [describe(r) for r in before + after] == WRITER_EVENTS


def test_push_configs_round_trip_over_grpc(live, stub, writer_agent, alice_key):
    task = send(stub, alice_key, "Please write something for me.", agent="acme/writer").task
    where = metadata(key=alice_key, agent="acme/writer")
    created = stub.CreateTaskPushNotificationConfig(
        a2a_pb2.TaskPushNotificationConfig(task_id=task.id, url="https://example.com/hook", token="t0k"), metadata=where
    )
    assert created.id and created.task_id == task.id and created.url == "https://example.com/hook"
    got = stub.GetTaskPushNotificationConfig(
        a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=task.id, id=created.id), metadata=where
    )
    assert got == created
    listed = stub.ListTaskPushNotificationConfigs(
        a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=task.id), metadata=where
    )
    assert [c.id for c in listed.configs] == [created.id]
    stub.DeleteTaskPushNotificationConfig(
        a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=created.id), metadata=where
    )
    with pytest.raises(grpc.RpcError) as failed:
        stub.GetTaskPushNotificationConfig(
            a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=task.id, id=created.id), metadata=where
        )
    assert failed.value.code() == grpc.StatusCode.NOT_FOUND


# --- errors and refusals -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (dict(key=None), (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", "agentserver")),
        (dict(key="not-a-key"), (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", "agentserver")),
        (dict(agent=None), (grpc.StatusCode.NOT_FOUND, "AGENT_NOT_FOUND", "agentserver")),
        (dict(agent="acme/nobody"), (grpc.StatusCode.NOT_FOUND, "AGENT_NOT_FOUND", "agentserver")),
        (dict(version="9.9"), (grpc.StatusCode.UNIMPLEMENTED, "VERSION_NOT_SUPPORTED", "a2a-protocol.org")),
        (dict(), (grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND", "a2a-protocol.org")),
    ],
    ids=["no key", "a bad key", "no agent", "no such agent", "another version", "no such task"],
)
def test_each_refusal_is_its_status_code_with_an_error_info(live, stub, echo_agent, alice_key, where, expected):
    pairs = metadata(**{"key": alice_key, **where})
    with pytest.raises(grpc.RpcError) as failed:
        stub.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"), metadata=pairs)
    assert error_info(failed.value) == expected


def test_the_request_s_tenant_field_chooses_the_agent_as_the_card_says(live, stub, echo_agent, alice_key):
    sent = stub.SendMessage(
        a2a_pb2.SendMessageRequest(tenant="acme/echo", message=text_message("by tenant")),
        metadata=metadata(key=alice_key, agent=None),
        timeout=30,
    )
    assert sent.task.artifacts[0].parts[0].text == "echo: by tenant"
    got = stub.GetTask(
        a2a_pb2.GetTaskRequest(tenant="acme/echo", id=sent.task.id), metadata=metadata(key=alice_key, agent=None)
    )
    assert got.id == sent.task.id
    # ListTaskPushNotificationConfigsRequest carries its tenant as field 4, not 1.
    listed = stub.ListTaskPushNotificationConfigs(
        a2a_pb2.ListTaskPushNotificationConfigsRequest(tenant="acme/echo", task_id=sent.task.id),
        metadata=metadata(key=alice_key, agent=None),
    )
    assert list(listed.configs) == []


def test_a_tenant_field_that_names_no_agent_is_not_found_and_says_what_to_send(live, stub, echo_agent, alice_key):
    for tenant in ("acme", "acme/nobody", "acme/echo/more"):
        with pytest.raises(grpc.RpcError) as failed:
            stub.GetTask(a2a_pb2.GetTaskRequest(tenant=tenant, id="t"), metadata=metadata(key=alice_key, agent=None))
        assert error_info(failed.value) == (grpc.StatusCode.NOT_FOUND, "AGENT_NOT_FOUND", "agentserver"), tenant


def test_the_metadata_names_the_agent_before_the_tenant_field(live, stub, echo_agent, alice_key):
    with pytest.raises(grpc.RpcError) as failed:
        stub.GetTask(
            a2a_pb2.GetTaskRequest(tenant="acme/echo", id="t"), metadata=metadata(key=alice_key, agent="acme/nobody")
        )
    assert error_info(failed.value)[:2] == (grpc.StatusCode.NOT_FOUND, "AGENT_NOT_FOUND")


def test_a_call_without_a2a_version_is_a_1_0_call_since_only_1_0_has_this_service(live, stub, echo_agent, alice_key):
    sent = stub.SendMessage(
        a2a_pb2.SendMessageRequest(tenant="acme/echo", message=text_message("no version")),
        metadata=metadata(key=alice_key, agent=None, version=None),
        timeout=30,
    )
    assert sent.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    with pytest.raises(grpc.RpcError) as failed:
        stub.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"), metadata=metadata(key=alice_key, version=""))
    assert error_info(failed.value) == (grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND", "a2a-protocol.org")


def test_a_request_without_its_required_fields_is_invalid_argument(live, stub, echo_agent, alice_key):
    with pytest.raises(grpc.RpcError) as failed:
        stub.GetTask(a2a_pb2.GetTaskRequest(), metadata=metadata(key=alice_key))
    assert error_info(failed.value) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS", "a2a-protocol.org")
    assert "id" in failed.value.details()
    with pytest.raises(grpc.RpcError) as failed:
        stub.SendMessage(
            a2a_pb2.SendMessageRequest(message=a2a_pb2.Message(message_id="m")), metadata=metadata(key=alice_key)
        )
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- hostile input -----------------------------------------------------------------------


def raw_call(address: str, method: str, body: bytes, pairs) -> grpc.RpcError | bytes:
    with grpc.insecure_channel(address) as channel:
        rpc = channel.unary_unary(f"/lf.a2a.v1.A2AService/{method}")
        try:
            return rpc(body, metadata=pairs, timeout=30)
        except grpc.RpcError as exc:
            return exc


def test_bytes_that_are_no_protobuf_are_invalid_argument_and_a_huge_message_resource_exhausted(
    live, grpc_address, echo_agent, alice_key
):
    before = Task.objects.count()
    failed = raw_call(grpc_address, "SendMessage", b"\xff\xff\xff\xff\x0f", metadata(key=alice_key))
    assert isinstance(failed, grpc.RpcError)
    assert error_info(failed) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST", "a2a-protocol.org")

    # A string where a message is: field 2 (message) as a bare varint.
    failed = raw_call(grpc_address, "SendMessage", b"\x10\x01", metadata(key=alice_key))
    assert isinstance(failed, grpc.RpcError) and failed.code() == grpc.StatusCode.INVALID_ARGUMENT

    huge = a2a_pb2.SendMessageRequest(message=text_message("x" * 3_000_000)).SerializeToString()
    failed = raw_call(grpc_address, "SendMessage", huge, metadata(key=alice_key))
    assert isinstance(failed, grpc.RpcError) and failed.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert Task.objects.count() == before


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    method=st.sampled_from(["SendMessage", "GetTask", "ListTasks", "CancelTask", "CreateTaskPushNotificationConfig"]),
    body=st.binary(max_size=300),
    keyed=st.booleans(),
)
def test_no_hostile_bytes_are_an_internal_error_and_none_change_what_is_stored(
    live_celery, grpc_address, echo_agent, alice_key, method, body, keyed
):
    before = Task.objects.count()
    answer = raw_call(grpc_address, method, body, metadata(key=alice_key if keyed else None))
    if isinstance(answer, grpc.RpcError):
        assert answer.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), answer.details()
        error_info(answer)
    if not keyed or method != "SendMessage":
        assert Task.objects.count() == before


# --- the official client -----------------------------------------------------------------


def test_the_a2a_sdk_grpc_client_sends_streams_gets_lists_cancels_and_subscribes(
    live, grpc_address, settings, echo_agent, writer_agent, alice_key
):
    settings.GRPC_PUBLIC_URL = grpc_address

    def card_of(agent) -> AgentCard:
        card = json_format.ParseDict(cards.agent_card(agent, base_url=live.url), AgentCard())
        assert card.supported_interfaces[-1].protocol_binding == "GRPC"
        return card

    echo_card, writer_card = card_of(echo_agent), card_of(writer_agent)

    async def scenario():
        factory = ClientFactory(
            ClientConfig(
                streaming=True,
                grpc_channel_factory=grpc.aio.insecure_channel,
                supported_protocol_bindings=["GRPC"],
            )
        )
        # From the card alone: the SDK puts the card's `tenant` in each request; only the key is ours.
        echo_context = writer_context = ClientCallContext(service_parameters={"X-API-Key": alice_key})
        async with factory.create(echo_card) as echo:
            sent = [
                r
                async for r in echo.send_message(
                    SendMessageRequest(message=new_text_message("hi sdk", role=Role.ROLE_USER)), context=echo_context
                )
            ]
            events = [r for r in sent]
            final = events[-1]
            task = final.task if final.HasField("task") else None
            task_id = task.id if task else final.status_update.task_id
            fetched = await echo.get_task(GetTaskRequest(id=task_id), context=echo_context)
            assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
            assert "".join(get_artifact_text(a) for a in fetched.artifacts) == "echo: hi sdk"
            listed = await echo.list_tasks(ListTasksRequest(), context=echo_context)
            assert task_id in {t.id for t in listed.tasks}
            with pytest.raises(TaskNotFoundError):
                await echo.get_task(GetTaskRequest(id="no-such-task"), context=echo_context)
        async with factory.create(writer_card) as writer:
            first = [
                r
                async for r in writer.send_message(
                    SendMessageRequest(message=new_text_message("Please write something for me.", role=Role.ROLE_USER)),
                    context=writer_context,
                )
            ]
            waiting_id = first[0].task.id
            waiting = await writer.get_task(GetTaskRequest(id=waiting_id), context=writer_context)
            assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

            async def subscribed():
                return [
                    r async for r in writer.subscribe(SubscribeToTaskRequest(id=waiting_id), context=writer_context)
                ]

            following = asyncio.ensure_future(subscribed())
            await asyncio.sleep(0.5)
            canceled = await writer.cancel_task(CancelTaskRequest(id=waiting_id), context=writer_context)
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            seen = await asyncio.wait_for(following, 30)
            assert seen[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED

    asyncio.run(scenario())


# --- the process -------------------------------------------------------------------------


def test_sigterm_lets_a_call_in_flight_finish_then_the_server_stops(live_celery, slow_writer_agent, alice_key):
    with grpc_serving(live_celery.env, live_celery.logs) as (address, proc, log):
        with grpc.insecure_channel(address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            pending = stub.SendMessage.future(
                a2a_pb2.SendMessageRequest(message=text_message("a poem about rivers")),
                metadata=metadata(key=alice_key, agent="acme/slowgrpc"),
                timeout=30,
            )
            time.sleep(0.5)
            os.kill(proc.pid, signal.SIGTERM)
            answer = pending.result()
            assert answer.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
        assert proc.wait(15) == 0
        assert "stopped" in log.read_text()


def test_sigterm_ends_an_open_stream_with_unavailable_saying_to_subscribe_again(live_celery, writer_agent, alice_key):
    with grpc_serving(live_celery.env, live_celery.logs) as (address, proc, _):
        with grpc.insecure_channel(address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            where = metadata(key=alice_key, agent="acme/writer")
            waiting = send(stub, alice_key, "Please write something for me.", agent="acme/writer").task
            stream = stub.SubscribeToTask(a2a_pb2.SubscribeToTaskRequest(id=waiting.id), metadata=where, timeout=30)
            assert next(stream).task.id == waiting.id
            os.kill(proc.pid, signal.SIGTERM)
            with pytest.raises(grpc.RpcError) as ended:
                list(stream)
            assert error_info(ended.value) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN", "agentserver")
            assert "resubscribe" in ended.value.details()
        assert proc.wait(15) == 0


def test_a_call_is_traced_from_the_callers_traceparent_through_the_agent_request(
    live_celery, echo_agent, alice_key, tmp_path
):
    import json

    spans = tmp_path / "spans.jsonl"
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with grpc_serving({**live_celery.env, "TRACING_EXPORTER": f"file:{spans}"}, live_celery.logs) as (address, _, _):
        with grpc.insecure_channel(address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            where = metadata(key=alice_key, traceparent=f"00-{caller_trace}-{caller_span}-01")
            stub.SendMessage(a2a_pb2.SendMessageRequest(message=text_message("trace me")), metadata=where, timeout=30)
    found = [json.loads(line) for line in spans.read_text().splitlines()]  # the server flushed as it stopped
    (call,) = [s for s in found if s["kind"] == "SERVER" and s["name"].endswith("A2AService/SendMessage")]
    assert call["trace_id"] == caller_trace and call["parent_id"] == caller_span
    assert call["service"] == "agentserver-grpc"
    (request,) = [s for s in found if s["name"] == f"agent request {BINDING.name}"]
    assert request["parent_id"] == call["span_id"] and request["attributes"]["agentserver.method"] == "SendMessage"
    assert any(s["trace_id"] == caller_trace and s["attributes"].get("db.system") == "postgresql" for s in found)
    # Health checks (the test's own readiness polls) make no spans.
    assert not [s for s in found if "Health" in s["name"]]


def test_its_own_metrics_port_serves_its_counts_to_a_bearer_of_the_metrics_token(live_celery, echo_agent, alice_key):
    import httpx

    from tests.conftest import _free_port
    from tests.test_ops import sample

    port = _free_port()
    env = {**live_celery.env, "GRPC_METRICS_PORT": str(port), "GRPC_METRICS_ADDR": "127.0.0.1", "METRICS_TOKEN": "g"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # one process: its own memory
    with grpc_serving(env, live_celery.logs) as (address, _, _):
        with grpc.insecure_channel(address) as channel:
            send(a2a_pb2_grpc.A2AServiceStub(channel), alice_key)
        url = f"http://127.0.0.1:{port}/metrics"
        assert httpx.get(url, timeout=10).status_code == 401
        scraped = httpx.get(url, headers={"Authorization": "Bearer g"}, timeout=10).text
    labels = {"binding": BINDING.name, "dialect": "a2a/1.0", "method": "SendMessage", "outcome": "ok"}
    assert sample(scraped, "agentserver_requests_total", **labels) == 1, scraped


@pytest.fixture
def slow_writer_agent(tenant):
    from tests.conftest import make_agent

    return make_agent(tenant, "slowgrpc", "writer", settings={"delay": 0.25, "paragraphs": 4})


# --- the tenant field, read alone ------------------------------------------------------------


@given(body=st.binary(max_size=256))
@hypothesis_settings(max_examples=300, deadline=None)
def test_reading_the_tenant_of_any_bytes_gives_a_string_and_never_raises(body):
    from protocols import grpc_server

    for rpc in grpc_server.RPCS.values():
        assert isinstance(grpc_server._tenant_of(rpc, body), str)


@given(tenant=st.text(max_size=40), text=st.text(max_size=40))
@hypothesis_settings(max_examples=100, deadline=None)
def test_the_tenant_read_alone_is_the_one_the_full_message_carries(tenant, text):
    from protocols import grpc_server

    request = a2a_pb2.SendMessageRequest(tenant=tenant, message=text_message(text))
    assert grpc_server._tenant_of(grpc_server.RPCS["SendMessage"], request.SerializeToString()) == tenant.strip()
    listing = a2a_pb2.ListTaskPushNotificationConfigsRequest(tenant=tenant, task_id=text, page_size=3)
    rpc = grpc_server.RPCS["ListTaskPushNotificationConfigs"]
    assert grpc_server._tenant_of(rpc, listing.SerializeToString()) == tenant.strip()
