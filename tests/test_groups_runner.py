"""The group runner: a hosted agent in a Leader's group on the machine's RabbitMQ.

A test Leader creates the group's fanout exchange, invites the agent, and talks to the group;
it reads what the agent publishes from a queue of its own on the same exchange. The runner
runs in the test's event loop (as `manage.py aip_groups` runs it), the agent runs when its
task commits (eagerly, in-process), and what the agent says reaches the group as AIP Tasks
with its senderId and groupId, in the order of the task's states.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
import aiormq
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import OperationalError

from groups import core
from groups.handler import group
from groups.models import GroupMembership, GroupTask
from groups.runner import Runner
from protocols.exchange import Call
from tasks_app.models import Task
from tests.conftest import ROOT, STARTUP_TIMEOUT, make_agent
from tests.groups_support import BROKER, Leader, broker_connections, close_broker_connections, keyed

ME = "acme/partner"
OTHER = "agent-partner-2"
# The order AIP's states come in (seed 4.2); a task's updates never go back in it, but for a
# `continue`, which takes an interrupted task back to work.
ORDER = ["accepted", "working", "awaiting-input", "awaiting-completion", "completed", "canceled", "failed", "rejected"]
SETTLED = {"awaiting-input", "awaiting-completion", "completed", "canceled", "failed", "rejected"}

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast_polls(settings):
    settings.AIP_GROUPS_POLL = 0.1
    settings.AIP_GROUP_RECONNECT_INTERVAL = 0.5


@pytest.fixture
def commands(monkeypatch) -> list[str]:
    """The commands the member applied (`core.command` calls)."""
    applied: list[str] = []
    real = core.command

    async def counted(call, message):
        applied.append(message["command"])
        return await real(call, message)

    monkeypatch.setattr(core, "command", counted)
    return applied


@pytest.fixture
def partner(tenant):
    return make_agent(tenant, "partner", "echo")


@pytest.fixture
def conformance_partner(tenant):
    return make_agent(tenant, "partner", "conformance")


async def joined(leader: Leader, agent) -> dict[str, Any]:
    call = Call(agent=agent, principal=await sync_to_async(keyed)(agent))
    return leader.joined(await group(call, leader.invitation(partners=[ME, OTHER])))


async def until(predicate: Callable[[], Any], timeout: float = 5.0, *, db: bool = False) -> None:
    """Wait until `predicate()` holds (`db`: it reads the database, off the event loop)."""
    check = sync_to_async(predicate) if db else None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (await check() if check else predicate()):
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


class Running:
    """The runner in this event loop, until stopped."""

    def __init__(self) -> None:
        self.runner = Runner()
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.runner.run(self.stop))

    async def consuming(self, count: int = 1) -> Running:
        await until(lambda: len(self.runner.members) >= count)
        return self

    async def end(self) -> None:
        self.stop.set()
        await self.task


def in_group(agent, body: Callable[[Leader, Running], Awaitable[Any]]) -> Any:
    async def scenario():
        async with Leader() as leader:
            await joined(leader, agent)
            running = await Running().consuming()
            try:
                return await body(leader, running)
            finally:
                await running.end()

    return async_to_sync(scenario)()


def states(updates: list[dict[str, Any]]) -> list[str]:
    return [u["status"]["state"] for u in updates]


def in_order(seen: list[str]) -> bool:
    return [ORDER.index(s) for s in seen] == sorted(ORDER.index(s) for s in seen)


def test_a_start_that_mentions_the_member_runs_the_agent_and_its_updates_reach_the_group_in_order(partner, commands):
    async def body(leader: Leader, running: Running):
        await leader.command("start", "task-5678", text="hello group", mentions=[ME])
        done = await leader.updates_until("task-5678", SETTLED)
        await leader.command("complete", "task-5678", mentions=[ME])  # the Leader is satisfied
        completed = await leader.updates_until("task-5678", {"completed"})
        await until(lambda: GroupTask.objects.get().done, db=True)  # recorded once published
        return done, completed

    done, completed = in_group(partner, body)

    updates = done + completed
    seen = states(updates)
    assert seen[0] == "accepted" and seen[-2:] == ["awaiting-completion", "completed"] and in_order(seen), seen
    assert commands == ["start", "complete"]
    group_id = GroupMembership.objects.get().group_id
    assert all(u["type"] == "task" and u["senderId"] == ME and u["groupId"] == group_id for u in updates)
    assert all(u["id"] == "task-5678" and u["sessionId"] == "session-91011" for u in updates)
    (product,) = done[-1]["products"]
    assert product["dataItems"] == [{"type": "text", "text": "echo: hello group"}]
    assert completed[-1]["products"] == done[-1]["products"]
    task = Task.objects.get()
    assert (task.client_task_id, task.owner, task.state) == ("task-5678", "alice", "completed")


def test_a_command_that_mentions_only_another_partner_is_not_acted_on(partner, commands):
    async def body(leader: Leader, running: Running):
        await leader.command("start", "task-theirs", mentions=[OTHER])
        heard = await leader.silence(0.4)
        await leader.command("start", "task-everyones", mentions=["all"])
        updates = await leader.updates_until("task-everyones", {"completed", "awaiting-completion"})
        return heard, updates

    heard, updates = in_group(partner, body)

    assert heard == []
    assert commands == ["start"], "only the start that mentions all was applied"
    assert states(updates)[0] == "accepted"
    assert list(Task.objects.values_list("client_task_id", flat=True)) == ["task-everyones"]


def test_without_mentions_a_member_takes_a_start_but_not_a_command_for_a_task_it_does_not_hold(partner, commands):
    async def body(leader: Leader, running: Running):
        await leader.command("cancel", "task-of-someone-else")
        await leader.command("start", "task-open")
        done = await leader.updates_until("task-open", {"completed", "awaiting-completion"})
        await leader.command("cancel", "task-open")  # 7.3 (7): whoever works on it cancels it
        canceled = await leader.updates_until("task-open", {"canceled"})
        return done, canceled

    done, canceled = in_group(partner, body)

    assert commands == ["start", "cancel"], "the cancel of a task it does not hold was not applied"
    assert states(done)[0] == "accepted" and done[-1]["senderId"] == ME
    assert states(canceled) == ["canceled"]


def test_a_task_that_waits_for_input_goes_on_when_the_leader_continues_it(conformance_partner, commands):
    async def body(leader: Leader, running: Running):
        await leader.command("start", "task-7890", mentions=[ME], msg_id="tck-input-required-1")
        first = await leader.updates_until("task-7890", SETTLED)
        await leader.command("continue", "task-7890", mentions=[ME], msg_id="tck-complete-task-2", text="3000 yuan")
        second = await leader.updates_until("task-7890", {"completed", "awaiting-completion"})
        return first, second

    first, second = in_group(conformance_partner, body)

    assert states(first)[0] == "accepted" and states(first)[-1] == "awaiting-input"
    assert in_order(states(second)) and states(second)[-1] in {"completed", "awaiting-completion"}
    assert commands == ["start", "continue"]


def test_the_member_answers_status_queries_is_muted_and_unmuted_and_leaves_when_told(partner, commands):
    async def body(leader: Leader, running: Running):
        heard = {}
        await leader.manage("get-status")
        heard["status"] = await leader.next()
        await leader.manage("mute", mentions=[ME])
        heard["muted"] = await leader.next()
        await leader.command("start", "task-quiet")
        await until(lambda: Task.objects.filter(state__in=["completed", "awaiting-completion"]).exists(), db=True)
        heard["while muted"] = await leader.silence(0.4)
        await leader.command("get", "task-quiet", mentions=[ME])
        heard["asked while muted"] = await leader.next()
        await leader.manage("unmute", mentions=["all"])
        heard["unmuted"] = await leader.next()
        await leader.manage("leave-group", mentions=[OTHER])
        heard["leave for another"] = await leader.silence(0.3)
        await leader.manage("leave-group", mentions=[ME])
        heard["left"] = await leader.next()
        membership = await sync_to_async(GroupMembership.objects.get)()
        await until(lambda: not running.runner.members)
        heard["queue"] = await queue_exists(membership.queue)
        return heard

    heard = in_group(partner, body)

    status = heard["status"]
    assert (status["type"], status["senderId"], status["senderRole"]) == ("group-mgmt-message", ME, "partner")
    assert status["groupMemberStatus"] == {"connected": True, "muted": False}
    assert heard["muted"]["groupMemberStatus"] == {"connected": True, "muted": True}
    assert heard["while muted"] == [], "a muted member's task updates are not published"
    asked = heard["asked while muted"]
    assert (asked["type"], asked["id"], asked["senderId"]) == ("task", "task-quiet", ME), "but it answers when asked"
    assert heard["unmuted"]["groupMemberStatus"] == {"connected": True, "muted": False}
    assert heard["leave for another"] == []
    assert heard["left"]["groupMemberStatus"] == {"connected": False, "muted": False}
    assert heard["queue"] is False, "a member that left deletes its queue"
    membership = GroupMembership.objects.get()
    assert (membership.state, membership.state_reason) == ("left", "the Leader asked it to leave")


async def queue_exists(name: str) -> bool:
    connection = await aio_pika.connect(**BROKER)
    async with connection:
        channel = await connection.channel()
        try:
            await channel.declare_queue(name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        return True


def test_what_the_member_cannot_read_is_dropped_and_the_consumer_goes_on(partner, commands):
    async def body(leader: Leader, running: Running):
        await leader.say(b"not json at all")
        await leader.say(b"[1, 2, 3]")
        await leader.say({"type": "mystery", "senderId": "agent-leader-aic"})
        await leader.say({"type": "message", "senderId": "agent-leader-aic", "command": "start", "mentions": [ME]})
        await leader.say({"type": "message", "senderId": "agent-partner-2", "command": "start", "taskId": "t-x"})
        await leader.say({"type": "task", "id": "t-y", "senderId": OTHER, "status": {"state": "working"}})
        await leader.command("start", "task-after-the-noise", mentions=[ME])
        return await leader.updates_until("task-after-the-noise", {"completed", "awaiting-completion"})

    updates = in_group(partner, body)

    assert states(updates)[0] == "accepted"
    assert commands == ["start", "start"], "the Leader's start without a task id was refused by the flow, once"


def test_a_command_sent_while_the_runner_is_down_waits_in_the_queue_and_runs_once_it_is_back(partner, commands):
    async def scenario():
        async with Leader() as leader:
            await joined(leader, partner)
            running = await Running().consuming()
            await running.end()  # the runner is down (a crash, a deploy)
            await leader.command("start", "task-while-down", mentions=[ME])
            running = await Running().consuming()
            try:
                return await leader.updates_until("task-while-down", {"completed", "awaiting-completion"})
            finally:
                await running.end()

    updates = async_to_sync(scenario)()

    assert states(updates)[0] == "accepted"
    assert Task.objects.get().client_task_id == "task-while-down"


def test_a_connection_the_broker_closes_is_opened_again_and_no_command_is_lost(partner, commands):
    async def body(leader: Leader, running: Running):
        name = f"agentserver {ME} in {leader.group_id}"
        before = await asyncio.to_thread(broker_connections, name)
        assert await asyncio.to_thread(close_broker_connections, name) == 1
        await leader.command("start", "task-after-the-drop", mentions=[ME])
        updates = await leader.updates_until("task-after-the-drop", {"completed", "awaiting-completion"})
        after = await asyncio.to_thread(broker_connections, name)
        return before, after, updates

    before, after, updates = in_group(partner, body)

    assert len(after) == 1 and after != before, "the member reconnected"
    assert states(updates)[0] == "accepted"


def test_a_command_whose_handling_fails_for_the_moment_comes_again_and_is_applied(partner, commands, monkeypatch):
    real = core.command
    failures = [OperationalError("the store went away")]

    async def flaky(call, message):
        if failures:
            commands.append(message["command"])
            raise failures.pop()
        return await real(call, message)

    monkeypatch.setattr(core, "command", flaky)

    async def body(leader: Leader, running: Running):
        await leader.command("start", "task-flaky", mentions=[ME])
        return await leader.updates_until("task-flaky", {"completed", "awaiting-completion"})

    updates = in_group(partner, body)

    assert commands == ["start", "start"], "redelivered after the failure"
    assert states(updates)[0] == "accepted"
    assert Task.objects.count() == 1


def test_the_runner_command_consumes_memberships_and_stops_on_sigterm(partner, live_env):
    async def scenario():
        async with Leader() as leader:
            await joined(leader, partner)
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "aip_groups"],
                cwd=ROOT,
                env=live_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            try:
                answer = None
                # It starts (a Django process: it may take up to STARTUP_TIMEOUT on a busy
                # machine), picks the membership up and answers a query: asked until it does.
                loop = asyncio.get_running_loop()
                deadline = loop.time() + STARTUP_TIMEOUT
                while answer is None and loop.time() < deadline:
                    await leader.manage("get-status", mentions=[ME])
                    try:
                        answer = await leader.next(timeout=0.3)
                    except TimeoutError:
                        continue
                proc.send_signal(signal.SIGTERM)
                code = await asyncio.to_thread(proc.wait, 10)
                return answer, code, proc.stdout.read().decode()
            finally:
                if proc.poll() is None:
                    proc.kill()

    answer, code, output = async_to_sync(scenario)()

    assert answer is not None, output
    assert answer["groupMemberStatus"] == {"connected": True, "muted": False}
    assert code == 0, output
    assert "Traceback" not in output, output


@pytest.fixture
def live_env() -> dict[str, str]:
    """The environment of a process of ours on the test database (as the live stack's)."""
    from django.db import connection

    db = connection.settings_dict
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentserver.settings",
        "DATABASE_URL": (
            f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        ),
        "DB_POOL": "0",
        "AIP_GROUPS_POLL": "0.1",
        "OUTBOUND_ALLOW_NETS": "127.0.0.1/32",
        "PYTHONUNBUFFERED": "1",
    }
