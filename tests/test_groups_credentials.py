"""A membership lasts only as long as the credential that made it, keeps its caller's rules,
and reaches only the tasks taken in its group (docs/groups.md, "Credentials of the Leader").

Invitations go over HTTP (the AIP `group` method, as a Leader sends them: an API key, a bearer
token, or nothing on a public agent); the runner consumes the group on the machine's RabbitMQ
in the test's event loop, as `manage.py aip_groups` runs it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import aio_pika
import aiormq
import orjson
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.utils import timezone

from accounts.models import ApiKey, OidcIssuer
from accounts.services import api_key_create, api_key_revoke, oidc_issuer_set
from groups import core
from groups.models import GroupMembership, GroupTask
from protocols import oidc
from tasks_app.models import Task
from tests.conftest import make_agent
from tests.groups_support import BROKER, Leader
from tests.oidc_issuer import AUDIENCE, ISSUER, Issuer, token
from tests.test_groups_runner import ME, SETTLED, Running, until

pytestmark = pytest.mark.django_db(transaction=True)

LONG_ID = "a" * 8 + "-" + uuid.uuid4().hex  # 41 characters: an id no one else can guess


@pytest.fixture(autouse=True)
def _fast_polls(settings):
    settings.AIP_GROUPS_POLL = 0.1
    settings.AIP_GROUP_RECONNECT_INTERVAL = 0.5


@pytest.fixture
def commands(monkeypatch) -> list[str]:
    """The commands the member applied (`core.command` calls that did not fail)."""
    applied: list[str] = []
    real = core.command

    async def counted(call, message):
        answer = await real(call, message)
        applied.append(f"{message['command']} {message['taskId']}")
        return answer

    monkeypatch.setattr(core, "command", counted)
    return applied


@pytest.fixture
def partner(tenant):
    return make_agent(tenant, "partner", "echo")


@pytest.fixture
def key(tenant) -> tuple[ApiKey, str]:
    return api_key_create(tenant=tenant, name="alice", principal="alice")


def post(client, method: str, params: Any, *, headers: dict[str, str], agent: str = "partner") -> dict[str, Any]:
    body = orjson.dumps({"jsonrpc": "2.0", "id": "1", "method": method, "params": params})
    response = client.post(
        f"/agents/acme/{agent}/aip/{method}", data=body, content_type="application/json", headers=headers
    )
    answer = orjson.loads(response.content)
    answer["status"] = response.status_code
    return answer


async def invite(client, leader: Leader, headers: dict[str, str], *, agent: str = "partner") -> dict[str, Any]:
    answer = await sync_to_async(post)(client, "group", leader.invitation(partners=[ME]), headers=headers, agent=agent)
    assert "result" in answer, answer
    return leader.joined(answer["result"])


def membership(**filters: Any) -> GroupMembership:
    return GroupMembership.objects.get(**filters)


async def queue_exists(name: str) -> bool:
    connection = await aio_pika.connect(**BROKER)
    async with connection:
        channel = await connection.channel()
        try:
            await channel.declare_queue(name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        return True


def test_a_revoked_key_ends_the_membership_on_the_next_leader_message_and_the_command_is_not_applied(
    client, partner, key, commands, settings
):
    row, secret = key

    async def scenario():
        async with Leader() as leader:
            joined = await invite(client, leader, {"X-API-Key": secret})
            running = await Running().consuming()
            try:
                settings.AIP_GROUPS_POLL = 60  # no look of the runner's from here on: the message ends it
                await asyncio.sleep(0.3)
                await sync_to_async(api_key_revoke)(key=row)
                await leader.command("start", "task-after-revoke", mentions=[ME])
                await until(lambda: membership().state == "left", db=True)
                heard = await leader.silence(0.5)
                return heard, await queue_exists(joined["queueName"])
            finally:
                await running.end()

    heard, queue_left = async_to_sync(scenario)()

    ended = membership()
    assert (ended.state, ended.state_reason) == ("left", "ended: the API key that made it was revoked")
    assert ended.credential == "key" and ended.api_key_id == row.pk
    assert commands == [] and not Task.objects.exists() and heard == []
    assert not queue_left, "the member deleted its queue: its AMQP consumer is gone"


@pytest.fixture
def tenant_issuer(tenant) -> Iterator[OidcIssuer]:
    """The tenant's OpenID Connect issuer, its keys served on this machine."""
    server = Issuer()
    oidc.cache_clear()
    try:
        yield oidc_issuer_set(tenant=tenant, issuer=ISSUER, audience=AUDIENCE, jwks_url=server.url)
    finally:
        server.stop()
        oidc.cache_clear()


