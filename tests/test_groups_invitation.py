"""A Leader invites a hosted agent into its AIP group (the `group` method, seed 7.3 (1)).

The invitation is read field by field (InvalidParams naming the field), the broker's address
goes through the SSRF guard before any connection (and the connection goes to the address
checked), the agent binds its queue to the Leader's fanout exchange on the machine's RabbitMQ,
and a broker that cannot be joined is the seed's CONNECTION_FAILED. Nothing a Leader sends is
an internal error.

The handler is called as the AIP core calls it: `group(call, params)`.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from hashlib import sha256
from typing import Any

import aio_pika
import orjson
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import IntegrityError, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts import sealing
from groups import amqp
from groups.errors import AccessTokenInvalid, GroupConnectionFailed, GroupNotSupported
from groups.handler import NOT_JOINED, group
from groups.identity import member_aic
from groups.invitation import AMQP_NAME
from groups.models import GroupMembership, MembershipState
from protocols.exchange import Call
from tasks_app.errors import DomainError, InvalidParams
from tests.conftest import make_agent
from tests.groups_support import BROKER, Leader, invitation, keyed


@pytest.fixture
def agent(tenant):
    return make_agent(tenant, "partner", "echo")


def invite(agent, params: Any, *, principal: str = "alice") -> dict[str, Any]:
    return async_to_sync(group)(Call(agent=agent, principal=keyed(agent, principal)), params)


def closed_port() -> int:
    """A port on this machine nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _queue_holds(queue: str, exchange: str) -> int:
    """Publish one message to the exchange and count what waits in the member's queue."""
    connection = await aio_pika.connect(**BROKER)
    async with connection:
        channel = await connection.channel()
        target = await channel.get_exchange(exchange)
        await target.publish(aio_pika.Message(b'{"type": "ping"}'), routing_key="")
        await asyncio.sleep(0.05)  # routing is not instant
        declared = await channel.declare_queue(queue, passive=True)
        return declared.declaration_result.message_count


@pytest.mark.django_db
def test_an_invited_agent_binds_its_queue_to_the_group_exchange_and_answers_how_it_connected(agent):
    async def scenario():
        async with Leader() as leader:
            answer = leader.joined(await sync_to_async(invite)(agent, leader.invitation(partners=["acme/partner"])))
            held = await _queue_holds(answer["queueName"], leader.exchange_name)
            return answer, held, leader.group_id

    answer, held, group_id = async_to_sync(scenario)()

    assert set(answer) == {"connectionName", "vhost", "nodeName", "queueName", "processId"}
    assert answer["vhost"] == "/"
    assert answer["nodeName"].startswith("rabbit@")
    assert answer["queueName"] == f"group_agent-leader-aic_{group_id}_acme/partner.{sha256(b'alice').hexdigest()[:8]}"
    assert held == 1, "what the Leader publishes to the exchange reaches the member's queue"
    membership = GroupMembership.objects.get()
    assert membership.state == MembershipState.ACTIVE
    assert (membership.member_aic, membership.leader_aic, membership.owner) == (
        "acme/partner",
        "agent-leader-aic",
        "alice",
    )
    assert membership.partners == ["acme/partner"]
    assert answer["processId"].endswith(str(membership.pk))
    assert "guest" not in membership.access_token_sealed, "the access token is stored sealed"
    assert sealing.unseal(membership.access_token_sealed) == "guest"


@pytest.mark.django_db
def test_an_agent_without_an_aic_is_known_in_groups_by_its_tenant_and_slug(agent):
    assert member_aic(agent) == "acme/partner"


@pytest.mark.django_db
def test_a_broker_nobody_answers_on_is_the_seeds_connection_failed(agent):
    port = closed_port()

    with pytest.raises(GroupConnectionFailed) as refused:
        invite(agent, invitation("any-exchange", port=port))

    assert (refused.value.code, refused.value.message) == (-32603, "Internal error")
    assert refused.value.data["errorType"] == "CONNECTION_FAILED"
    details = refused.value.data["details"]
    assert (details["host"], details["port"]) == ("127.0.0.1", port) and details["reason"]
    assert GroupMembership.objects.get().state == MembershipState.FAILED


