"""A2A 0.1, the first public draft (the project's documents 000 and 003, in Chinese): every
method, the documents' example requests replayed with their answers checked field by field,
client-chosen task ids, the re-open rule, push in 0.1's form, the card at agent.json, errors,
reads across dialects, and how a request is recognised as 0.1's.

The documents' examples are copied here (the project never reads them at run time). Where a
replay departs from the document it says why: ids are ours (a fresh one per test), example
placeholders such as "<base64编码内容>" become real base64, and the examples that lack the
JSON-RPC envelope ("jsonrpc", "id") get it.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import orjson
import pytest
from asgiref.sync import async_to_sync

from protocols import dialects
from protocols.dialects import WireDialect
from tasks_app import services
from tasks_app.executors.echo import EchoExecutor
from tasks_app.lifecycle import Dialect
from tasks_app.models import Task
from tests.conftest import RpcResponse, drain_push_jobs, make_agent, user_message

pytestmark = pytest.mark.django_db(transaction=True)

SEED = "/agents/acme/seed/"
ECHO = "/agents/acme/echo/"
V01 = {"A2A-Version": "0.1"}
SESSION = "c295ea44-7543-4f78-b524-7a38915ad6e4"  # the documents' sessionId
B64 = base64.b64encode(b"\x89PNG fake image").decode()


class V01Client:
    """JSON-RPC to an agent with no A2A-Version unless given (0.1 clients send none)."""

    def __init__(self, client) -> None:
        self.client = client

    def _post(self, path: str, body: dict[str, Any], key: str | None, headers: dict[str, str] | None):
        hdrs = {**(headers or {})}
        if key:
            hdrs["X-API-Key"] = key
        return self.client.post(path, data=orjson.dumps(body), content_type="application/json", headers=hdrs)

    def body(self, path: str, body: dict[str, Any], *, key: str | None = None, headers=None) -> RpcResponse:
        response = self._post(path, body, key, headers)
        assert not response.streaming, "expected a plain answer"
        return RpcResponse(response.status_code, response.headers, orjson.loads(response.content))

    def __call__(
        self, method: str, params: dict[str, Any], *, path: str = SEED, key: str | None = None, headers=None
    ) -> RpcResponse:
        return self.body(
            path, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, key=key, headers=headers
        )

    def stream(
        self, method: str, params: dict[str, Any], *, path: str = SEED, key: str | None = None, headers=None
    ) -> list[tuple[int | None, dict[str, Any]]]:
        """(event id, the JSON-RPC response) of each event of a streamed answer."""
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = self._post(path, body, key, headers)
        assert response.streaming, orjson.loads(response.content)
        assert response["Content-Type"].startswith("text/event-stream")

        async def drained() -> bytes:
            return b"".join([chunk async for chunk in response.streaming_content])

        found = []
        for frame in async_to_sync(drained)().split(b"\n\n"):
            fields = dict(
                line.partition(b":")[::2] for line in frame.split(b"\n") if line and not line.startswith(b":")
            )
            if b"data" in fields:
                found.append((int(fields[b"id"]) if b"id" in fields else None, orjson.loads(fields[b"data"])))
        return found


@pytest.fixture
def v01(client) -> V01Client:
    return V01Client(client)


def seed_behaviour(ctx) -> None:
    """The remote agent of the documents' examples, answering as they show."""
    text = ctx.text
    if text == "讲个笑话":
        ctx.complete(artifact="鸡为什么过马路？为了到对面去！", name="笑话")
    elif text == "帮我申请新手机":
        ctx.require_input("选择手机类型(iPhone/Android)")
    elif text == "Android":
        ctx.complete(artifact="已为您订购Android设备，申请编号R12443", name="订单确认")
    elif text.startswith("根据附图撰写长篇文章"):
        ctx.working()
        artifact_id = ctx.artifact("<章节1...>")
        ctx.artifact("<章节2...>", artifact_id=artifact_id, append=True)
        ctx.artifact("<章节3...>", artifact_id=artifact_id, append=True, last_chunk=True)
        ctx.complete()
    elif text.startswith("分析附件报告"):
        ctx.complete(artifact="<生成的概要内容>")
    elif text.startswith("显示我的未解决IT工单列表"):
        ctx.complete(
            '[{"ticketNumber":"REQ12312","description":"VPN访问请求"},'
            '{"ticketNumber":"REQ23422","description":"添加至DL - team-gcp-onboarding"}]'
        )
    elif text == "two artifacts":
        ctx.artifact("first", name="one")
        ctx.complete(artifact="second", name="two")
    elif text == "reject":
        ctx.reject("not for me")
    elif text == "fail":
        ctx.fail("broken")
    elif text == "auth":
        ctx.require_auth("sign in first")
    elif text == "ask":
        ctx.require_input("more please")
    else:
        ctx.complete(artifact=f"echo: {text}", name="echo")


@pytest.fixture
def seed_agent(tenant, monkeypatch):
    """An agent playing the documents' remote agent (the echo executor, its run replaced)."""
    monkeypatch.setattr(EchoExecutor, "execute", lambda self, ctx: seed_behaviour(ctx))
    return make_agent(tenant, "seed", "echo", input_modes=["*/*"], output_modes=["*/*"])


def new_id() -> str:
    return str(uuid.uuid4())


def send(v01, text: str, task_id: str | None = None, *, key: str, **params: Any) -> dict[str, Any]:
    message = {"role": "user", "parts": [{"type": "text", "text": text}]}
    return v01("tasks/send", {"id": task_id or new_id(), "message": message, **params}, key=key).result


# --- the documents' examples -------------------------------------------------------------


def test_seed_000_send_task_answers_the_completed_task_under_the_client_s_id(v01, seed_agent, alice_key):
    task_id = new_id()
    # 000 "发送任务", the request as written (our id):
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tasks/send",
        "params": {
            "id": task_id,
            "message": {"role": "user", "parts": [{"type": "text", "text": "讲个笑话"}]},
            "metadata": {},
        },
    }
    answer = v01.body(SEED, request, key=alice_key).body
    assert answer["jsonrpc"] == "2.0" and answer["id"] == 1
    result = answer["result"]
    # The document's answer, field by field (a server-made sessionId; a timestamp, optional there).
    assert result["id"] == task_id
    assert isinstance(result["sessionId"], str) and uuid.UUID(result["sessionId"])
    assert result["status"]["state"] == "completed"
    assert result["artifacts"] == [
        {"name": "笑话", "parts": [{"type": "text", "text": "鸡为什么过马路？为了到对面去！"}], "index": 0}
    ]
    assert result["metadata"] == {}
    assert "history" not in result  # none unless asked for
    assert set(result) == {"id", "sessionId", "status", "artifacts", "metadata"}


