"""The one task state machine every dialect shares, and the sets that drive waiting and streaming.

Domain states are the union of A2A's and AIP's. AIP's `accepted` is stored as `submitted` and
`awaiting-input` as `input-required` (they mean the same); `awaiting-completion` has no A2A
counterpart and is shown to A2A readers as `input-required` with the real state in metadata.
"""

from __future__ import annotations

from django.db import models


class TaskState(models.TextChoices):
    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    AUTH_REQUIRED = "auth-required"
    AWAITING_COMPLETION = "awaiting-completion"
    COMPLETED = "completed"
    CANCELED = "canceled"
    FAILED = "failed"
    REJECTED = "rejected"


TERMINAL = frozenset({TaskState.COMPLETED, TaskState.CANCELED, TaskState.FAILED, TaskState.REJECTED})
INTERRUPTED = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED, TaskState.AWAITING_COMPLETION})
# A blocking SendMessage returns, and a stream of one exchange ends, on any of these.
SETTLED = TERMINAL | INTERRUPTED

_RUNNING = frozenset({TaskState.WORKING}) | INTERRUPTED | TERMINAL
ALLOWED: dict[str, frozenset[str]] = {
    TaskState.SUBMITTED: _RUNNING,
    TaskState.WORKING: _RUNNING,
    # Only a new client message takes an interrupted task back to submitted (AIP: continue).
    TaskState.INPUT_REQUIRED: _RUNNING | {TaskState.SUBMITTED},
    TaskState.AUTH_REQUIRED: _RUNNING | {TaskState.SUBMITTED},
    TaskState.AWAITING_COMPLETION: _RUNNING | {TaskState.SUBMITTED},
    TaskState.COMPLETED: frozenset(),
    TaskState.CANCELED: frozenset(),
    TaskState.FAILED: frozenset(),
    TaskState.REJECTED: frozenset(),
}


def can_transition(current: str, new: str) -> bool:
    return new in ALLOWED.get(current, frozenset())


class Dialect(models.TextChoices):
    A2A_1_0 = "a2a/1.0", "A2A 1.0"
    A2A_0_3 = "a2a/0.3", "A2A 0.3"
    A2A_0_1 = "a2a/0.1", "A2A 0.1"
    AIP_1_0 = "aip/1.0", "ACPs AIP 1.0"


# Dialects whose clients confirm a task's products: an agent's "complete" leaves such a task
# awaiting completion until the client completes it (AIP: the Leader's complete command).
CLIENT_CONFIRMS = frozenset({Dialect.AIP_1_0})
# Dialects whose state machine passes through working before any state an agent gives a task
# but rejected (AIP: accepted -> working -> awaiting-input | awaiting-completion | failed).
WORKS_FIRST = frozenset({Dialect.AIP_1_0})


class Role(models.TextChoices):
    USER = "user"  # AIP: leader
    AGENT = "agent"  # AIP: partner


class EventKind(models.TextChoices):
    STATUS = "status"
    ARTIFACT = "artifact"
    MESSAGE = "message"


class Failure(models.TextChoices):
    """Why the server itself failed a task (empty when the agent chose to fail it)."""

    NONE = "", "-"
    AGENT_ERROR = "agent-error", "the agent raised an error"
    INVALID_RESPONSE = "invalid-response", "the agent broke the executor contract"
    TIME_LIMIT = "time-limit", "the agent exceeded its time limit"
    WORKER_LOST = "worker-lost", "the worker running the agent was lost"
    MISCONFIGURED = "misconfigured", "the agent is misconfigured"
    STORE_UNAVAILABLE = "store-unavailable", "the task store was unavailable while the agent ran"
    PRODUCTS_TOO_LARGE = "products-too-large", "the agent's products exceeded the size the client allowed"


# What a task's client is told when the server fails its run (the failed status's message):
# words a client can act on, never the admin's reason (StatusChange.reason), which may name
# hosts, URLs, settings and exception texts. A failure may say more precisely what happened
# (AgentFailure's `public`); these are the defaults. docs/executors.md ("What a client sees
# when a run fails") lists them.
PUBLIC_TEXTS: dict[str, str] = {
    Failure.AGENT_ERROR: "the agent failed with an internal error; its owner can see the reason",
    Failure.INVALID_RESPONSE: "the agent gave an answer this server cannot use; its owner can see the reason",
    Failure.TIME_LIMIT: "the agent did not finish within its time limit",
    Failure.WORKER_LOST: "the server lost the worker running the agent; send the message again",
    Failure.MISCONFIGURED: "the agent is misconfigured and cannot run until its owner corrects it",
    Failure.STORE_UNAVAILABLE: "the server's task store was unavailable while the agent ran; send the message again",
    Failure.PRODUCTS_TOO_LARGE: "the agent's products grew larger than the client allowed (maxProductsBytes)",
}


def public_text(failure: str) -> str:
    """What the client of a task failed as `failure` reads as its status message."""
    return PUBLIC_TEXTS.get(failure) or PUBLIC_TEXTS[Failure.AGENT_ERROR]
