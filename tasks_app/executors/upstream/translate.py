"""What the upstream's events mean for our task, decided in one place and free of I/O: each
StreamResponse the SDK's client yields (a task snapshot, a status or artifact update, a bare
message) becomes the actions that the executor then performs through its AgentContext.

Snapshots (the first event of a stream or of a resubscription, and every GetTask while
polling) repeat what was already reported, so the translator remembers what it forwarded: the
upstream's last status (state, message id, timestamp) and how many parts of each artifact.
That memory outlives the run in the task's executor state: a follow-up after input-required
continues the same upstream task, whose first snapshot still shows the old question."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from a2a.types import Artifact, StreamResponse, Task, TaskArtifactUpdateEvent, TaskStatus
from a2a.types import TaskState as Upstream

from ... import parts as P
from ...lifecycle import Failure, TaskState
from .convert import from_upstream_parts, metadata_of

TERMINAL = frozenset(
    {
        Upstream.TASK_STATE_COMPLETED,
        Upstream.TASK_STATE_FAILED,
        Upstream.TASK_STATE_CANCELED,
        Upstream.TASK_STATE_REJECTED,
    }
)
SETTLED = TERMINAL | {Upstream.TASK_STATE_INPUT_REQUIRED, Upstream.TASK_STATE_AUTH_REQUIRED}

_OURS = {
    Upstream.TASK_STATE_WORKING: TaskState.WORKING,
    Upstream.TASK_STATE_INPUT_REQUIRED: TaskState.INPUT_REQUIRED,
    Upstream.TASK_STATE_AUTH_REQUIRED: TaskState.AUTH_REQUIRED,
    Upstream.TASK_STATE_COMPLETED: TaskState.COMPLETED,
    Upstream.TASK_STATE_FAILED: TaskState.FAILED,
    Upstream.TASK_STATE_REJECTED: TaskState.REJECTED,
}


@dataclass
class Memory:
    """What this task's executor state keeps of its upstream task (ctx.state["upstream"])."""

    card_url: str = ""
    task_id: str = ""
    context_id: str = ""
    status: list[str] = field(default_factory=list)  # the last status forwarded: [state, message id, time]
    artifacts: dict[str, int] = field(default_factory=dict)  # artifact id -> parts forwarded

    def as_state(self) -> dict[str, Any]:
        return {
            "card_url": self.card_url,
            "task_id": self.task_id,
            "context_id": self.context_id,
            "status": list(self.status),
            "artifacts": dict(self.artifacts),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], card_url: str) -> Memory:
        kept = state.get("upstream")
        # An agent pointed at another upstream since: the old upstream's ids mean nothing there.
        if not isinstance(kept, dict) or kept.get("card_url") != card_url:
            return cls(card_url=card_url)
        return cls(
            card_url=card_url,
            task_id=str(kept.get("task_id") or ""),
            context_id=str(kept.get("context_id") or ""),
            status=[str(s) for s in kept.get("status") or []],
            artifacts={str(k): int(v) for k, v in (kept.get("artifacts") or {}).items()},
        )


# --- the actions -------------------------------------------------------------------------


@dataclass(frozen=True)
class Remember:
    """Keep this in the task's executor state now (the upstream's ids became known)."""

    memory: dict[str, Any]


@dataclass(frozen=True)
class Status:
    state: str  # ours
    parts: list[P.Part]
    memory: dict[str, Any] | None = None  # for an interrupted state: keep it first (the next run reads it)


@dataclass(frozen=True)
class Chunk:
    artifact_id: str
    parts: list[P.Part]
    name: str
    description: str
    metadata: dict[str, Any]
    append: bool
    last_chunk: bool


@dataclass(frozen=True)
class Reply:
    parts: list[P.Part]
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Failed:
    """The exchange with the upstream failed; `misconfigured`: because of how the agent is set up."""

    reason: str  # the admin's (it may name the upstream's URL and its words)
    misconfigured: bool = False
    public: str = ""  # the task's client's (no URL, no exception text); empty: the failure's default
    failure: str = Failure.AGENT_ERROR


Action = Remember | Status | Chunk | Reply | Failed