def test_seed_003_send_task_with_data_instead_of_parts_is_refused_naming_the_field(v01, seed_agent, alice_key):
    # 003 §2.3.2 writes the message's parts as "data" (000 and the schema: "parts").
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tasks/send",
        "params": {
            "id": new_id(),
            "message": {"role": "user", "data": [{"type": "text", "text": "tell me a joke"}]},
            "metadata": {},
        },
    }
    error = v01.body(SEED, request, key=alice_key).error
    assert error["code"] == -32602
    assert error["message"].startswith("无效参数: params.message.parts is required")


def test_seed_get_task_with_history_length_returns_the_history(v01, seed_agent, alice_key):
    task_id = new_id()
    send(v01, "讲个笑话", task_id, key=alice_key, metadata={})
    # 000 "获取任务" and 003 §2.3.5: the same request.
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tasks/get",
        "params": {"id": task_id, "historyLength": 10, "metadata": {}},
    }
    result = v01.body(SEED, request, key=alice_key).result
    assert result["id"] == task_id
    assert result["status"]["state"] == "completed"
    assert result["artifacts"][0]["parts"] == [{"type": "text", "text": "鸡为什么过马路？为了到对面去！"}]
    assert result["history"] == [{"role": "user", "parts": [{"type": "text", "text": "讲个笑话"}]}]
    assert result["metadata"] == {}
    # "默认为0（无历史记录）": without historyLength, no history.
    assert "history" not in v01("tasks/get", {"id": task_id}, key=alice_key).result


def test_seed_multi_turn_input_required_then_the_same_id_and_session_complete(v01, seed_agent, alice_key):
    task_id = new_id()
    # 000 "多轮对话", sequence 1 and 2:
    first = send(v01, "帮我申请新手机", task_id, key=alice_key, metadata={})
    assert first["id"] == task_id
    assert first["status"]["state"] == "input-required"
    assert first["status"]["message"]["parts"] == [{"type": "text", "text": "选择手机类型(iPhone/Android)"}]
    assert first["status"]["message"]["role"] == "agent"
    assert first["metadata"] == {}
    session = first["sessionId"]
    # Sequence 3 and 4: the same id, the session the answer named.
    second = send(v01, "Android", task_id, key=alice_key, sessionId=session, metadata={})
    assert second["id"] == task_id and second["sessionId"] == session
    assert second["status"]["state"] == "completed"
    assert second["artifacts"][0]["name"] == "订单确认"
    assert second["artifacts"][0]["parts"] == [{"type": "text", "text": "已为您订购Android设备，申请编号R12443"}]
    assert Task.objects.filter(client_task_id=task_id).count() == 1
    # A session that is not the task's is refused, naming it.
    error = v01(
        "tasks/send",
        {"id": task_id, "sessionId": "other", "message": {"role": "user", "parts": [{"type": "text", "text": "x"}]}},
        key=alice_key,
    ).error
    assert error["code"] == -32602 and "contextId 'other' does not match" in error["message"]


def test_seed_cancel_task_answers_the_canceled_task(v01, seed_agent, alice_key):
    task_id = new_id()
    send(v01, "帮我申请新手机", task_id, key=alice_key)
    # 000 "取消任务":
    request = {"jsonrpc": "2.0", "id": 1, "method": "tasks/cancel", "params": {"id": task_id, "metadata": {}}}
    result = v01.body(SEED, request, key=alice_key).result
    # The document writes "id": 1 here (the request's id, a slip); the task's id is what is meant.
    assert result["id"] == task_id
    assert result["status"]["state"] == "canceled"
    assert result["metadata"] == {}
    assert isinstance(result["sessionId"], str)
    again = v01.body(SEED, request, key=alice_key).error
    assert again["code"] == -32002 and again["message"].startswith("任务不可取消: ")
    assert task_id in again["message"]


def test_seed_push_notification_set_and_get(v01, seed_agent, alice_key):
    task_id = new_id()
    send(v01, "帮我申请新手机", task_id, key=alice_key)
    config = {"url": "https://example.com/callback", "authentication": {"schemes": ["jwt"]}}
    # 000 "设置任务推送通知" and 003 §2.3.3:
    set_request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tasks/pushNotification/set",
        "params": {"id": task_id, "pushNotificationConfig": config},
    }
    assert v01.body(SEED, set_request, key=alice_key).result == {"id": task_id, "pushNotificationConfig": config}
    # 000 "获取任务推送通知":
    get_request = {"jsonrpc": "2.0", "id": 1, "method": "tasks/pushNotification/get", "params": {"id": task_id}}
    assert v01.body(SEED, get_request, key=alice_key).result == {"id": task_id, "pushNotificationConfig": config}
    # Set again: 0.1 has one config per task, replaced.
    moved = {"url": "https://example.com/other", "token": "t-1"}
    v01("tasks/pushNotification/set", {"id": task_id, "pushNotificationConfig": moved}, key=alice_key)
    got = v01("tasks/pushNotification/get", {"id": task_id}, key=alice_key).result
    assert got == {"id": task_id, "pushNotificationConfig": moved}


