"""Plain values that cross the boundary between dialects, services and executors.

Dialect codecs decode requests into these; services take them; executors see them
through `AgentContext`. None of them is an ORM object.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from accounts import storable

from .parts import Part


def parse_task_id(value: str) -> uuid.UUID | None:
    """A task id as the store knows it (a UUID), or None for anything that cannot be one."""
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


@dataclass(frozen=True)
class TaskLimits:
    """What a client may ask of a task when it starts it (AIP's start): how long the task
    waits for input, or for the client to confirm its products, before the server closes it;
    and how large its products may grow."""

    input_timeout: timedelta | None = None
    completion_timeout: timedelta | None = None
    products_max_bytes: int | None = None


@dataclass(frozen=True)
class NewMessage:
    """A message as it arrives, before it is stored."""

    message_id: str
    role: str
    parts: list[Part]
    metadata: dict[str, Any] = field(default_factory=dict)
    extensions: list[str] = field(default_factory=list)
    reference_task_ids: list[str] = field(default_factory=list)
    context_id: str | None = None
    task_id: str | None = None
    command: str = ""
    command_params: dict[str, Any] | None = None
    sent_at: datetime | None = None  # the sender's own time of sending (AIP sentAt)
    sender_id: str = ""  # the sender's own id (AIP senderId)


@dataclass(frozen=True)
class MessageView:
    message_id: str
    role: str
    parts: list[Part]
    context_id: str
    task_id: str
    metadata: dict[str, Any]
    extensions: list[str]
    reference_task_ids: list[str]

    def as_payload(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "role": self.role,
            "parts": self.parts,
            "context_id": self.context_id,
            "task_id": self.task_id,
            "metadata": self.metadata,
            "extensions": self.extensions,
            "reference_task_ids": self.reference_task_ids,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> MessageView:
        return cls(**payload)


@dataclass(frozen=True)
class ArtifactView:
    artifact_id: str
    name: str
    description: str
    parts: list[Part]
    metadata: dict[str, Any]
    extensions: list[str]

    def as_payload(self) -> dict[str, Any]:
        return {
            "artifact_id": self.artifact_id,
            "name": self.name,
            "description": self.description,
            "parts": self.parts,
            "metadata": self.metadata,
            "extensions": self.extensions,
        }


@dataclass(frozen=True)
class TaskView:
    """A task as a reader sees it: what every dialect encodes."""

    id: str
    context_id: str
    state: str
    status_message: MessageView | None
    status_timestamp: datetime
    history: list[MessageView]
    artifacts: list[ArtifactView]
    metadata: dict[str, Any]
    reply_only: bool = False
    # The task's primary key (what hints and streams key on; `id` is what clients are shown:
    # the client's own id for a task whose client chose it) and the dialect that created it.
    key: str = ""
    dialect: str = ""


@dataclass(frozen=True)
class LoggedMessage:
    """A client's message as its task's record keeps it (AIP's messageHistory): the message,
    the command it carried, and when and by whom its sender says it was sent."""

    message: MessageView
    command: str
    command_params: dict[str, Any] | None
    sent_at: datetime  # the sender's own time, else when the server stored it
    sender_id: str


@dataclass(frozen=True)
class LoggedStatus:
    """One transition of a task (AIP's statusHistory), with its message or, for one the server
    made, its reason."""

    state: str
    timestamp: datetime
    message: MessageView | None
    reason: str


@dataclass(frozen=True)
class TaskRecord:
    """A task with its record: the client's messages and the transitions, each since a time
    the reader gives (or all), and the reason of its latest transition."""

    view: TaskView
    messages: list[LoggedMessage]
    statuses: list[LoggedStatus]
    reason: str


@dataclass(frozen=True)
class NewArtifact:
    """An artifact as an agent reports it: whole, or (append=True) a chunk of the one with
    this id."""

    artifact_id: str
    parts: list[Part]
    name: str = ""
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    append: bool = False
    last_chunk: bool = False

    def __post_init__(self) -> None:
        # An agent names its artifacts: what it names them must fit the store (Refused
        # fails its run as an invalid response, never as a database error).
        storable.check_text(self.artifact_id, where="artifact_id", max_length=storable.ID_LENGTH)
        storable.check_text(self.name, where="name", max_length=storable.NAME_LENGTH)
        storable.check(self.description, where="description")
        storable.check(self.metadata, where="metadata")

    @property
    def mode(self) -> str:
        return "append" if self.append else "replace"


@dataclass(frozen=True)
class RunInputs:
    """What a claimed run gives its executor: the task's ids, its agent's executor and
    settings, and the whole history."""

    task_id: str
    context_id: str
    executor: str
    agent_settings: dict[str, Any]
    accepted_output_modes: list[str]
    run_token: uuid.UUID
    history: list[MessageView]
    # The agent's secret, unsealed; None when no configured key opens it.
    agent_secret: str | None = ""
    executor_state: dict[str, Any] = field(default_factory=dict)
    # The extensions the agent's card declares ({"uri", "description", "required", "params"})
    # and those the latest client message's request activated ({"uri", "metadata"}).
    agent_extensions: list[dict[str, Any]] = field(default_factory=list)
    activated_extensions: list[dict[str, Any]] = field(default_factory=list)
    # The dialect that created the task, and what its client asked of it (Task.input_timeout…).
    dialect: str = ""
    state: str = ""  # as the claim found it
    agent: str = ""  # tenant/agent, as operators name it (its metrics' label)
    limits: TaskLimits = field(default_factory=lambda: TaskLimits())
