"""The built-in agents, run in-process through the JSON-RPC endpoint."""

import pytest

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