def test_seed_streaming_send_subscribe_events_as_the_document_shows(v01, seed_agent, alice_key):
    task_id = new_id()
    # 000 "流式支持": the request (with the envelope the example leaves out, and real base64
    # for the placeholder; the document names the file's content "data").
    params = {
        "id": task_id,
        "sessionId": SESSION,
        "message": {
            "role": "user",
            "parts": [
                {"type": "text", "text": "根据附图撰写长篇文章"},
                {"type": "file", "file": {"mimeType": "image/png", "data": B64}},
            ],
        },
        "metadata": {},
    }
    events = v01.stream("tasks/sendSubscribe", params, key=alice_key)
    results = [e["result"] for _, e in events]
    assert all(e["jsonrpc"] == "2.0" and e["id"] == 1 for _, e in events)
    # The stream opens with the task's status as stored (submitted), then the document's events.
    assert results[0] == {"id": task_id, "status": results[0]["status"], "final": False}
    assert results[0]["status"]["state"] == "submitted"
    working, *chunks, done = results[1:]
    assert working["id"] == task_id and working["status"]["state"] == "working" and working["final"] is False
    assert "timestamp" in working["status"]
    assert [c["artifact"] for c in chunks] == [
        {"parts": [{"type": "text", "text": "<章节1...>"}], "index": 0, "append": False, "lastChunk": False},
        {"parts": [{"type": "text", "text": "<章节2...>"}], "index": 0, "append": True, "lastChunk": False},
        {"parts": [{"type": "text", "text": "<章节3...>"}], "index": 0, "append": True, "lastChunk": True},
    ]
    assert all(set(c) == {"id", "artifact"} and c["id"] == task_id for c in chunks)
    assert done["status"]["state"] == "completed" and done["final"] is True
    # Every event id is the log's seq: a resubscription resumes from one.
    assert [i for i, _ in events] == list(range(1, len(events) + 1))
    # The file arrived whole, with its type.
    history = v01("tasks/get", {"id": task_id, "historyLength": 1}, key=alice_key).result["history"]
    assert history[0]["parts"][1] == {"type": "file", "file": {"bytes": B64, "mimeType": "image/png"}}
    assert v01("tasks/get", {"id": task_id}, key=alice_key).result["sessionId"] == SESSION


def test_seed_resubscribe_replays_after_last_event_id_and_ends_with_final(v01, seed_agent, alice_key):
    task_id = new_id()
    params = {
        "id": task_id,
        "message": {"role": "user", "parts": [{"type": "text", "text": "根据附图撰写长篇文章"}]},
    }
    sent = v01.stream("tasks/sendSubscribe", params, key=alice_key)
    first_chunk = next(i for i, e in sent if "artifact" in e["result"])
    # 000 "重新订阅任务" (with the envelope; the client resumes after the first chunk it had):
    events = v01.stream(
        "tasks/resubscribe", {"id": task_id, "metadata": {}}, key=alice_key, headers={"Last-Event-ID": str(first_chunk)}
    )
    results = [e["result"] for _, e in events]
    assert [r["artifact"]["parts"][0]["text"] for r in results[:2]] == ["<章节2...>", "<章节3...>"]
    assert [(r["artifact"]["append"], r["artifact"]["lastChunk"]) for r in results[:2]] == [(True, False), (True, True)]
    assert results[-1]["id"] == task_id
    assert results[-1]["status"]["state"] == "completed" and results[-1]["final"] is True
    # Without a Last-Event-ID, a finished task has nothing to follow.
    error = v01("tasks/resubscribe", {"id": task_id}, key=alice_key).error
    assert error["code"] == -32004 and error["message"].startswith("不支持的操作: ")


def test_resubscribing_to_a_task_that_waits_for_input_sends_its_status_as_final_and_ends(v01, seed_agent, alice_key):
    task_id = new_id()
    assert send(v01, "ask", task_id, key=alice_key)["status"]["state"] == "input-required"
    # The stream ends where a 0.1 stream ends (the exchange waits on the client): the one
    # event saying so is final, and nothing follows it.
    ((_, only),) = v01.stream("tasks/resubscribe", {"id": task_id}, key=alice_key)
    assert only["result"]["status"]["state"] == "input-required" and only["result"]["final"] is True


def test_seed_non_text_media_and_structured_output(v01, seed_agent, alice_key):
    task_id = new_id()
    # 000 "非文本媒体", sequence 1 (real base64 for the placeholder), then sequence 3's get.
    pdf = base64.b64encode(b"%PDF-1.4 report").decode()
    parts = [
        {"type": "text", "text": "分析附件报告并生成概要"},
        {"type": "file", "file": {"mimeType": "application/pdf", "data": pdf}},
    ]
    params = {"id": task_id, "sessionId": SESSION, "message": {"role": "user", "parts": parts}, "metadata": {}}
    sent = v01("tasks/send", params, key=alice_key).result
    # The document's agent answers "working" and finishes later; a 0.1 send waits until the
    # task settles (0.1 has no way to ask otherwise), so the answer is the finished task.
    assert sent["id"] == task_id and sent["sessionId"] == SESSION
    got = v01("tasks/get", {"id": task_id, "metadata": {}}, key=alice_key).result
    assert got["status"]["state"] == "completed"
    assert got["artifacts"] == [{"parts": [{"type": "text", "text": "<生成的概要内容>"}], "index": 0}]
    assert got["metadata"] == {}
    # 000 "结构化输出": a part's metadata (the schema the client wants) reaches the agent whole.
    schema = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"ticketNumber": {"type": "string"}, "description": {"type": "string"}},
        },
    }
    structured = {
        "id": new_id(),
        "sessionId": SESSION,
        "message": {
            "role": "user",
            "parts": [
                {
                    "type": "text",
                    "text": "显示我的未解决IT工单列表",
                    "metadata": {"mimeType": "application/json", "schema": schema},
                }
            ],
        },
        "metadata": {},
    }
    result = v01("tasks/send", structured, key=alice_key).result
    assert result["status"]["message"]["role"] == "agent"
    assert '"ticketNumber":"REQ12312"' in result["status"]["message"]["parts"][0]["text"]
    history = v01("tasks/get", {"id": structured["id"], "historyLength": 5}, key=alice_key).result["history"]
    assert history[0]["parts"][0]["metadata"] == {"mimeType": "application/json", "schema": schema}


# --- the card -------------------------------------------------------------------------------


