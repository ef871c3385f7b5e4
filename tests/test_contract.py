"""The cross-dialect contract (protocols/contract.py, docs/dialects.md "One task, four
dialects"): the table in the docs is the decision module's, cell for cell; and every cell,
driven through the endpoints (a task made by one dialect, put in a state, acted on by another),
answers as the table says, a refused call changing nothing stored."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st

from accounts.selectors import Principal
from protocols import contract
from protocols.contract import Op, Phase
from push import services as push_services
from push.domain import PushConfigInput
from push.models import PushConfig
from tasks_app import services
from tasks_app.domain import NewArtifact, NewMessage
from tasks_app.errors import TaskNotCancelable, UnsupportedOperation
from tasks_app.lifecycle import Dialect, TaskState
from tasks_app.models import Artifact, Message, StatusChange, Task, TaskEvent
from tests.conftest import make_agent

DOCS = Path(__file__).resolve().parent.parent / "docs" / "dialects.md"
CREATORS = [Dialect.A2A_1_0, Dialect.A2A_0_3, Dialect.A2A_0_1, Dialect.AIP_1_0]
SHORT = {Dialect.A2A_1_0: "1.0", Dialect.A2A_0_3: "0.3", Dialect.A2A_0_1: "0.1", Dialect.AIP_1_0: "AIP"}
BY_SHORT = {short: dialect for dialect, short in SHORT.items()}
COLUMNS = [Phase.ACTIVE, Phase.INTERRUPTED, Phase.AWAITING_COMPLETION, Phase.COMPLETED, Phase.CLOSED]
HEADER = (
    "| operation | acting dialect: its methods | task made by "
    "| active | interrupted | awaiting completion | completed | canceled, failed, rejected |"
)
# A refusal in the acting dialect's own words: its code and the name its specification gives
# the error (0.1: its document's words; AIP ignores a command that does not apply).
WORDS: dict[str, dict[type, str]] = {
    Dialect.A2A_1_0: {
        UnsupportedOperation: "-32004 `UnsupportedOperationError`",
        TaskNotCancelable: "-32002 `TaskNotCancelableError`",
    },
    Dialect.A2A_0_3: {
        UnsupportedOperation: "-32004 `UnsupportedOperationError`",
        TaskNotCancelable: "-32002 `TaskNotCancelableError`",
    },
    Dialect.A2A_0_1: {UnsupportedOperation: "-32004 `不支持的操作`", TaskNotCancelable: "-32002 `任务不可取消`"},
    Dialect.AIP_1_0: {UnsupportedOperation: "ignored", TaskNotCancelable: "ignored"},
}
# Only tasks AIP made ever await their client's confirmation (lifecycle.CLIENT_CONFIRMS).
UNREACHED = "—"


def cell(creator: str, acting: str, op: Op, phase: Phase) -> str:
    """What the table says for one cell, from the decision module (any state of the class)."""
    states = [s for s, p in contract.PHASES.items() if p is phase]
    said = {_said(contract.decide(creator=creator, acting=acting, op=op, state=s), acting) for s in states}
    assert len(said) == 1, f"{op} by {acting} on a {creator} task differs within {phase}: {said}"
    return said.pop()


def _said(refusal: contract.Refusal | None, acting: str) -> str:
    return "accepted" if refusal is None else WORDS[acting][refusal.error]


def render() -> list[str]:
    """The contract table as the docs write it: one row per operation, acting dialect and
    group of creating dialects the operation treats alike."""
    rows = [HEADER, "| " + " | ".join(["---"] * 8) + " |"]
    for op in Op:
        for acting in CREATORS:
            methods = contract.METHODS[acting].get(op)
            if methods is None:
                continue
            groups: dict[tuple[str, ...], list[str]] = {}
            for creator in CREATORS:
                reached = [p for p in COLUMNS if p is not Phase.AWAITING_COMPLETION]
                groups.setdefault(tuple(cell(creator, acting, op, p) for p in reached), []).append(creator)
            for creators in groups.values():
                made_by = "any" if len(creators) == len(CREATORS) else ", ".join(SHORT[c] for c in creators)
                cells = [
                    (cell(Dialect.AIP_1_0, acting, op, p) if Dialect.AIP_1_0 in creators else UNREACHED)
                    if p is Phase.AWAITING_COMPLETION
                    else cell(creators[0], acting, op, p)
                    for p in COLUMNS
                ]
                names = ", ".join(f"`{m.strip()}`" for m in methods.split(","))
                rows.append(f"| {op.value} | {SHORT[acting]}: {names} | {made_by} | " + " | ".join(cells) + " |")
    return rows


def documented() -> dict[tuple[Op, str, str, Phase], str]:
    """The docs' table, cell by cell: (operation, acting, creating dialect, state class) -> cell."""
    lines = DOCS.read_text().splitlines()
    start = lines.index(HEADER)
    found: dict[tuple[Op, str, str, Phase], str] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        op, acting, made_by, *cells = (c.strip() for c in line.strip("|").split("|"))
        acting_dialect = BY_SHORT[acting.split(":", 1)[0]]
        creators = CREATORS if made_by == "any" else [BY_SHORT[c.strip()] for c in made_by.split(",")]
        for creator in creators:
            for phase, said in zip(COLUMNS, cells, strict=True):
                if phase is Phase.AWAITING_COMPLETION and creator != Dialect.AIP_1_0:
                    # The column speaks of AIP's tasks, the only ones that get there.
                    assert Dialect.AIP_1_0 in creators or said == UNREACHED, line
                    said = UNREACHED
                key = (Op(op), acting_dialect, creator, phase)
                assert key not in found, f"the docs' table says {key} twice"
                found[key] = said
    return found