@pytest.mark.django_db
def test_a_wrong_access_token_is_the_seeds_invalid_access_token_and_says_the_login_was_refused(agent):
    with pytest.raises(AccessTokenInvalid) as refused:
        invite(agent, invitation("any-exchange", accessToken="not-the-password"))

    assert refused.value.code == -32010 and "refused the login" in refused.value.message
    assert "not-the-password" not in refused.value.message + str(refused.value.data)
    assert GroupMembership.objects.get().state == MembershipState.FAILED


@pytest.mark.django_db
def test_an_exchange_the_leader_did_not_create_is_refused_as_a_bad_param(agent):
    with pytest.raises(InvalidParams, match="amqp.exchange"):
        invite(agent, invitation("no-such-exchange-for-this-test"))


@pytest.mark.django_db
@pytest.mark.parametrize("host", ["127.0.0.2", "[::ffff:127.0.0.3]"])
def test_a_broker_on_an_address_outside_the_allow_list_is_refused_before_any_connection(agent, monkeypatch, host):
    def no_connection(*args, **kwargs):
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(amqp.aio_pika, "connect", no_connection)

    with pytest.raises(GroupConnectionFailed) as refused:
        invite(agent, invitation("any-exchange", host=host))

    assert refused.value.data["details"]["reason"] == NOT_JOINED
    assert not GroupMembership.objects.exists()


@pytest.mark.django_db
def test_a_broker_named_by_a_private_name_is_refused_and_a_public_one_is_connected_at_the_checked_address(
    agent, dns, monkeypatch
):
    dns["mq.internal.test"] = ["127.0.0.2"]
    with pytest.raises(GroupConnectionFailed) as refused:
        invite(agent, invitation("x", host="mq.internal.test"))
    assert "127.0.0.2" not in str(refused.value.data) and refused.value.data["details"]["reason"] == NOT_JOINED

    # A name that resolves to the allowed loopback address: the connection goes to the
    # address the guard checked, and the name is looked up once (no second answer to trust).
    dns["mq.example.test"] = ["127.0.0.1"]
    connected: list[str] = []
    real_connect = amqp.aio_pika.connect

    async def recording_connect(**params):
        if "client_properties" in params:  # the member's, not the test Leader's
            connected.append(params["host"])
        return await real_connect(**params)

    monkeypatch.setattr(amqp.aio_pika, "connect", recording_connect)

    async def scenario():
        async with Leader() as leader:
            return leader.joined(
                await sync_to_async(invite)(agent, invitation(leader.exchange_name, host="mq.example.test"))
            )

    async_to_sync(scenario)()
    assert connected == ["127.0.0.1"]
    assert dns.lookups.count("mq.example.test") == 1
    assert GroupMembership.objects.get(state=MembershipState.ACTIVE).host == "mq.example.test"


def _without(params: dict, path: str) -> dict:
    *parents, last = path.split(".")
    target = params
    for name in parents:
        target = target[name]
    del target[last]
    return params


