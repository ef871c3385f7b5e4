"""The objects A2A 1.0 and 0.3 write alike: a message, an artifact, a status and a task have
the same members in both, and differ only in how a part, a role and a state are written and
in 0.3's `kind` discriminator. Each of those codecs makes one `Shapes` and encodes through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tasks_app import parts as P
from tasks_app.domain import ArtifactView, MessageView, TaskView
from tasks_app.lifecycle import TaskState

from .params import timestamp


@dataclass(frozen=True)
class Shapes:
    part: Callable[[P.Part], dict[str, Any]]
    role: Callable[[str], str]
    state: Callable[[str], str]
    kinds: bool  # 0.3 names each object's kind ("task", "message") in a `kind` member

    def _kind(self, kind: str) -> dict[str, Any]:
        return {"kind": kind} if self.kinds else {}

    def message(self, m: MessageView) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self._kind("message"),
            "messageId": m.message_id,
            "contextId": m.context_id,
            "taskId": m.task_id,
            "role": self.role(m.role),
            "parts": [self.part(p) for p in m.parts],
        }
        if m.metadata:
            out["metadata"] = m.metadata
        if m.extensions:
            out["extensions"] = m.extensions
        if m.reference_task_ids:
            out["referenceTaskIds"] = m.reference_task_ids
        return out

    def bare_message(self, m: MessageView) -> dict[str, Any]:
        """A reply that is not part of a task, as the client sees it: no taskId."""
        out = self.message(m)
        out.pop("taskId", None)
        return out

    def artifact(self, a: ArtifactView) -> dict[str, Any]:
        out: dict[str, Any] = {"artifactId": a.artifact_id, "parts": [self.part(p) for p in a.parts]}
        if a.name:
            out["name"] = a.name
        if a.description:
            out["description"] = a.description
        if a.metadata:
            out["metadata"] = a.metadata
        if a.extensions:
            out["extensions"] = a.extensions
        return out

    def status(self, state: str, message: MessageView | None, at: datetime) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state(state), "timestamp": timestamp(at)}
        if message is not None:
            out["message"] = self.message(message)
        return out

    def status_of(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The status a status event's stored payload carries."""
        message = payload.get("message")
        return self.status(
            payload["state"],
            MessageView.from_payload(message) if message else None,
            datetime.fromisoformat(payload["timestamp"]),
        )

    def task(self, t: TaskView, *, include_artifacts: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self._kind("task"),
            "id": t.id,
            "contextId": t.context_id,
            "status": self.status(t.state, t.status_message, t.status_timestamp),
        }
        if include_artifacts and t.artifacts:
            out["artifacts"] = [self.artifact(a) for a in t.artifacts]
        if t.history:
            out["history"] = [self.message(m) for m in t.history]
        metadata = dict(t.metadata)
        if t.state == TaskState.AWAITING_COMPLETION:
            # Neither dialect has AIP's awaiting-completion; it is shown as input-required
            # (the state maps say so), and the AIP state is named here.
            metadata["aipState"] = t.state
        if metadata:
            out["metadata"] = metadata
        return out
