"""Which dialect answers a request, every combination (docs/dialects.md, "Recognising a
request"): a task created in each dialect (1.0 SendMessage, 0.3 message/send, 0.1 tasks/send),
then read, canceled and resubscribed through each dialect and each way of naming one (the
A2A-Version header, the query parameter, or nothing, when the named task's dialect decides).
The answer's shape tells the dialect; the id, the state and the parts are the same task's."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from asgiref.sync import async_to_sync

from tasks_app.executors.echo import EchoExecutor

from .conftest import make_agent

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/agents/acme/mixed/"


def behaviour(ctx) -> None:
    if ctx.text == "ask":
        ctx.require_input("more please")
    else:
        ctx.complete(artifact=f"echo: {ctx.text}", name="echo")


@pytest.fixture
def agent(tenant, monkeypatch):
    monkeypatch.setattr(EchoExecutor, "execute", lambda self, ctx: behaviour(ctx))
    return make_agent(tenant, "mixed", "echo")


def call(client, key: str, method: str, params: dict[str, Any], *, version: str | None, query: bool = False):
    """A JSON-RPC request naming its version by header, by query parameter, or not at all."""
    headers = {"X-API-Key": key}
    path = PATH
    if version is not None and query:
        path = f"{PATH}?A2A-Version={version}"
    elif version is not None:
        headers["A2A-Version"] = version
    body = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
    response = client.post(path, data=body, content_type="application/json", headers=headers)
    if response.streaming:

        async def drained() -> bytes:
            return b"".join([chunk async for chunk in response.streaming_content])

        frames = [f for f in async_to_sync(drained)().split(b"\n\n") if b"data:" in f]
        return [orjson.loads(f.split(b"data:", 1)[1].split(b"\n", 1)[0]) for f in frames]
    return orjson.loads(response.content)


# --- creating a task in each dialect --------------------------------------------------------


def create(client, key: str, dialect: str, text: str) -> str:
    """A new task in `dialect`; its id as its creator knows it."""
    if dialect == "1.0":
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
        return call(client, key, "SendMessage", {"message": message}, version="1.0")["result"]["task"]["id"]
    if dialect == "0.3":
        message = {
            "kind": "message",
            "messageId": str(uuid.uuid4()),
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
        }
        return call(client, key, "message/send", {"message": message}, version=None)["result"]["id"]
    client_id = f"client-{uuid.uuid4().hex}"
    message = {"role": "user", "parts": [{"type": "text", "text": text}]}
    answer = call(client, key, "tasks/send", {"id": client_id, "message": message}, version=None)
    assert answer["result"]["id"] == client_id  # the task keeps the client's id
    return client_id


# --- what an answer's shape says --------------------------------------------------------------


def dialect_of_task(task: dict[str, Any]) -> str:
    if task.get("kind") == "task":
        return "0.3"
    if "sessionId" in task:
        return "0.1"
    assert task["status"]["state"].startswith("TASK_STATE_"), task
    return "1.0"


STATES = {
    "1.0": {"completed": "TASK_STATE_COMPLETED", "canceled": "TASK_STATE_CANCELED"},
    "0.3": {"completed": "completed", "canceled": "canceled"},
    "0.1": {"completed": "completed", "canceled": "canceled"},
}
TEXT_PART = {
    "1.0": lambda text: {"text": text},
    "0.3": lambda text: {"kind": "text", "text": text},
    "0.1": lambda text: {"type": "text", "text": text},
}


def dialect_of_error(error: dict[str, Any]) -> str:
    """1.0 puts google.rpc.ErrorInfo details (a list) in `data`; 0.3 an object; 0.1's
    message starts with its document's words for the code."""
    if isinstance(error.get("data"), list):
        return "1.0"
    if error["message"].startswith(("任务", "不支持", "无效")):
        return "0.1"
    return "0.3"


# How a reader names its dialect: (the method's dialect, the version it sends, by query).
READERS = {
    "1.0 header": ("1.0", "1.0", False),
    "0.3 header": ("0.3", "0.3", False),
    "0.1 header": ("0.1", "0.1", False),
    "0.1 query (the 0.1 card's url)": ("0.1", "0.1", True),
    "no header, 0.3 method": ("0.3", None, False),
    "no header, 0.1 method": ("0.1", None, False),
}
GET = {"1.0": "GetTask", "0.3": "tasks/get", "0.1": "tasks/get"}
CANCEL = {"1.0": "CancelTask", "0.3": "tasks/cancel", "0.1": "tasks/cancel"}
RESUBSCRIBE = {"1.0": "SubscribeToTask", "0.3": "tasks/resubscribe", "0.1": "tasks/resubscribe"}