def test_the_docs_table_is_the_decision_module_s_cell_for_cell():
    found = documented()
    expected = {}
    for op in Op:
        for acting in CREATORS:
            if op not in contract.METHODS[acting]:
                continue
            for creator in CREATORS:
                for phase in COLUMNS:
                    if phase is Phase.AWAITING_COMPLETION and creator != Dialect.AIP_1_0:
                        expected[(op, acting, creator, phase)] = UNREACHED
                    else:
                        expected[(op, acting, creator, phase)] = cell(creator, acting, op, phase)
    wrong = {k: (found.get(k), v) for k, v in expected.items() if found.get(k) != v}
    assert not wrong and set(found) == set(expected), "\n".join(["docs/dialects.md should read:", *render()])


def test_the_0_1_re_open_is_for_0_1_s_own_tasks_and_terminal_states_are_final_for_everyone_else():
    for creator in CREATORS:
        for acting in CREATORS:
            reopens = contract.decide(creator=creator, acting=acting, op=Op.SEND, state=TaskState.COMPLETED) is None
            assert reopens == (creator == acting == Dialect.A2A_0_1)
            for state in (TaskState.CANCELED, TaskState.FAILED, TaskState.REJECTED):
                assert contract.decide(creator=creator, acting=acting, op=Op.SEND, state=state) is not None


# --- every cell through the endpoints -------------------------------------------------------

ALICE = Principal(name="alice", api_key_id=1)
PATH = "/agents/acme/meet/"
VERSION = {Dialect.A2A_1_0: "1.0", Dialect.A2A_0_3: "0.3", Dialect.A2A_0_1: "0.1"}
HOOK = "http://127.0.0.1:9/hook"
CONFIG = "cfg-1"
REACHED = {
    creator: [s for s in TaskState if s != TaskState.AWAITING_COMPLETION or creator == Dialect.AIP_1_0]
    for creator in CREATORS
}