def test_a_bearer_tokens_membership_ends_at_its_exp_even_when_the_group_is_quiet(
    client, tenant, partner, tenant_issuer
):
    exp = int(time.time()) + 3
    bearer = token(sub="carol", exp=exp)

    async def scenario():
        async with Leader() as leader:
            await invite(client, leader, {"Authorization": f"Bearer {bearer}"})
            running = await Running().consuming()
            try:
                await leader.manage("get-status", mentions=[ME])
                before = await leader.next()
                await until(lambda: membership().state == "left", timeout=8, db=True)
                return before, time.time()
            finally:
                await running.end()

    before, ended_at = async_to_sync(scenario)()

    assert before["groupMemberStatus"]["connected"] is True  # it served the group until then
    ended = membership()
    assert (ended.credential, ended.owner, ended.rate_identity) == ("bearer", "oidc:carol", f"oidc:{tenant.pk}:carol")
    assert ended.credential_expires_at.timestamp() == exp
    assert ended.state_reason == "ended: the bearer token that made it expired"
    assert exp <= ended_at < exp + 3


def test_a_bearer_tokens_membership_ends_when_the_tenants_issuer_is_removed(client, partner, tenant_issuer, commands):
    bearer = token(sub="carol")

    async def scenario():
        async with Leader() as leader:
            await invite(client, leader, {"Authorization": f"Bearer {bearer}"})
            running = await Running().consuming()
            try:
                await sync_to_async(tenant_issuer.delete)()
                await until(lambda: membership().state == "left", db=True)
                await leader.command("start", "task-after", mentions=[ME])
                return await leader.silence(0.5)
            finally:
                await running.end()

    heard = async_to_sync(scenario)()

    assert membership().state_reason == (
        "ended: the OpenID Connect issuer whose token made it no longer signs for this tenant"
    )
    assert heard == [] and commands == []


@pytest.fixture
def public_partner(tenant, settings):
    settings.GROUP_MAX_ANONYMOUS_MEMBERSHIPS = 5
    return make_agent(tenant, "partner", "conformance", is_public=True)


def test_an_anonymous_leader_cannot_make_a_guessable_task_or_reach_another_groups_task(
    client, public_partner, commands
):
    async def scenario():
        async with Leader() as first, Leader() as second:
            await invite(client, first, {})
            await invite(client, second, {})
            running = await Running().consuming(2)
            try:
                await first.command("start", "task-1", mentions=["all"])
                await first.command("start", LONG_ID, mentions=["all"], msg_id="tck-input-required-1")
                mine = await first.updates_until(LONG_ID, SETTLED)
                await second.command("get", LONG_ID, mentions=["all"])
                await second.command("cancel", LONG_ID, mentions=["all"])
                await second.command("start", LONG_ID, mentions=["all"])
                return mine, await second.silence(1.0)
            finally:
                await running.end()

    mine, second_heard = async_to_sync(scenario)()

    assert mine[-1]["status"]["state"] == "awaiting-input"
    assert not Task.objects.filter(client_task_id="task-1").exists(), "the anonymous 32-character rule holds"
    assert Task.objects.get(client_task_id=LONG_ID).state == "input-required", "the other group's cancel did nothing"
    assert second_heard == [] and commands == [f"start {LONG_ID}"]
    assert GroupMembership.objects.filter(credential="anonymous", owner="anonymous").count() == 2
    assert GroupTask.objects.count() == 1