def _with(params: dict, path: str, value: Any) -> dict:
    *parents, last = path.split(".")
    target = params
    for name in parents:
        target = target[name]
    target[last] = value
    return params


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda p: _with(p, "protocol", "kafka:3.0"), "protocol 'kafka:3.0' is not supported"),
        (lambda p: _with(p, "protocol", "rabbitmq:2.8"), "protocol 'rabbitmq:2.8' is not supported"),
        (lambda p: _without(p, "group"), "group must be an object"),
        (lambda p: _with(p, "group.groupId", ""), "group.groupId must not be empty"),
        (lambda p: _with(p, "group.groupId", 7), "group.groupId must be a string"),
        (lambda p: _without(p, "group.leader"), "group.leader must be an object"),
        (lambda p: _with(p, "group.leader", {"aic": None}), "group.leader.aic must be a string"),
        (lambda p: _with(p, "group.partners", {"aic": "x"}), "group.partners must be a list"),
        (lambda p: _with(p, "group.partners", [{"skills": []}]), "group.partners[0].aic must be a string"),
        (lambda p: _with(p, "server.host", "mq .example"), "server.host must be a host name or an IP address"),
        (lambda p: _with(p, "server.host", "a" * 300), "server.host is longer than 255"),
        (lambda p: _with(p, "server.port", 0), "server.port must be an integer from 1 to 65535"),
        (lambda p: _with(p, "server.port", "5672"), "server.port must be an integer"),
        (lambda p: _with(p, "server.port", True), "server.port must be an integer"),
        (lambda p: _without(p, "server.accessToken"), "server.accessToken must be a string"),
        (lambda p: _with(p, "server.vhost", "/v\x01"), "server.vhost must not contain control characters"),
        (lambda p: _with(p, "server.username", "é" * 200), "server.username is longer than 255 bytes"),
        (lambda p: _with(p, "amqp.exchange", ""), "amqp.exchange must not be empty"),
        (lambda p: _with(p, "amqp.exchange", "x" * 128), "amqp.exchange is longer than 127 characters"),
        (lambda p: _with(p, "server.vhost", "/" * 128), "server.vhost is longer than 127 characters"),
        (
            lambda p: _with(p, "amqp.exchange", "组-exchange"),
            "amqp.exchange '组-exchange' is not an AMQP exchange name",
        ),
        (lambda p: _with(p, "amqp.exchangeType", "topic"), "amqp.exchangeType must be 'fanout'"),
        (lambda p: _with(p, "amqp.routingKey", 5), "amqp.routingKey must be a string"),
        (lambda p: [p], "params must be an object"),
    ],
)
def test_a_bad_field_is_refused_as_invalid_params_naming_it(agent, change, named):
    with pytest.raises(InvalidParams) as refused:
        invite(agent, change(invitation("x")))

    assert named in refused.value.message
    assert refused.value.code == -32602
    assert not GroupMembership.objects.exists()


@pytest.mark.django_db
def test_group_mode_switched_off_or_an_inactive_agent_answers_group_not_supported(agent, settings):
    settings.AIP_GROUPS_ENABLED = False
    with pytest.raises(GroupNotSupported):
        invite(agent, invitation("x"))

    settings.AIP_GROUPS_ENABLED = True
    agent.is_active = False
    with pytest.raises(GroupNotSupported):
        invite(agent, invitation("x"))


@pytest.mark.django_db
def test_a_second_invitation_to_the_same_group_replaces_the_first(agent):
    async def scenario():
        async with Leader() as leader:
            first = leader.joined(await sync_to_async(invite)(agent, leader.invitation()))
            second = leader.joined(await sync_to_async(invite)(agent, leader.invitation()))
            other_owner = leader.joined(await sync_to_async(invite)(agent, leader.invitation(), principal="bob"))
            return first, second, other_owner

    first, second, other_owner = async_to_sync(scenario)()

    assert first["queueName"] == second["queueName"] != other_owner["queueName"]
    states = sorted(GroupMembership.objects.values_list("owner", "state", "state_reason"))
    assert states == [
        ("alice", "active", ""),
        ("alice", "left", "replaced by a new invitation"),
        ("bob", "active", ""),
    ]


_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)  # what JSON carries (and orjson writes)
_text = st.one_of(st.text(max_size=20), _int64, st.none(), st.booleans(), st.lists(_int64, max_size=2))


@st.composite
def hostile_invitations(draw) -> Any:
    """The seed's invitation with any of its fields replaced, removed or joined by others."""
    params = invitation("hostile-exchange", port=HOSTILE_PORT)
    paths = [
        "protocol",
        "group",
        "group.groupId",
        "group.leader",
        "group.leader.aic",
        "group.partners",
        "server",
        "server.host",
        "server.port",
        "server.vhost",
        "server.accessToken",
        "server.username",
        "amqp",
        "amqp.exchange",
        "amqp.exchangeType",
        "amqp.routingKey",
    ]
    for path in draw(st.lists(st.sampled_from(paths), max_size=4, unique=True)):
        try:
            if draw(st.booleans()):
                _without(params, path)
            else:
                _with(params, path, draw(_text))
        except (KeyError, TypeError):
            pass  # a parent already replaced
    return draw(st.one_of(st.just(params), _text)) if draw(st.integers(0, 9)) == 0 else params