def test_the_card_at_agent_json_is_0_1_s(client, seed_agent, tenant):
    seed_agent.documentation_url = "https://docs.example.com/seed"
    seed_agent.save()
    response = client.get("/agents/acme/seed/.well-known/agent.json")
    assert response.status_code == 200 and response["ETag"]
    card = response.json()
    assert card["name"] == "Seed"
    assert card["description"].startswith("The seed agent") and "Each caller sees only" in card["description"]
    assert card["url"] == "http://testserver/agents/acme/seed/?A2A-Version=0.1"
    assert card["provider"] == {"organization": "Acme", "url": "http://testserver"}
    assert isinstance(card["version"], str)
    assert card["documentationUrl"] == "https://docs.example.com/seed"
    assert card["capabilities"] == {"streaming": True, "pushNotifications": True, "stateTransitionHistory": False}
    assert card["authentication"] == {"schemes": ["ApiKey"]}
    assert card["defaultInputModes"] == ["*/*"] and card["defaultOutputModes"] == ["*/*"]
    assert card["skills"] == [{"id": "seed", "name": "seed", "description": "seed skill", "tags": ["test"]}]
    assert "supportedInterfaces" not in card and "securitySchemes" not in card
    public = make_agent(tenant, "open", "echo", is_public=True)
    assert client.get(f"{public.path}.well-known/agent.json").json()["authentication"] == {"schemes": []}
    assert client.get("/agents/acme/nobody/.well-known/agent.json").status_code == 404
    # The 1.0 card stays where it was.
    assert "supportedInterfaces" in client.get("/agents/acme/seed/.well-known/agent-card.json").json()


def test_a_client_that_follows_the_card_s_url_is_answered_in_0_1_whatever_it_calls(
    client, v01, seed_agent, echo_agent, alice_key, rpc
):
    url = client.get("/agents/acme/seed/.well-known/agent.json").json()["url"].removeprefix("http://testserver")
    task = rpc.send(SEED, "from 1.0", key=alice_key).result["task"]
    got = v01("tasks/get", {"id": task["id"]}, path=url, key=alice_key).result
    assert got["id"] == task["id"] and got["status"]["state"] == "completed"
    assert got["artifacts"][0]["parts"] == [{"type": "text", "text": "echo: from 1.0"}]


# --- client-chosen ids ------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: "task-7", lambda: uuid.uuid4().hex, lambda: str(uuid.uuid4())])
def test_a_client_s_id_names_its_task_and_the_same_id_continues_it(v01, seed_agent, alice_key, make):
    task_id = make()
    first = send(v01, "ask", task_id, key=alice_key)
    stored = Task.objects.get(client_task_id=task_id)
    assert first["id"] == task_id
    assert str(stored.pk) != task_id  # a key of our own, even for an id that reads as a UUID
    assert stored.dialect == Dialect.A2A_0_1 and stored.owner == "alice"
    second = send(v01, "done now", task_id, key=alice_key)
    assert second["id"] == task_id and second["status"]["state"] == "completed"
    assert Task.objects.filter(agent=seed_agent).count() == 1
    assert len(v01("tasks/get", {"id": task_id, "historyLength": 9}, key=alice_key).result["history"]) == 3


def test_another_owner_s_same_id_is_another_task_and_never_reaches_the_first(v01, seed_agent, alice_key, bob_key):
    send(v01, "ask", "shared-name", key=alice_key)
    assert v01("tasks/get", {"id": "shared-name"}, key=bob_key).error["code"] == -32001
    assert v01("tasks/cancel", {"id": "shared-name"}, key=bob_key).error["code"] == -32001
    bobs = send(v01, "hello", "shared-name", key=bob_key)
    assert bobs["status"]["state"] == "completed"
    alices = v01("tasks/get", {"id": "shared-name"}, key=alice_key).result
    assert alices["status"]["state"] == "input-required" and alices["sessionId"] != bobs["sessionId"]
    assert sorted(Task.objects.filter(client_task_id="shared-name").values_list("owner", flat=True)) == ["alice", "bob"]


def test_an_id_equal_to_another_owner_s_task_key_makes_a_new_task(v01, rpc, seed_agent, alice_key, bob_key):
    alices = rpc.send(SEED, "ask", key=alice_key).result["task"]
    bobs = send(v01, "hello", alices["id"], key=bob_key)
    assert bobs["id"] == alices["id"] and bobs["status"]["state"] == "completed"
    assert rpc(SEED, "GetTask", {"id": alices["id"]}, key=alice_key).result["status"]["state"] == (
        "TASK_STATE_INPUT_REQUIRED"
    )
    assert Task.objects.get(client_task_id=alices["id"]).owner == "bob"


def test_anonymous_callers_of_a_public_agent_must_choose_long_ids(v01, tenant, alice_key):
    public = make_agent(tenant, "open", "echo", is_public=True)
    message = {"role": "user", "parts": [{"type": "text", "text": "hi"}]}
    for method, params in [
        ("tasks/send", {"id": "task-1", "message": message}),
        ("tasks/get", {"id": "1"}),
        ("tasks/cancel", {"id": "1"}),
        ("tasks/pushNotification/get", {"id": "1"}),
    ]:
        error = v01(method, params, path=public.path, headers=V01).error
        assert error["code"] == -32602, (method, error)
        assert error["message"].startswith("无效参数: params.id must be at least 32 characters"), error
    assert not Task.objects.filter(agent=public).exists()
    long_id = uuid.uuid4().hex
    assert v01("tasks/send", {"id": long_id, "message": message}, path=public.path).result["id"] == long_id
    # A caller with a key has its own scope there: any id.
    assert v01("tasks/send", {"id": "1", "message": message}, path=public.path, key=alice_key).result["id"] == "1"


def test_an_id_too_long_for_the_store_is_refused_naming_the_field(v01, seed_agent, alice_key):
    error = v01("tasks/get", {"id": "x" * 1000}, key=alice_key).error
    assert error["code"] == -32602 and "params.id is longer than" in error["message"]


# --- the re-open rule --------------------------------------------------------------------