def test_mentions_reach_only_tasks_taken_in_the_group_not_every_task_of_the_principal(client, partner, key, commands):
    _, secret = key
    outside = "taken-over-http-" + uuid.uuid4().hex
    message = {
        "type": "message",
        "id": "msg-outside",
        "sentAt": "2025-09-01T11:59:45+08:00",
        "senderRole": "leader",
        "senderId": "agent-leader-aic",
        "command": "start",
        "dataItems": [{"type": "text", "text": "made outside any group"}],
        "taskId": outside,
    }
    made = post(client, "rpc", {"message": message}, headers={"X-API-Key": secret})
    assert made["result"]["id"] == outside, made

    async def scenario():
        async with Leader() as leader:
            await invite(client, leader, {"X-API-Key": secret})
            running = await Running().consuming()
            try:
                for command in ("get", "cancel", "start"):
                    await leader.command(command, outside, mentions=["all"])
                    await leader.command(command, outside, mentions=[ME])
                return await leader.silence(1.0)
            finally:
                await running.end()

    heard = async_to_sync(scenario)()

    assert heard == [], "the task made over HTTP was not published into the group"
    assert commands == [] and not GroupTask.objects.exists()


def test_the_leaders_broker_commands_count_against_its_keys_rate_limit(client, tenant, partner, key, commands):
    _, secret = key
    tenant.rate_limit_per_minute = 3  # the invitation, then two commands
    tenant.save()

    async def scenario():
        async with Leader() as leader:
            await invite(client, leader, {"X-API-Key": secret})
            running = await Running().consuming()
            try:
                await leader.command("start", "rate-1", mentions=[ME])
                await leader.command("start", "rate-2", mentions=[ME])
                await leader.command("start", "rate-3", mentions=[ME])
                await until(lambda: len(commands) >= 2)
                await asyncio.sleep(1.0)
                return list(commands)
            finally:
                await running.end()

    applied = async_to_sync(scenario)()

    assert applied == ["start rate-1", "start rate-2"], "the third waits for the key's budget"
    refused = post(client, "rpc", {"message": {}}, headers={"X-API-Key": secret})
    assert refused["status"] == 429, refused


def test_a_caller_holds_at_most_its_cap_of_memberships_and_anonymous_callers_none_by_default(
    client, tenant, partner, key, settings
):
    settings.GROUP_MAX_MEMBERSHIPS_PER_CALLER = 1
    _, alice = key
    _, bob = api_key_create(tenant=tenant, name="bob", principal="bob")
    make_agent(tenant, "open", "echo", is_public=True)

    async def scenario():
        async with Leader() as first, Leader() as second:
            await invite(client, first, {"X-API-Key": alice})
            again = await sync_to_async(post)(client, "group", first.invitation(), headers={"X-API-Key": alice})
            first.joined(again["result"])  # a new invitation to the same group replaces the first
            refused = await sync_to_async(post)(client, "group", second.invitation(), headers={"X-API-Key": alice})
            await invite(client, second, {"X-API-Key": bob})  # a cap per caller
            anonymous = await sync_to_async(post)(client, "group", second.invitation(), headers={}, agent="open")
            return refused, anonymous

    refused, anonymous = async_to_sync(scenario)()

    assert (refused["error"]["code"], refused["error"]["message"]) == (-32007, "Group communication is not supported")
    assert (
        "this caller has 1 group memberships on this tenant's agents, the most allowed (1)"
        in (refused["error"]["data"]["details"])
    )
    assert anonymous["error"]["code"] == -32007
    assert "without credentials" in anonymous["error"]["data"]["details"]
    assert sorted(GroupMembership.objects.values_list("owner", "state")) == [
        ("alice", "active"),
        ("alice", "left"),
        ("bob", "active"),
    ]


def _expire(row: ApiKey, agent) -> None:
    row.expires_at = timezone.now() - timedelta(seconds=1)
    row.save()


def _restrict(row: ApiKey, agent) -> None:
    row.agents.set([make_agent(agent.tenant, "elsewhere", "echo")])


def _switch_off(row: ApiKey, agent) -> None:
    agent.is_active = False
    agent.save()