HOSTILE_PORT = closed_port()


@pytest.mark.django_db
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=hostile_invitations())
def test_no_invitation_is_an_internal_error(agent, params):
    try:
        invite(agent, params)
    except GroupConnectionFailed as exc:
        assert exc.data["errorType"] == "CONNECTION_FAILED"
    except DomainError as exc:
        # A hostile invitation may name this machine's broker, which refuses its login: AIP's
        # own error for a refused token, like any other caller's mistake.
        assert isinstance(exc, InvalidParams | GroupNotSupported | AccessTokenInvalid), exc


# --- over HTTP, at the AIP dialect's path ---------------------------------------------------------

GROUP = "/agents/acme/partner/aip/group"


def post_group(client, params: Any, key: str) -> tuple[int, dict[str, Any]]:
    body = orjson.dumps({"jsonrpc": "2.0", "id": "1", "method": "group", "params": params})
    response = client.post(GROUP, data=body, content_type="application/json", headers={"X-API-Key": key})
    return response.status_code, orjson.loads(response.content)


@contextmanager
def group_exchange() -> Iterator[tuple[str, list[str]]]:
    """A Leader's fanout exchange on the machine's broker, for a test without an event loop of
    its own; the members' queues listed in the second value are deleted with it."""
    name, queues = f"test-group-{uuid.uuid4().hex[:12]}", []

    async def declare() -> None:
        async with await aio_pika.connect(**BROKER) as connection:
            channel = await connection.channel()
            await channel.declare_exchange(name, aio_pika.ExchangeType.FANOUT)

    async def delete() -> None:
        async with await aio_pika.connect(**BROKER) as connection:
            channel = await connection.channel()
            await channel.exchange_delete(name)
            for queue in queues:
                await channel.queue_delete(queue)

    asyncio.run(declare())
    try:
        yield name, queues
    finally:
        asyncio.run(delete())


@pytest.mark.django_db
def test_a_leader_invites_the_agent_over_http_and_gets_the_connection_details(client, agent, alice_key):
    with group_exchange() as (exchange, queues):
        status, body = post_group(client, invitation(exchange), alice_key)
        queues.append(body.get("result", {}).get("queueName", ""))

    assert status == 200 and body["id"] == "1", body
    assert set(body["result"]) == {"connectionName", "vhost", "nodeName", "queueName", "processId"}
    assert GroupMembership.objects.get().owner == "alice"


@pytest.mark.django_db
def test_over_http_a_refused_broker_is_connection_failed_and_group_mode_off_is_group_not_supported(
    client, agent, alice_key, settings
):
    status, body = post_group(client, invitation("x", host="127.0.0.2"), alice_key)
    assert status == 200
    assert (body["error"]["code"], body["error"]["message"]) == (-32603, "Internal error")
    assert body["error"]["data"] == {
        "errorType": "CONNECTION_FAILED",
        "details": {"host": "127.0.0.2", "port": 5672, "reason": NOT_JOINED},
    }

    settings.AIP_GROUPS_ENABLED = False
    status, body = post_group(client, invitation("x"), alice_key)
    assert (body["error"]["code"], body["error"]["message"]) == (-32007, "Group communication is not supported")