def test_sending_to_a_completed_task_re_opens_it_as_the_0_1_document_says(v01, rpc, seed_agent, alice_key):
    """000, 发送任务: "允许客户端向远程智能体发送内容以创建新任务、恢复中断任务或重新打开已完成任务"
    (send content to create a new task, resume an interrupted task or re-open a completed one);
    003 §2.3.2 says the same. Completed tasks re-open; canceled and failed ones do not."""
    task_id = new_id()
    assert send(v01, "讲个笑话", task_id, key=alice_key)["status"]["state"] == "completed"
    again = send(v01, "Android", task_id, key=alice_key, historyLength=10)
    assert again["id"] == task_id and again["status"]["state"] == "completed"
    assert [a["name"] for a in again["artifacts"]] == ["笑话", "订单确认"]
    assert [m["parts"][0]["text"] for m in again["history"]] == ["讲个笑话", "Android"]
    # The store saw submitted again, then the new run.
    states = list(Task.objects.get(client_task_id=task_id).status_changes.values_list("state", flat=True))
    assert states == ["submitted", "completed", "submitted", "completed"]
    # A 1.0 client may not: terminal tasks are closed in 1.0.
    error = rpc.send(SEED, "again", key=alice_key, taskId=task_id).error
    assert error["code"] == -32004 and "terminal state" in error["message"]


@pytest.mark.parametrize("end", ["cancel", "fail", "reject"])
def test_a_canceled_failed_or_rejected_task_is_not_re_opened(v01, seed_agent, alice_key, end):
    task_id = new_id()
    if end == "cancel":
        send(v01, "ask", task_id, key=alice_key)
        v01("tasks/cancel", {"id": task_id}, key=alice_key)
    else:
        send(v01, end, task_id, key=alice_key)
    message = {"role": "user", "parts": [{"type": "text", "text": "again"}]}
    error = v01("tasks/send", {"id": task_id, "message": message}, key=alice_key).error
    assert error["code"] == -32004
    assert error["message"].startswith(f"不支持的操作: task {task_id} is ")
    assert "accepts no more messages" in error["message"]


def test_a_bare_reply_of_the_agent_is_a_completed_task_that_re_opens(v01, conformance_agent, alice_key, monkeypatch):
    from tasks_app.executors.conformance import ConformanceExecutor

    monkeypatch.setattr(ConformanceExecutor, "execute", lambda self, ctx: ctx.reply(f"re: {ctx.text}"))
    task_id = new_id()
    message = {"role": "user", "parts": [{"type": "text", "text": "hi"}]}
    path = conformance_agent.path
    first = v01("tasks/send", {"id": task_id, "message": message}, path=path, key=alice_key).result
    assert first["status"] == {**first["status"], "state": "completed"}
    assert first["status"]["message"] == {"role": "agent", "parts": [{"type": "text", "text": "re: hi"}]}
    second = v01("tasks/send", {"id": task_id, "message": message}, path=path, key=alice_key).result
    assert second["status"]["state"] == "completed" and second["id"] == task_id


# --- states, parts and errors ------------------------------------------------------------


@pytest.mark.parametrize(
    "text, state, real",
    [("reject", "failed", "rejected"), ("auth", "input-required", "auth-required"), ("fail", "failed", None)],
)
def test_states_0_1_lacks_are_shown_as_the_nearest_with_ours_in_metadata(v01, seed_agent, alice_key, text, state, real):
    result = send(v01, text, key=alice_key)
    assert result["status"]["state"] == state
    assert result["metadata"] == ({"agentserverState": real} if real else {})


def test_parts_of_every_type_round_trip(v01, seed_agent, alice_key):
    task_id = new_id()
    parts = [
        {"type": "text", "text": "hi", "metadata": {"lang": "en"}},
        {"type": "file", "file": {"name": "a.png", "mimeType": "image/png", "bytes": B64}},
        {"type": "file", "file": {"uri": "https://example.com/a.pdf", "mimeType": "application/pdf"}},
        {"type": "data", "data": {"k": [1, 2]}},
    ]
    v01("tasks/send", {"id": task_id, "message": {"role": "user", "parts": parts}}, key=alice_key)
    history = v01("tasks/get", {"id": task_id, "historyLength": 1}, key=alice_key).result["history"]
    assert history == [{"role": "user", "parts": parts}]


@pytest.mark.parametrize(
    "params, field",
    [
        ({}, "params.id is required"),
        ({"id": 5}, "params.id is required"),
        ({"id": "t"}, "params.message is required"),
        ({"id": "t", "message": {"role": "agent", "parts": []}}, 'params.message.role must be "user"'),
        ({"id": "t", "message": {"role": "user", "parts": []}}, "params.message.parts is required"),
        ({"id": "t", "message": {"role": "user", "parts": [{"text": "x"}]}}, "params.message.parts[0].type must be"),
        ({"id": "t", "message": {"role": "user", "parts": [{"type": "text"}]}}, "params.message.parts[0].text must"),
        (
            {"id": "t", "message": {"role": "user", "parts": [{"type": "file", "file": {}}]}},
            "params.message.parts[0].file must have exactly one of bytes",
        ),
        (
            {"id": "t", "message": {"role": "user", "parts": [{"type": "file", "file": {"bytes": "!!"}}]}},
            "params.message.parts[0].file.bytes must be base64",
        ),
        (
            {"id": "t", "message": {"role": "user", "parts": [{"type": "data", "data": [1]}]}},
            "params.message.parts[0].data must be an object",
        ),
        (
            {"id": "t", "historyLength": -1, "message": {"role": "user", "parts": [{"type": "text", "text": "x"}]}},
            "params.historyLength must be at least 0",
        ),
        (
            {"id": "t", "sessionId": 3, "message": {"role": "user", "parts": [{"type": "text", "text": "x"}]}},
            "params.sessionId must be a string",
        ),
        (
            {
                "id": "t",
                "message": {"role": "user", "parts": [{"type": "text", "text": "x"}]},
                "pushNotification": {"url": "https://example.com/h", "authentication": {"schemes": ["a", "b"]}},
            },
            "params.pushNotification.authentication.schemes must name exactly one scheme",
        ),
        (
            {"id": "t", "message": {"role": "user", "parts": [{"type": "text", "text": "x"}]}, "pushNotification": {}},
            "params.pushNotification.url is required",
        ),
    ],
)
def test_bad_params_are_the_dialect_s_invalid_params_naming_the_field(v01, seed_agent, alice_key, params, field):
    error = v01("tasks/send", params, key=alice_key).error
    assert error["code"] == -32602, error
    assert error["message"].startswith("无效参数: " + field), error
    assert not Task.objects.exists()