def _rename(row: ApiKey, agent) -> None:
    row.principal = "mallory"
    row.save()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_expire, "the API key that made it expired"),
        (_restrict, "the API key that made it may no longer call this agent"),
        (lambda row, agent: row.delete(), "the API key that made it was deleted"),
        (_rename, "the principal its credential names has changed"),
        (_switch_off, "the agent was switched off"),
    ],
    ids=["expired", "restricted", "deleted", "renamed", "agent-off"],
)
def test_a_membership_ends_on_the_runners_look_once_its_key_would_refuse_the_leader(
    client, partner, key, commands, change, reason
):
    row, secret = key

    async def scenario():
        async with Leader() as leader:
            await invite(client, leader, {"X-API-Key": secret})
            running = await Running().consuming()
            try:
                await sync_to_async(change)(row, partner)
                await until(lambda: membership().state == "left", db=True)
                await until(lambda: not running.runner.members)
                await leader.command("start", "task-after", mentions=[ME])
                return await leader.silence(0.5)
            finally:
                await running.end()

    heard = async_to_sync(scenario)()

    assert membership().state_reason == f"ended: {reason}"
    assert heard == [] and commands == []


def test_an_anonymous_membership_ends_when_the_agent_stops_being_public(client, public_partner):
    async def scenario():
        async with Leader() as leader:
            await invite(client, leader, {})
            running = await Running().consuming()
            try:
                public_partner.is_public = False
                await sync_to_async(public_partner.save)()
                await until(lambda: membership().state == "left", db=True)
            finally:
                await running.end()

    async_to_sync(scenario)()

    assert membership().state_reason == "ended: the agent is no longer public"


def test_a_membership_made_before_credentials_were_recorded_ends_on_the_runners_first_look(
    client, partner, key, commands
):
    _, secret = key

    async def scenario():
        async with Leader() as leader:
            await invite(client, leader, {"X-API-Key": secret})
            await sync_to_async(GroupMembership.objects.update)(credential="", api_key=None, rate_identity="")
            running = Running()
            try:
                await until(lambda: membership().state == "left", db=True)
            finally:
                await running.end()

    async_to_sync(scenario)()

    assert membership().state_reason == ("ended: it was made before memberships were tied to the Leader's credential")


def test_a_message_the_replaced_member_reads_is_left_to_the_membership_that_replaced_it(
    client, partner, key, commands, settings
):
    _, secret = key

    async def scenario():
        async with Leader() as leader:
            await invite(client, leader, {"X-API-Key": secret})
            running = await Running().consuming()
            try:
                settings.AIP_GROUPS_POLL = 60  # the old member is still consuming when the message comes
                await asyncio.sleep(0.3)
                old = next(iter(running.runner.members.values()))
                await invite(client, leader, {"X-API-Key": secret})  # the same group: replaces it
                await leader.command("start", "task-replaced", mentions=[ME])
                await until(lambda: old.left)
                await running.runner.sync()  # the new membership's member starts on the same queue
                return await leader.updates_until("task-replaced", SETTLED)
            finally:
                await running.end()

    updates = async_to_sync(scenario)()

    assert updates[-1]["status"]["state"] in SETTLED
    assert commands == ["start task-replaced"]
    assert sorted(GroupMembership.objects.values_list("state", flat=True)) == ["active", "left"]


def test_a_tenant_s_own_caps_take_the_place_of_the_site_s(client, tenant, partner, key, settings):
    settings.GROUP_MAX_MEMBERSHIPS_PER_CALLER = 10
    settings.GROUP_MAX_ANONYMOUS_MEMBERSHIPS = 0
    tenant.max_group_memberships_per_caller = 0
    tenant.max_anonymous_group_memberships = 1
    tenant.save()
    _, alice = key
    make_agent(tenant, "open", "echo", is_public=True)

    async def scenario():
        async with Leader() as leader:
            keyed = await sync_to_async(post)(client, "group", leader.invitation(), headers={"X-API-Key": alice})
            anonymous = await sync_to_async(post)(client, "group", leader.invitation(), headers={}, agent="open")
            leader.joined(anonymous["result"])
            return keyed

    keyed = async_to_sync(scenario)()

    assert keyed["error"]["code"] == -32007
    assert "the most allowed (0)" in keyed["error"]["data"]["details"]
    assert list(GroupMembership.objects.values_list("owner", "state")) == [("anonymous", "active")]