@pytest.fixture
def agent(tenant, settings):
    # An accepted send answers once the task settles or the wait runs out; nothing runs the
    # agent here (no commit in a test transaction), so the wait is cut short.
    settings.A2A_BLOCKING_TIMEOUT = 0.01
    settings.AIP_RESPONSE_TIMEOUT = 0.01
    return make_agent(tenant, "meet", "echo", streaming=True, push_notifications=True)


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def task_in(agent, creator: str, state: str) -> Task:
    """A task `creator` made, with a message, an artifact, a push config and a state: built
    through the services as the dialect's send and the agent's run would."""
    client_id = f"client-{uuid.uuid4().hex}" if creator in (Dialect.A2A_0_1, Dialect.AIP_1_0) else None
    message = NewMessage(message_id=str(uuid.uuid4()), role="user", parts=_text("start"))
    task, _ = services.message_receive(
        agent=agent, principal=ALICE, message=message, dialect=creator, client_task_id=client_id
    )
    push_services.config_create(
        agent=agent, principal=ALICE, task_id=str(task.pk), config=PushConfigInput(url=HOOK, config_id=CONFIG)
    )
    if state != TaskState.SUBMITTED:
        services.task_transition(task_id=task.pk, state=TaskState.WORKING)
    if state == TaskState.CANCELED:
        services.task_cancel(agent=agent, principal=ALICE, task_id=str(task.pk))
    elif state not in (TaskState.SUBMITTED, TaskState.WORKING):
        product = NewArtifact(artifact_id="a-1", name="draft", parts=_text("a draft"))
        services.task_transition(task_id=task.pk, state=state, parts=_text(f"now {state}"), artifact=product)
    task.refresh_from_db()
    assert task.state == state
    return task


def stored(task: Task) -> Any:
    """Everything a refused call must leave as it was."""
    row = Task.objects.filter(pk=task.pk).values(
        "state", "status_timestamp", "status_message_id", "last_seq", "message_count", "run_token", "reply_only"
    )[0]
    return (
        row,
        list(Message.objects.filter(task=task).order_by("pk").values_list("pk", "parts")),
        list(Artifact.objects.filter(task=task).order_by("pk").values_list("pk", "artifact_id", "parts")),
        list(StatusChange.objects.filter(task=task).order_by("pk").values_list("state", "timestamp")),
        list(TaskEvent.objects.filter(task=task).order_by("seq").values_list("seq", "kind", "payload")),
        list(PushConfig.objects.filter(task=task).order_by("pk").values_list("config_id", "url", "deleted_at")),
    )


def _a2a_request(acting: str, op: Op, task_id: str, context_id: str, *, streamed: bool) -> tuple[str, dict[str, Any]]:
    v1, v03 = acting == Dialect.A2A_1_0, acting == Dialect.A2A_0_3
    if op is Op.SEND:
        if v1:
            message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "more"}]}
            return "SendStreamingMessage" if streamed else "SendMessage", {
                "message": {**message, "taskId": task_id, "contextId": context_id},
                "configuration": {"returnImmediately": True},
            }
        if v03:
            message = {"kind": "message", "messageId": str(uuid.uuid4()), "role": "user"}
            parts = [{"kind": "text", "text": "more"}]
            return "message/stream" if streamed else "message/send", {
                "message": {**message, "parts": parts, "taskId": task_id, "contextId": context_id},
                "configuration": {"blocking": False},
            }
        # The case: the client's id, and the session the task is in.
        message = {"role": "user", "parts": _text("more")}
        method = "tasks/sendSubscribe" if streamed else "tasks/send"
        return method, {"id": task_id, "sessionId": context_id, "message": message}
    plain = {
        Op.GET: ("GetTask", "tasks/get", "tasks/get", {"id": task_id}),
        Op.LIST: ("ListTasks", None, None, {}),
        Op.CANCEL: ("CancelTask", "tasks/cancel", "tasks/cancel", {"id": task_id}),
        Op.RESUBSCRIBE: ("SubscribeToTask", "tasks/resubscribe", "tasks/resubscribe", {"id": task_id}),
    }
    if op in plain:
        m1, m03, m01, params = plain[op]
        method = m1 if v1 else m03 if v03 else m01
        assert method is not None
        return method, params
    if v1:
        return {
            Op.PUSH_SET: ("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": HOOK + "/new"}),
            Op.PUSH_GET: ("GetTaskPushNotificationConfig", {"taskId": task_id, "id": CONFIG}),
            Op.PUSH_LIST: ("ListTaskPushNotificationConfigs", {"taskId": task_id}),
            Op.PUSH_DELETE: ("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": CONFIG}),
        }[op]
    if v03:
        return {
            Op.PUSH_SET: (
                "tasks/pushNotificationConfig/set",
                {"taskId": task_id, "pushNotificationConfig": {"url": HOOK + "/new"}},
            ),
            Op.PUSH_GET: ("tasks/pushNotificationConfig/get", {"id": task_id, "pushNotificationConfigId": CONFIG}),
            Op.PUSH_LIST: ("tasks/pushNotificationConfig/list", {"id": task_id}),
            Op.PUSH_DELETE: (
                "tasks/pushNotificationConfig/delete",
                {"id": task_id, "pushNotificationConfigId": CONFIG},
            ),
        }[op]
    return {
        Op.PUSH_SET: ("tasks/pushNotification/set", {"id": task_id, "pushNotificationConfig": {"url": HOOK}}),
        Op.PUSH_GET: ("tasks/pushNotification/get", {"id": task_id}),
    }[op]