def test_the_dialect_s_errors_carry_the_document_s_codes_and_messages(v01, tenant, seed_agent, alice_key):
    assert v01("tasks/get", {"id": "nope"}, key=alice_key, headers=V01).error == {
        "code": -32001,
        "message": "任务未找到: task 'nope' not found",
        "data": {"reason": "TASK_NOT_FOUND", "detail": "task 'nope' not found"},
    }
    quiet = make_agent(tenant, "quiet", "echo", streaming=False, push_notifications=False)
    message = {"role": "user", "parts": [{"type": "text", "text": "x"}]}
    push = {"url": "https://example.com/h"}
    error = v01(
        "tasks/pushNotification/set", {"id": "t", "pushNotificationConfig": push}, path=quiet.path, key=alice_key
    )
    assert error.error["code"] == -32003 and error.error["message"].startswith("不支持推送通知: ")
    error = v01("tasks/sendSubscribe", {"id": "t", "message": message}, path=quiet.path, key=alice_key).error
    assert error["code"] == -32004 and error["message"].startswith("不支持的操作: streaming is not enabled")
    plain = {"role": "user", "parts": [{"type": "file", "file": {"bytes": B64, "mimeType": "image/png"}}]}
    error = v01("tasks/send", {"id": "t", "message": plain}, path=quiet.path, key=alice_key).error
    assert error["code"] == -32005 and error["message"].startswith("不兼容的内容类型: ")
    assert v01("tasks/pushNotification/get", {"id": "nope"}, key=alice_key).error["code"] == -32001
    send(v01, "ask", "has-no-push", key=alice_key)
    error = v01("tasks/pushNotification/get", {"id": "has-no-push"}, key=alice_key).error
    assert error["code"] == -32001 and "has no push notification config" in error["message"]


def test_a_required_extension_left_out_is_0_1_s_invalid_request_naming_it(v01, tenant, alice_key):
    uri = "https://example.com/ext/must/v1"
    strict = make_agent(tenant, "strict", "echo", extensions=[{"uri": uri, "required": True}])
    message = {"role": "user", "parts": [{"type": "text", "text": "hi"}]}
    error = v01("tasks/send", {"id": new_id(), "message": message}, path=strict.path, key=alice_key).error
    # 0.1 has no code for it (-32008 is A2A 1.0's): Invalid Request, the reason in data.
    assert error["code"] == -32600 and error["message"].startswith("无效请求: this agent requires the extension(s) ")
    assert error["data"]["reason"] == "EXTENSION_SUPPORT_REQUIRED"
    accepted = v01(
        "tasks/send",
        {"id": new_id(), "message": message},
        path=strict.path,
        key=alice_key,
        headers={"A2A-Extensions": uri},
    )
    assert accepted.result["status"]["state"] == "completed"


def test_two_artifacts_are_numbered_in_the_task_and_in_the_stream(v01, seed_agent, alice_key):
    task_id = new_id()
    message = {"role": "user", "parts": [{"type": "text", "text": "two artifacts"}]}
    events = v01.stream("tasks/sendSubscribe", {"id": task_id, "message": message}, key=alice_key)
    artifacts = [e["result"]["artifact"] for _, e in events if "artifact" in e["result"]]
    assert [(a["name"], a["index"]) for a in artifacts] == [("one", 0), ("two", 1)]
    got = v01("tasks/get", {"id": task_id}, key=alice_key).result
    assert [(a["name"], a["index"]) for a in got["artifacts"]] == [("one", 0), ("two", 1)]


# --- push in 0.1's form -------------------------------------------------------------------


def test_push_notifications_of_a_0_1_task_are_delivered_in_0_1_s_form(v01, seed_agent, alice_key, receiver, push_jobs):
    task_id = new_id()
    message = {"role": "user", "parts": [{"type": "text", "text": "根据附图撰写长篇文章"}]}
    push = {"url": receiver.url(), "token": "tok-1", "authentication": {"schemes": ["Bearer"], "credentials": "s3"}}
    v01("tasks/send", {"id": task_id, "message": message, "pushNotification": push}, key=alice_key)
    drain_push_jobs(push_jobs)
    bodies = [r.json for r in receiver.requests]
    assert [b["id"] for b in bodies] == [task_id] * len(bodies)
    assert bodies[0] == {"id": task_id, "status": bodies[0]["status"], "final": False}
    assert [b["status"]["state"] for b in bodies if "status" in b] == ["submitted", "working", "completed"]
    assert bodies[-1]["final"] is True
    assert [(b["artifact"]["index"], b["artifact"]["append"]) for b in bodies if "artifact" in b] == [
        (0, False),
        (0, True),
        (0, True),
    ]
    assert receiver.requests[0].headers["authorization"] == "Bearer s3"
    # Set on a task already there, the config hears what happens from then on.
    later = new_id()
    send(v01, "ask", later, key=alice_key)
    v01("tasks/pushNotification/set", {"id": later, "pushNotificationConfig": {"url": receiver.url()}}, key=alice_key)
    send(v01, "fine", later, key=alice_key)
    drain_push_jobs(push_jobs)
    tail = [r.json for r in receiver.requests[len(bodies) :]]
    assert [b["status"]["state"] for b in tail if "status" in b] == ["submitted", "completed"]
    assert {b["id"] for b in tail} == {later}


# --- across dialects ----------------------------------------------------------------------