def _status_key(status: TaskStatus) -> list[str]:
    return [
        Upstream.Name(status.state),
        status.message.message_id if status.HasField("message") else "",
        status.timestamp.ToJsonString() if status.HasField("timestamp") else "",
    ]


class Translator:
    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.settled = False  # the exchange is over: a settled state or a bare message
        self.terminal = False  # ... and the upstream task with it (nothing left to cancel)
        self.seen_any = False  # the upstream has said anything about this exchange

    def feed(self, response: StreamResponse) -> list[Action]:
        kind = response.WhichOneof("payload")
        if kind == "message":
            self.seen_any = self.settled = True
            return [Reply(from_upstream_parts(response.message.parts), metadata_of(response.message))]
        if kind == "task":
            return self._snapshot(response.task)
        if kind == "status_update":
            update = response.status_update
            return [*self._ids(update.task_id, update.context_id), *self._status(update.status)]
        if kind == "artifact_update":
            update = response.artifact_update
            return [*self._ids(update.task_id, update.context_id), self._chunk(update)]
        return []  # a payload of a later protocol version: nothing we can do with it

    def _ids(self, task_id: str, context_id: str) -> list[Action]:
        self.seen_any = True
        if not task_id or (task_id, context_id or self.memory.context_id) == (
            self.memory.task_id,
            self.memory.context_id,
        ):
            return []
        self.memory.task_id = task_id
        self.memory.context_id = context_id or self.memory.context_id
        return [Remember(self.memory.as_state())]

    def _snapshot(self, task: Task) -> list[Action]:
        actions = self._ids(task.id, task.context_id)
        final = task.status.state in TERMINAL
        for artifact in task.artifacts:
            actions += self._whole(artifact, last_chunk=final)
        state = task.status.state
        if state != Upstream.TASK_STATE_SUBMITTED and _status_key(task.status) != self.memory.status:
            actions += self._status(task.status)
        return actions

    def _status(self, status: TaskStatus) -> list[Action]:
        self.memory.status = _status_key(status)
        state = status.state
        parts = from_upstream_parts(status.message.parts) if status.HasField("message") else []
        if state == Upstream.TASK_STATE_SUBMITTED:
            return []
        self.settled = state in SETTLED
        self.terminal = state in TERMINAL
        if state == Upstream.TASK_STATE_CANCELED:
            # Not by us (our cancel stops reading first): the upstream gave up on its own.
            return [Status(TaskState.FAILED, [P.text("the upstream agent canceled the task"), *parts])]
        ours = _OURS.get(state)
        if ours is None:
            self.settled = self.terminal = True
            return [Status(TaskState.FAILED, [P.text(f"the upstream agent reported an unknown state ({state})")])]
        if ours == TaskState.FAILED and not parts:
            parts = [P.text("the upstream agent failed without saying why")]
        interrupted = state in SETTLED - TERMINAL
        return [Status(ours, parts, memory=self.memory.as_state() if interrupted else None)]

    def _chunk(self, update: TaskArtifactUpdateEvent) -> Chunk:
        artifact = update.artifact
        seen = self.memory.artifacts.get(artifact.artifact_id)
        count = len(artifact.parts)
        self.memory.artifacts[artifact.artifact_id] = seen + count if update.append and seen is not None else count
        return Chunk(
            artifact_id=artifact.artifact_id,
            parts=from_upstream_parts(artifact.parts),
            name=artifact.name,
            description=artifact.description,
            metadata=metadata_of(artifact),
            append=update.append,
            last_chunk=update.last_chunk,
        )

    def _whole(self, artifact: Artifact, *, last_chunk: bool) -> list[Action]:
        """An artifact as a snapshot shows it: only what was not forwarded yet."""
        seen = self.memory.artifacts.get(artifact.artifact_id, 0)
        count = len(artifact.parts)
        if count == seen:
            return []
        self.memory.artifacts[artifact.artifact_id] = count
        append = 0 < seen < count  # it grew: the new parts, as a chunk; else (new, or shrunk: replaced) whole
        return [
            Chunk(
                artifact_id=artifact.artifact_id,
                parts=from_upstream_parts(artifact.parts[seen:] if append else artifact.parts),
                name=artifact.name,
                description=artifact.description,
                metadata=metadata_of(artifact),
                append=append,
                last_chunk=last_chunk,
            )
        ]