def _aip_request(op: Op, task_id: str, context_id: str, *, streamed: bool) -> tuple[str, dict[str, Any]]:
    def leader(command: str, text: str | None = None, **params: Any) -> dict[str, Any]:
        return {
            "message": {
                "type": "message",
                "id": f"msg-{uuid.uuid4()}",
                "sentAt": "2025-09-01T11:58:00+08:00",
                "senderRole": "leader",
                "senderId": "leader-1",
                "command": command,
                "dataItems": [] if text is None else _text(text),
                "taskId": task_id,
                "sessionId": context_id,
                **({"commandParams": params} if params else {}),
            }
        }

    return {
        Op.SEND: ("stream" if streamed else "rpc", leader("continue", "more")),
        Op.START: ("rpc", leader("start", "again")),
        Op.COMPLETE: ("rpc", leader("complete")),
        Op.GET: ("rpc", leader("get")),
        Op.CANCEL: ("rpc", leader("cancel")),
        Op.RESUBSCRIBE: ("stream", leader("re-stream")),
        Op.PUSH_SET: ("notification/set", {"taskId": task_id, "url": HOOK + "/new", "token": "t"}),
        Op.PUSH_GET: ("notification/get", {"taskId": task_id, "notificationConfigId": CONFIG}),
        Op.PUSH_LIST: ("notification/get", {"taskId": task_id}),
        Op.PUSH_DELETE: ("notification/delete", {"taskId": task_id, "notificationConfigId": CONFIG}),
    }[op]


def act(client, key: str, acting: str, op: Op, task: Task, *, streamed: bool = False) -> dict[str, Any]:
    """Call the operation as the acting dialect's client would (a send: `streamed` or not),
    naming the task by the id it is shown by; the JSON-RPC response (a stream's first event)."""
    task_id = task.client_task_id or str(task.pk)
    headers = {"X-API-Key": key}
    if acting == Dialect.AIP_1_0:
        method, params = _aip_request(op, task_id, task.context_id, streamed=streamed)
        path = f"{PATH}aip/{method}"
    else:
        method, params = _a2a_request(acting, op, task_id, task.context_id, streamed=streamed)
        path = PATH
        headers["A2A-Version"] = VERSION[acting]
    body = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
    response = client.post(path, data=body, content_type="application/json", headers=headers)
    if not response.streaming:
        return orjson.loads(response.content)
    return async_to_sync(_first_event)(response.streaming_content)


async def _first_event(content: Any) -> dict[str, Any]:
    """A stream's first event; the stream is closed then (it may follow the task for long)."""
    frames = aiter(content)
    try:
        async for chunk in frames:
            if b"data:" in chunk:
                return orjson.loads(chunk.split(b"data:", 1)[1].split(b"\n", 1)[0])
        raise AssertionError("the stream ended without an event")
    finally:
        await frames.aclose()