def test_a_0_1_task_read_cancelled_and_configured_through_1_0_by_its_client_id(v01, rpc, seed_agent, alice_key):
    task_id = new_id()
    sent = send(v01, "讲个笑话", task_id, key=alice_key, sessionId=SESSION)
    read = rpc(SEED, "GetTask", {"id": task_id}, key=alice_key).result
    assert read["id"] == task_id and read["contextId"] == SESSION == sent["sessionId"]
    assert read["status"]["state"] == "TASK_STATE_COMPLETED"
    assert read["artifacts"][0]["parts"] == [{"text": "鸡为什么过马路？为了到对面去！"}]
    assert read["artifacts"][0]["name"] == "笑话"
    assert {m["taskId"] for m in read["history"]} == {task_id}
    assert read["history"][0]["role"] == "ROLE_USER"
    waiting = new_id()
    send(v01, "ask", waiting, key=alice_key)
    canceled = rpc(SEED, "CancelTask", {"id": waiting}, key=alice_key).result
    assert canceled["id"] == waiting and canceled["status"]["state"] == "TASK_STATE_CANCELED"
    config = rpc(
        SEED, "CreateTaskPushNotificationConfig", {"taskId": task_id, "url": "https://example.com/h"}, key=alice_key
    ).result
    assert config["taskId"] == task_id
    listed = rpc(SEED, "ListTaskPushNotificationConfigs", {"taskId": task_id}, key=alice_key).result
    assert [c["taskId"] for c in listed["configs"]] == [task_id]
    # A 1.0 follow-up by the client's id (one that is no UUID) reaches the task.
    asked = new_id().replace("-", "_")
    send(v01, "ask", asked, key=alice_key)
    answer = rpc.send(SEED, "now done", key=alice_key, taskId=asked).result["task"]
    assert answer["id"] == asked and answer["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_uuid_client_id_followed_up_through_1_0_waits_on_the_right_task(v01, rpc, seed_agent, alice_key):
    asked = str(uuid.uuid4())  # reads as a UUID, but is not the task's key
    send(v01, "ask", asked, key=alice_key)
    answer = rpc.send(SEED, "now done", key=alice_key, taskId=asked).result["task"]
    assert answer["id"] == asked and answer["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_1_0_task_read_with_tasks_get_by_header_or_query(client, v01, rpc, seed_agent, alice_key):
    task = rpc.send(SEED, "from 1.0", key=alice_key, contextId="ctx-9").result["task"]
    for path, headers in [(SEED, V01), (SEED, {"A2A-Version": "0.1.0"}), (SEED + "?A2A-Version=0.1", None)]:
        got = v01("tasks/get", {"id": task["id"], "historyLength": 5}, path=path, key=alice_key, headers=headers)
        result = got.result
        assert result["id"] == task["id"] and result["sessionId"] == "ctx-9"
        assert result["status"]["state"] == "completed"
        assert result["artifacts"] == [
            {"name": "echo", "parts": [{"type": "text", "text": "echo: from 1.0"}], "index": 0}
        ]
        assert result["history"] == [{"role": "user", "parts": [{"type": "text", "text": "from 1.0"}]}]
    waiting = rpc.send(SEED, "ask", key=alice_key).result["task"]
    canceled = v01("tasks/cancel", {"id": waiting["id"]}, key=alice_key).result
    assert canceled["id"] == waiting["id"] and canceled["status"]["state"] == "canceled"


# --- which dialect a request speaks ---------------------------------------------------------


def test_a_0_1_request_is_recognised_by_its_method_or_its_header(v01, rpc, seed_agent, alice_key):
    # Every other combination, with 0.3 and 1.0 tasks too: tests/test_dialect_recognition.py.
    task_id = new_id()
    message = {"role": "user", "parts": [{"type": "text", "text": "hi"}]}
    # No header: a method of 0.1 alone is 0.1's; one 0.1 shares with 0.3, the named task's.
    assert v01("tasks/send", {"id": task_id, "message": message}, key=alice_key).result["id"] == task_id
    assert v01("tasks/get", {"id": task_id}, key=alice_key).result["sessionId"]
    # No header and a 1.0 method: told to send the header.
    error = v01("SendMessage", {"message": user_message()}, key=alice_key).error
    assert error["code"] == -32009 and "A2A-Version: 1.0" in error["message"]
    # The header decides when present.
    for version in ("0.1", "0.1.0"):
        assert (
            v01("tasks/get", {"id": task_id}, key=alice_key, headers={"A2A-Version": version}).result["id"] == task_id
        )
    assert v01("GetTask", {"id": task_id}, key=alice_key, headers=V01).error["code"] == -32601
    assert rpc(SEED, "tasks/get", {"id": task_id}, key=alice_key).error["code"] == -32601  # 1.0
    assert rpc(SEED, "GetTask", {"id": task_id}, key=alice_key).result["id"] == task_id
    # The header names 0.3: the 0.1 task in 0.3's shape.
    assert v01("tasks/get", {"id": task_id}, key=alice_key, headers={"A2A-Version": "0.3"}).result["kind"] == "task"
    assert v01("tasks/get", {"id": task_id}, key=alice_key, headers={"A2A-Version": "0.2"}).error["code"] == -32009
    # An unknown method without a header: A2A 0.3's, which has none such.
    assert v01("tasks/list", {}, key=alice_key).error["code"] == -32601


async def _stand_in_get(call, params):
    return {"dialect": "stand-in"}


@pytest.fixture
def stand_in(monkeypatch):
    """A second header-less dialect with tasks/get, in A2A 0.3's place (it claims no dialect)."""
    dialect = WireDialect(
        name=Dialect.A2A_0_3,
        label="0.3",
        versions=frozenset({"", "0.3", "0.3.0"}),
        methods={"tasks/get": _stand_in_get, "message/send": _stand_in_get},
        encode_event=lambda *event: {},
        encode_task=lambda view: {},
        card=lambda agent, *, base_url: {},
    )
    monkeypatch.setattr(dialects, "DIALECTS", [dialect if d.name == Dialect.A2A_0_3 else d for d in dialects.DIALECTS])
    return dialect


def test_the_rule_picks_among_candidates_by_the_task_s_dialect(stand_in):
    v01_dialect = dialects.named(Dialect.A2A_0_1)
    candidates = dialects.for_request("", "tasks/get")
    assert candidates == [stand_in, v01_dialect]
    assert dialects.by_task(candidates, Dialect.A2A_0_1) is v01_dialect
    for other in (Dialect.A2A_1_0, Dialect.A2A_0_3, Dialect.AIP_1_0, None):
        assert dialects.by_task(candidates, other) is stand_in
    assert dialects.for_request("", "tasks/send") == [v01_dialect]
    assert dialects.for_request("", "message/send") == [stand_in]
    assert dialects.for_request("0.1", "tasks/get") == [v01_dialect]
    assert dialects.for_request("0.3", "tasks/get") == [stand_in]
    assert dialects.for_request("", "SendMessage") == []  # 0.3 spoken: its method-not-found


def test_a_shared_method_without_a_header_follows_the_named_task_s_dialect(
    v01, rpc, seed_agent, alice_key, bob_key, stand_in, django_assert_num_queries
):
    task_id = new_id()
    send(v01, "hi", task_id, key=alice_key)
    v1_task = rpc.send(SEED, "hi", key=alice_key).result["task"]
    # A 0.1 task: 0.1; a 1.0 task, none, or another caller's 0.1 task: the other (0.3's place).
    assert v01("tasks/get", {"id": task_id}, key=alice_key).result["id"] == task_id
    assert v01("tasks/get", {"id": v1_task["id"]}, key=alice_key).result == {"dialect": "stand-in"}
    assert v01("tasks/get", {"id": "nope"}, key=alice_key).result == {"dialect": "stand-in"}
    assert v01("tasks/get", {"id": task_id}, key=bob_key).result == {"dialect": "stand-in"}
    assert v01("tasks/get", {}, key=alice_key).result == {"dialect": "stand-in"}
    # The header still decides alone; a method of one dialect needs no lookup.
    assert v01("tasks/get", {"id": v1_task["id"]}, key=alice_key, headers=V01).result["id"] == v1_task["id"]
    assert v01("message/send", {}, key=alice_key).result == {"dialect": "stand-in"}
    # Telling them apart is one query (the other two here find the agent and the key, which
    # the server caches between requests): the stand-in reads nothing; 0.1 reads the task.
    with django_assert_num_queries(3):
        assert v01("tasks/get", {"id": "nope-2"}, key=alice_key).result == {"dialect": "stand-in"}
    with django_assert_num_queries(4):
        assert v01("tasks/get", {"id": task_id}, key=alice_key).result["id"] == task_id
    with django_assert_num_queries(3):
        assert v01("tasks/get", {"id": task_id}, key=alice_key, headers=V01).result["id"] == task_id


# --- the store ---------------------------------------------------------------------------


def test_the_store_keeps_client_ids_per_agent_and_owner(seed_agent, echo_agent, tenant):
    from accounts.selectors import Principal
    from tasks_app import selectors
    from tasks_app.domain import NewMessage

    alice, bob = Principal(name="alice"), Principal(name="bob")

    def receive(agent, principal, text, client_id):
        message = NewMessage(message_id=new_id(), role="user", parts=[{"type": "text", "text": text}])
        return services.message_receive(
            agent=agent, principal=principal, message=message, dialect=Dialect.A2A_0_1, client_task_id=client_id
        )[0]

    one = receive(seed_agent, alice, "讲个笑话", "c-1")  # completes at once (Celery eager)
    two = receive(seed_agent, bob, "ask", "c-1")
    three = receive(echo_agent, alice, "ask", "c-1")
    assert len({one.pk, two.pk, three.pk}) == 3
    for agent, principal, task in [(seed_agent, alice, one), (seed_agent, bob, two), (echo_agent, alice, three)]:
        assert selectors.task_key_for_caller(agent=agent, principal=principal, task_id="c-1") == (
            task.pk,
            Dialect.A2A_0_1,
        )
        assert selectors.task_for_caller(agent=agent, principal=principal, task_id=str(task.pk)) == task
        assert selectors.task_with_view("c-1", agent=agent, principal=principal)[1].id == "c-1"
    assert selectors.task_key_for_caller(agent=seed_agent, principal=Principal(name="carol"), task_id="c-1") is None
    # Another tenant's agent with the same slug and the same client id: its own task.
    from accounts.services import tenant_ensure

    other = make_agent(tenant_ensure(slug="globex", name="Globex"), "seed", "echo")
    assert selectors.task_key_for_caller(agent=other, principal=alice, task_id="c-1") is None
    four = receive(other, alice, "ask", "c-1")
    assert four.pk != one.pk and four.tenant_id != one.tenant_id
    # The constraint holds: the same id for the same agent and owner is one task.
    with pytest.raises(services.UnsupportedOperation, match="created by another request"):
        receive(seed_agent, alice, "ask", "c-1")
    # The follow-up takes it; whether a completed task re-opens is the contract's (0.1's own
    # tasks, for 0.1's clients).
    from protocols import contract

    follow = NewMessage(message_id=new_id(), role="user", parts=[{"type": "text", "text": "x"}], task_id="c-1")
    with pytest.raises(services.UnsupportedOperation, match="task c-1 is completed; a task in a terminal state"):
        services.message_receive(
            agent=seed_agent, principal=alice, message=follow, follow_up=contract.follow_up(Dialect.A2A_1_0)
        )
    task, _ = services.message_receive(
        agent=seed_agent, principal=alice, message=follow, follow_up=contract.follow_up(Dialect.A2A_0_1)
    )
    assert task.pk == one.pk


def test_the_anonymous_rule_is_the_store_s(tenant):
    from accounts.selectors import Principal
    from tasks_app.domain import NewMessage
    from tasks_app.errors import InvalidParams

    public = make_agent(tenant, "open", "echo", is_public=True)
    message = NewMessage(message_id=new_id(), role="user", parts=[{"type": "text", "text": "x"}])
    with pytest.raises(InvalidParams, match="at least 32 characters"):
        services.message_receive(agent=public, principal=Principal.ANONYMOUS, message=message, client_task_id="short")
    sandbox = make_agent(tenant, "box", "echo", is_public=True, shared_sandbox=True)
    task, _ = services.message_receive(
        agent=sandbox, principal=Principal.ANONYMOUS.shared(), message=message, client_task_id="short"
    )
    assert task.client_task_id == "short"


def test_a_send_subscribe_that_re_opens_a_task_ends_once_its_run_settles(v01, seed_agent, alice_key):
    # The agent runs at commit here, so the run is over before the stream's snapshot is read:
    # the snapshot is the final event (found by the hostile suite: the stream used to wait on).
    task_id = new_id()
    send(v01, "讲个笑话", task_id, key=alice_key)
    message = {"role": "user", "parts": [{"type": "text", "text": "Android"}]}
    events = v01.stream("tasks/sendSubscribe", {"id": task_id, "message": message}, key=alice_key)
    results = [e["result"] for _, e in events]
    assert results[-1]["id"] == task_id
    assert results[-1]["status"]["state"] == "completed" and results[-1]["final"] is True
    assert v01("tasks/get", {"id": task_id}, key=alice_key).result["artifacts"][-1]["name"] == "订单确认"
