"""The dialect registry: a request goes to the dialect its A2A-Version and method name, and a
new dialect is one `WireDialect` calling the shared exchange. Shown with a dialect that exists
only here: it speaks `A2A-Version: test`, sends through the exchange, and reads tasks back."""

from typing import Any

import pytest

from protocols import dialects, exchange
from protocols.dialects import WireDialect
from tasks_app import dbcalls, selectors
from tasks_app.domain import NewMessage
from tasks_app.lifecycle import Dialect

pytestmark = pytest.mark.django_db(transaction=True)
ECHO = "/agents/acme/echo/"
TEST = {"A2A-Version": "test"}


async def _send(call: exchange.Call, params: dict[str, Any]) -> dict[str, Any]:
    message = NewMessage(message_id=params["id"], role="user", parts=[{"type": "text", "text": params["text"]}])
    answer = await exchange.send(
        call,
        exchange.Send(
            message=message,
            dialect=Dialect.A2A_0_1,
            accepted=[],
            history_length=None,
            return_immediately=False,
            metadata={},
            push=None,
        ),
    )
    return {"taskId": answer.task.id, "state": answer.task.state}


async def _peek(call: exchange.Call, params: dict[str, Any]) -> dict[str, Any]:
    found = await dbcalls.run(selectors.task_with_view, params["taskId"], agent=call.agent, principal=call.principal)
    return {"state": found[1].state, "dialect": found[0].dialect}


@pytest.fixture
def test_dialect(monkeypatch):
    dialect = WireDialect(
        name=Dialect.A2A_0_1,
        label="test",
        versions=frozenset({"test"}),
        methods={"send": _send, "peek": _peek},
        encode_event=lambda *event: {"event": list(event)},
        encode_task=lambda view: {"task": view.id},
        card=lambda agent, *, base_url: {},
    )
    monkeypatch.setattr(dialects, "DIALECTS", [*dialects.DIALECTS, dialect])
    return dialect


def test_a_dialect_added_to_the_registry_answers_its_own_requests_through_the_shared_exchange(
    rpc, echo_agent, alice_key, test_dialect
):
    sent = rpc(ECHO, "send", {"id": "m-1", "text": "hello"}, key=alice_key, headers=TEST).result
    assert sent["state"] == "completed"
    # The task it made is the store's like any other: the 1.0 dialect reads it, and it reads 1.0's.
    read = rpc(ECHO, "GetTask", {"id": sent["taskId"]}, key=alice_key).result
    assert read["status"]["state"] == "TASK_STATE_COMPLETED"
    assert read["artifacts"][0]["parts"] == [{"text": "echo: hello"}]
    v1_task = rpc.send(ECHO, "from 1.0", key=alice_key).result["task"]
    assert rpc(ECHO, "peek", {"taskId": v1_task["id"]}, key=alice_key, headers=TEST).result == {
        "state": "completed",
        "dialect": "a2a/1.0",
    }
    assert rpc(ECHO, "peek", {"taskId": sent["taskId"]}, key=alice_key, headers=TEST).result["dialect"] == "a2a/0.1"


def test_each_dialect_answers_only_its_own_methods(rpc, echo_agent, alice_key, test_dialect):
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key, headers=TEST).error["code"] == -32601
    assert rpc(ECHO, "peek", {"taskId": "x"}, key=alice_key).error["code"] == -32601


def test_a_version_no_dialect_speaks_is_refused_naming_those_spoken(rpc, echo_agent, alice_key, test_dialect):
    error = rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key, headers={"A2A-Version": "9.9"}).error
    assert error["code"] == -32009
    assert error["message"] == "A2A version '9.9' is not supported; this endpoint speaks 1.0, 0.3, 0.1, test"