def expected(reader: str, creator: str) -> str:
    """The dialect that answers: the one named, else (no header, a method 0.1 and 0.3 share)
    the named task's own if it is 0.1's, else 0.3."""
    method_dialect, version, _ = READERS[reader]
    if version is not None:
        return method_dialect
    return "0.1" if creator == "0.1" else "0.3"


@pytest.mark.parametrize("creator", ["1.0", "0.3", "0.1"])
@pytest.mark.parametrize("reader", list(READERS))
def test_a_task_is_read_in_the_dialect_the_request_names_or_else_in_its_own(client, agent, alice_key, creator, reader):
    task_id = create(client, alice_key, creator, "hello")
    method_dialect, version, query = READERS[reader]
    answer = call(
        client, alice_key, GET[method_dialect], {"id": task_id, "historyLength": 5}, version=version, query=query
    )
    task = answer["result"]
    speaks = expected(reader, creator)
    assert dialect_of_task(task) == speaks
    assert task["id"] == task_id  # the id its creator knows, in every dialect
    assert task["status"]["state"] == STATES[speaks]["completed"]
    assert task["artifacts"][0]["parts"] == [TEXT_PART[speaks]("echo: hello")]
    assert task["history"][0]["parts"] == [TEXT_PART[speaks]("hello")]


@pytest.mark.parametrize("creator", ["1.0", "0.3", "0.1"])
@pytest.mark.parametrize("reader", list(READERS))
def test_a_task_is_canceled_in_the_dialect_the_request_names_or_else_in_its_own(
    client, agent, alice_key, creator, reader
):
    task_id = create(client, alice_key, creator, "ask")
    method_dialect, version, query = READERS[reader]
    task = call(client, alice_key, CANCEL[method_dialect], {"id": task_id}, version=version, query=query)["result"]
    speaks = expected(reader, creator)
    assert dialect_of_task(task) == speaks
    assert (task["id"], task["status"]["state"]) == (task_id, STATES[speaks]["canceled"])


@pytest.mark.parametrize("creator", ["1.0", "0.3", "0.1"])
@pytest.mark.parametrize("reader", list(READERS))
def test_resubscribing_to_a_finished_task_is_refused_in_the_dialect_that_answers(
    client, agent, alice_key, creator, reader
):
    task_id = create(client, alice_key, creator, "hello")
    method_dialect, version, query = READERS[reader]
    answer = call(client, alice_key, RESUBSCRIBE[method_dialect], {"id": task_id}, version=version, query=query)
    if isinstance(answer, list):  # 0.3 refuses in a stream of its one error (docs/dialects.md)
        (answer,) = answer
    error = answer["error"]
    assert error["code"] == -32004  # a finished task has nothing to follow
    assert dialect_of_error(error) == expected(reader, creator)


@pytest.mark.parametrize("reader", list(READERS))
def test_an_unknown_task_is_not_found_in_the_dialect_named_or_else_0_3(client, agent, alice_key, reader):
    method_dialect, version, query = READERS[reader]
    error = call(client, alice_key, GET[method_dialect], {"id": "no-such-task"}, version=version, query=query)["error"]
    assert error["code"] == -32001
    assert dialect_of_error(error) == (method_dialect if version is not None else "0.3")


def test_another_caller_s_0_1_task_is_answered_as_no_task_at_all(client, agent, alice_key, bob_key):
    task_id = create(client, alice_key, "0.1", "hello")
    error = call(client, bob_key, "tasks/get", {"id": task_id}, version=None)["error"]
    # As for an id no one has: 0.3's not-found, which says nothing of whose the id is.
    assert (error["code"], dialect_of_error(error)) == (-32001, "0.3")


@pytest.mark.parametrize(
    ("method", "version"),
    [("tasks/get", "1.0"), ("message/send", "1.0"), ("tasks/send", "0.3"), ("message/send", "0.1"), ("GetTask", "0.3")],
)
def test_a_method_of_another_version_than_the_one_named_is_not_found(client, agent, alice_key, method, version):
    assert call(client, alice_key, method, {"id": "x"}, version=version)["error"]["code"] == -32601


def test_a_1_0_method_without_a_header_is_told_which_header_to_send(client, agent, alice_key):
    error = call(client, alice_key, "GetTask", {"id": "x"}, version=None)["error"]
    assert error["code"] == -32009 and "A2A-Version: 1.0" in error["message"]