@contextmanager
def listener(answer: bytes | None) -> Iterator[int]:
    """A port on 127.0.0.1 that takes connections and says `answer` (then hangs up), or, with
    None, never says anything."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if answer is None:
                held.append(conn)
            else:
                conn.sendall(answer)
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.django_db
def test_over_http_a_broker_not_joined_for_any_reason_is_one_answer_at_one_moment(
    client, agent, alice_key, dns, settings
):
    """No port probe through invitations: a refused address, a name that does not resolve, a
    closed port, a port that never answers and one that answers something else than AMQP read
    the same, and come the same time after the invitation."""
    import time

    settings.AIP_GROUP_CONNECT_TIMEOUT, settings.AIP_GROUP_FAILED_JOIN_AFTER = 0.3, 1.2
    dns["mq.inside.test"] = ["127.0.0.2"]
    answers = []
    with listener(None) as silent, listener(b"HTTP/1.1 400 Bad Request\r\n\r\n") as talker:
        for host, port in [
            ("127.0.0.2", 5672),
            ("mq.inside.test", 5672),
            ("mq.nowhere.test", 5672),
            ("127.0.0.1", closed_port()),
            ("127.0.0.1", silent),
            ("127.0.0.1", talker),
        ]:
            began = time.monotonic()
            status, body = post_group(client, invitation("x", host=host, port=port), alice_key)
            took = time.monotonic() - began
            assert status == 200 and body["error"]["data"]["details"].pop("host") == host, body
            assert body["error"]["data"]["details"].pop("port") == port, body
            answers.append(body["error"])
            assert 1.2 <= took < 2.0, (host, port, took)
    assert all(answer == answers[0] for answer in answers), answers
    assert answers[0]["data"] == {"errorType": "CONNECTION_FAILED", "details": {"reason": NOT_JOINED}}


@pytest.mark.django_db
def test_over_http_a_broker_that_cannot_be_reached_is_the_seeds_connection_failed_error(client, agent, alice_key):
    port = closed_port()

    status, body = post_group(client, invitation("x", port=port), alice_key)

    assert status == 200
    assert body["error"]["code"] == -32603 and body["error"]["message"] == "Internal error"
    assert body["error"]["data"]["errorType"] == "CONNECTION_FAILED"
    assert body["error"]["data"]["details"]["host"] == "127.0.0.1"
    assert body["error"]["data"]["details"]["port"] == port


@pytest.mark.django_db
def test_the_database_holds_one_live_membership_per_agent_group_and_owner(agent):
    fields = {
        "agent": agent,
        "owner": "alice",
        "group_id": "g",
        "leader_aic": "l",
        "member_aic": "acme/partner",
        "protocol": "rabbitmq:4.0",
        "host": "127.0.0.1",
        "address": "127.0.0.1",
        "port": 5672,
        "vhost": "/",
        "username": "u",
        "access_token_sealed": sealing.seal("t"),
        "exchange": "x",
        "queue": "q",
        "connection_name": "c",
    }
    GroupMembership.objects.create(**fields, state=MembershipState.ACTIVE)
    GroupMembership.objects.create(**fields, state=MembershipState.LEFT)  # history is kept
    GroupMembership.objects.create(**{**fields, "owner": "bob"}, state=MembershipState.ACTIVE)
    with pytest.raises(IntegrityError, match="groups_membership_one_live_per_agent_group_owner"), transaction.atomic():
        GroupMembership.objects.create(**fields, state=MembershipState.JOINING)
    with pytest.raises(IntegrityError, match="groups_membership_state_valid"), transaction.atomic():
        GroupMembership.objects.create(**{**fields, "group_id": "h"}, state="lurking")


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=hostile_invitations())
def test_over_http_no_invitation_is_a_server_error(client, agent, alice_key, params):
    status, body = post_group(client, params, alice_key)

    assert status == 200 and body["id"] == "1", body
    error = body.get("error")
    if error is not None:
        # Refused as malformed, as not allowed, as a token the broker refused, or as a broker
        # out of reach (the seed's CONNECTION_FAILED): each its own answer, never a crash.
        assert error["code"] in (-32602, -32007, -32010) or error["data"]["errorType"] == "CONNECTION_FAILED", error


def test_a_queue_name_is_one_amqp_takes_whatever_the_aics_and_group_id_hold():
    plain = amqp.queue_name(leader_aic="1.2.156.3088", group_id="group123", member_aic="acme/partner", owner="alice")
    assert plain == f"group_1.2.156.3088_group123_acme/partner.{sha256(b'alice').hexdigest()[:8]}"
    odd = amqp.queue_name(leader_aic="l", group_id="组+1", member_aic="acme/partner", owner="alice")
    other = amqp.queue_name(leader_aic="l", group_id="组+2", member_aic="acme/partner", owner="alice")
    long = amqp.queue_name(leader_aic="l" * 200, group_id="g" * 200, member_aic="m", owner="alice")
    for name in (odd, other, long):
        assert AMQP_NAME.fullmatch(name) and len(name) <= 127, name
    assert odd != other and odd.startswith("group_l_")
