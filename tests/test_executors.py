"""The built-in agents, run in-process through the JSON-RPC endpoint."""

from dataclasses import dataclass, field

import pytest

from tasks_app.executors import conformance
from tasks_app.lifecycle import Dialect
from tasks_app.models import TaskEvent

pytestmark = pytest.mark.django_db(transaction=True)
CONFORMANCE = "/agents/acme/conformance/"


def events_of(task_id):
    return [
        (e.kind, e.payload.get("state") or e.payload.get("append"))
        for e in TaskEvent.objects.filter(task_id=task_id).order_by("seq")
    ]


def test_echo_echoes_in_as_many_chunks_as_asked(rpc, echo_agent, alice_key):
    task = rpc.send("/agents/acme/echo/", "hey", key=alice_key, metadata={"benchChunks": 3}).result["task"]
    assert [p["text"] for p in task["artifacts"][0]["parts"]] == ["echo: hey"] * 3
    assert [k for k, _ in events_of(task["id"])] == ["status", "status", "artifact", "artifact", "artifact", "status"]


def test_the_writer_reports_progress_and_streams_its_text_in_appended_chunks(rpc, writer_agent, alice_key):
    task = rpc.send("/agents/acme/writer/", "a story about a lighthouse", key=alice_key).result["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["status"]["message"]["parts"][0]["text"].startswith("Done: a story about a lighthouse")
    artifact = task["artifacts"][0]
    assert artifact["name"] == "story.txt" and len(artifact["parts"]) == 4
    log = events_of(task["id"])
    assert log[:3] == [("status", "submitted"), ("status", "working"), ("status", "working")]
    assert [a for k, a in log if k == "artifact"] == [False, True, True, True]
    assert log[-1] == ("status", "completed")


@pytest.mark.parametrize(
    "prefix, state, check",
    [
        (
            "tck-complete-task",
            "TASK_STATE_COMPLETED",
            lambda t: t["status"]["message"]["parts"] == [{"text": "Hello from TCK"}],
        ),
        ("tck-input-required", "TASK_STATE_INPUT_REQUIRED", lambda t: True),
        ("tck-reject-task", "TASK_STATE_REJECTED", lambda t: True),
        (
            "tck-artifact-text",
            "TASK_STATE_COMPLETED",
            lambda t: t["artifacts"][0]["parts"] == [{"text": "Generated text content"}],
        ),
        (
            "tck-artifact-file-url",
            "TASK_STATE_COMPLETED",
            lambda t: t["artifacts"][0]["parts"][0]["url"].endswith("output.txt"),
        ),
        (
            "tck-artifact-file",
            "TASK_STATE_COMPLETED",
            lambda t: (
                t["artifacts"][0]["parts"][0] | {"raw": ""}
                == {"raw": "", "mediaType": "text/plain", "filename": "output.txt"}
            ),
        ),
        (
            "tck-artifact-data",
            "TASK_STATE_COMPLETED",
            lambda t: t["artifacts"][0]["parts"] == [{"data": {"key": "value", "count": 42}}],
        ),
        (
            "tck-stream-artifact-chunked",
            "TASK_STATE_COMPLETED",
            lambda t: [p["text"] for p in t["artifacts"][0]["parts"]] == ["chunk-1 ", "chunk-2"],
        ),
        ("anything-else", "TASK_STATE_COMPLETED", lambda t: True),
    ],
)
def test_the_conformance_agent_follows_the_suites_table(rpc, conformance_agent, prefix, state, check):
    task = rpc.send(CONFORMANCE, messageId=f"{prefix}-0123abcd").result["task"]
    assert task["status"]["state"] == state
    assert check(task), task


def test_a_task_created_in_0_3_that_names_no_behaviour_waits_so_the_client_can_continue_and_cancel_it(
    rpc03, conformance_agent
):
    # The 0.3 suite's messageIds are random: it continues and cancels what a plain send creates.
    first = rpc03.send(CONFORMANCE, "start").result
    assert first["status"]["state"] == "input-required"
    follow_up = rpc03.send(CONFORMANCE, "more", taskId=first["id"]).result
    assert follow_up["id"] == first["id"] and follow_up["status"]["state"] == "input-required"
    assert [m["role"] for m in follow_up["history"]] == ["user", "agent", "user", "agent"]
    canceled = rpc03(CONFORMANCE, "tasks/cancel", {"id": first["id"]}).result
    assert canceled["status"]["state"] == "canceled"


def test_a_task_created_in_1_0_that_names_no_behaviour_still_completes_at_once(rpc, rpc03, conformance_agent):
    done = rpc.send(CONFORMANCE, messageId="a-random-id").result["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert rpc03(CONFORMANCE, "tasks/get", {"id": done["id"]}).result["status"]["state"] == "completed"


@dataclass
class _Clock:
    now: float = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class _Ctx:
    """What the resubscribe behaviour uses of an AgentContext, with the time it was left working."""

    clock: _Clock
    dialect: str
    message_id: str = "test-resubscribe-message-id-4f1c"
    calls: list = field(default_factory=list)
    cancelled: bool = False

    @property
    def message(self):
        return type("Message", (), {"message_id": self.message_id})()

    def working(self):
        self.calls.append(("working", self.clock.now))

    def complete(self, *_):
        self.calls.append(("completed", self.clock.now))


@pytest.mark.parametrize(("dialect", "seconds"), [(Dialect.A2A_1_0, 4), (Dialect.A2A_0_3, 12)])
def test_the_resubscribe_task_stays_working_as_long_as_its_suite_streams(monkeypatch, dialect, seconds):
    # 0.3's suite needs two of its streaming timeouts (5 s each in the team's runner); 1.0's, 4 s.
    clock = _Clock()
    monkeypatch.setattr(conformance.time, "sleep", clock.sleep)
    monkeypatch.setattr(conformance.time, "monotonic", lambda: clock.now)
    ctx = _Ctx(clock, dialect)
    conformance.ConformanceExecutor().execute(ctx)
    (_, began), (state, ended) = ctx.calls
    assert state == "completed" and seconds <= ended - began < seconds + 0.2


@pytest.mark.parametrize(
    "accepted, media_type, taken",
    [
        ([], "image/png", True),
        (["text/plain"], "text/plain", True),
        (["text/*"], "text/markdown", True),
        (["text/plain"], "application/json", False),
    ],
)
def test_an_executor_can_ask_whether_the_client_takes_a_media_type(accepted, media_type, taken):
    from tasks_app.executors import AgentContext

    ctx = AgentContext(task_id="t", context_id="c", message=None, history=[], accepted_output_modes=accepted)
    assert ctx.accepts(media_type) is taken