def _error_of(acting: str, refusal: contract.Refusal, error: dict[str, Any]) -> None:
    """The refusal as the acting dialect writes it."""
    assert error["code"] == refusal.error.code, error
    if acting == Dialect.A2A_1_0:
        assert error["data"][0]["reason"] == refusal.error.reason, error
    elif acting == Dialect.A2A_0_3:
        assert error["data"]["reason"] == refusal.error.reason, error
    else:
        assert error["message"].startswith(WORDS[acting][refusal.error].split("`")[1] + ": task "), error


OPERATIONS = [(acting, op) for acting in CREATORS for op in contract.METHODS[acting]]
# Operations whose acceptance changes nothing either (AIP's get records its message on AIP's tasks).
READS = {Op.GET, Op.LIST, Op.PUSH_GET, Op.PUSH_LIST, Op.RESUBSCRIBE}


@pytest.mark.django_db
@examples(max_examples=160, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    creator=st.sampled_from(CREATORS),
    operation=st.sampled_from(OPERATIONS),
    data=st.data(),
)
def test_every_operation_on_another_dialect_s_task_answers_as_the_table_says(
    client, agent, alice_key, creator, operation, data
):
    acting, op = operation
    state = data.draw(st.sampled_from(REACHED[creator]), label="state")
    streamed = op is Op.SEND and data.draw(st.booleans(), label="streamed")
    with transaction.atomic():
        task = task_in(agent, creator, state)
        before = stored(task)
        answer = act(client, alice_key, acting, op, task, streamed=streamed)
        after = stored(task)
        transaction.set_rollback(True)  # each example starts from an empty store
    refusal = contract.decide(creator=creator, acting=acting, op=op, state=state)
    if refusal is not None:
        if acting == Dialect.AIP_1_0:
            assert "result" in answer, answer  # ignored: the task as it is
        else:
            assert "error" in answer, f"refused by the table, accepted by the server: {answer}"
            _error_of(acting, refusal, answer["error"])
        assert after == before, "a refused call changed what is stored"
        return
    assert "error" not in answer, answer
    if op is Op.SEND:
        assert after[0]["message_count"] == before[0]["message_count"] + 1
        assert after[0]["state"] == contract.resumes_in(creator)
    elif op is Op.CANCEL:
        assert after[0]["state"] == TaskState.CANCELED
    elif op is Op.COMPLETE:
        assert after[0]["state"] == TaskState.COMPLETED
    elif op is Op.GET and acting == Dialect.AIP_1_0 and contract.keeps_command_messages(creator):
        assert after[0]["message_count"] == before[0]["message_count"] + 1
    elif op in READS:
        assert after == before, f"{op} changed what is stored"


@pytest.mark.django_db
def test_a_0_1_send_naming_a_completed_1_0_task_is_refused_and_changes_nothing(client, agent, alice_key):
    """The issue's case, with and without the session: the 1.0 task stays as it was told final."""
    task = task_in(agent, Dialect.A2A_1_0, TaskState.COMPLETED)
    before = stored(task)
    for session in (task.context_id, None):
        message = {"role": "user", "parts": _text("more")}
        params = {"id": str(task.pk), "message": message, **({"sessionId": session} if session else {})}
        body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/send", "params": params})
        error = orjson.loads(
            client.post(PATH, data=body, content_type="application/json", headers={"X-API-Key": alice_key}).content
        )["error"]
        assert error["code"] == -32004
        assert error["message"] == (
            f"不支持的操作: task {task.pk} is completed; a task in a terminal state accepts no more messages"
        )
    assert stored(task) == before


def test_the_table_names_each_dialect_s_methods_as_they_are_registered():
    from protocols import dialects

    for dialect in dialects.DIALECTS:
        for op, methods in contract.METHODS[dialect.name].items():
            names = [m.strip() for m in methods.split(",")]
            if dialect.name == Dialect.AIP_1_0:
                if op in (Op.SEND, Op.START, Op.COMPLETE, Op.GET, Op.CANCEL, Op.RESUBSCRIBE):
                    continue  # commands of rpc and stream, not methods
            for name in names:
                assert name in dialect.methods, (dialect.name, op, name)
