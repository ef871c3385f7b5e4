import time

from .base import AgentContext, Executor


def _int(metadata: dict, key: str, default: int) -> int:
    try:
        return int(metadata.get(key, default))
    except (TypeError, ValueError):
        return default


class EchoExecutor(Executor):
    """Answers every message with an artifact "echo: <text>", then completes.

    Same semantics as the benchmark peer on the official SDK, so the two compare fairly:
    metadata `benchChunks` K streams K appended chunks (after a `working` status) and
    `benchDelayMs` D sleeps D ms before each chunk.

    Still synchronous: as an async executor (tried, bench/README.md "Runs that wait") its waits
    cost a coroutine on the run host, but in a prefork child its run hops to the run loop's
    thread and its verbs to the DB threads, about 1 ms more of the worker's CPU per run; the
    echo is the hot path's agent, so it turns async once the prefork path costs no more.
    """

    name = "echo"
    rerunnable = True  # answers from the message alone; a second run repeats the first
    description = "Echoes the text it is sent."
    settings_schema = {"type": "object", "additionalProperties": False, "properties": {}}

    def execute(self, ctx: AgentContext) -> None:
        chunks = max(1, _int(ctx.message.metadata, "benchChunks", 1))
        delay = _int(ctx.message.metadata, "benchDelayMs", 0) / 1000
        if chunks > 1:
            ctx.working()
        artifact_id = f"echo-{ctx.task_id}"
        text = "echo: " + ctx.text
        for i in range(chunks - 1):
            if delay:
                time.sleep(delay)
            ctx.artifact(text, artifact_id=artifact_id, name="echo", append=i > 0)
        if delay:
            time.sleep(delay)
        # The last chunk and the completion in one write.
        ctx.complete(artifact=text, artifact_id=artifact_id, name="echo", append=chunks > 1)
