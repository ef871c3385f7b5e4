import asyncio

from .base import AsyncAgentContext, Executor


def _int(metadata: dict, key: str, default: int) -> int:
    try:
        return int(metadata.get(key, default))
    except (TypeError, ValueError):
        return default


class EchoExecutor(Executor):
    """Answers every message with an artifact "echo: <text>", then completes.

    Same semantics as the benchmark peer on the official SDK, so the two compare fairly:
    metadata `benchChunks` K streams K appended chunks (after a `working` status) and
    `benchDelayMs` D waits D ms before each chunk. Async, as the peer's is: a run that waits
    is a coroutine on the run host, not a process (docs/executors.md, "Async executors").
    """

    name = "echo"
    rerunnable = True  # answers from the message alone; a second run repeats the first
    description = "Echoes the text it is sent."
    settings_schema = {"type": "object", "additionalProperties": False, "properties": {}}

    async def execute(self, ctx: AsyncAgentContext) -> None:
        chunks = max(1, _int(ctx.message.metadata, "benchChunks", 1))
        delay = _int(ctx.message.metadata, "benchDelayMs", 0) / 1000
        if chunks > 1:
            await ctx.working()
        artifact_id = f"echo-{ctx.task_id}"
        text = "echo: " + ctx.text
        for i in range(chunks - 1):
            if delay:
                await asyncio.sleep(delay)
            await ctx.artifact(text, artifact_id=artifact_id, name="echo", append=i > 0)
        if delay:
            await asyncio.sleep(delay)
        # The last chunk and the completion in one write.
        await ctx.complete(artifact=text, artifact_id=artifact_id, name="echo", append=chunks > 1)
