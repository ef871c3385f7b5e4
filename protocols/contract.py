"""How the dialects meet on one task: what an operation on an existing task may do, decided in
one place from the dialect that created the task, the dialect that acts on it, the operation
and the task's state. docs/dialects.md ("One task, four dialects") writes the whole table out;
tests/test_contract.py reads that table back and checks it against `decide`, and drives every
cell through the endpoints.

Two rules make the table:

- **A task keeps the lifecycle of the dialect that created it.** A2A 0.1 re-opens a completed
  task with a new `tasks/send`, but only a task 0.1 made, and only for a 0.1 client (to a 1.0
  client a completed task is final, whoever made it). An AIP task resumes in working (AIP has
  no way back to accepted) and keeps its Leader's command messages in its history; a task of
  another dialect resumes in submitted and keeps only the messages of its exchange.
- **A terminal state that any dialect calls final is final for all.** Canceled, failed and
  rejected are final everywhere; completed is final for every task but 0.1's own (above).

A refusal is neutral: the domain error that says it and what it says. Each dialect renders it
in its own words through its `error` hook (0.1: `不支持的操作: …`; 0.3 and 1.0: -32004 with the
reason), and AIP ignores a command that does not apply, as its seed says: the answer is the task
as it is. A refused call changes nothing stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tasks_app.errors import DomainError, TaskNotCancelable, UnsupportedOperation
from tasks_app.lifecycle import WORKS_FIRST, Dialect, TaskState
from tasks_app.services import Admit, FollowUp


class Op(StrEnum):
    """What a client does to a task that exists (each dialect's methods: `METHODS`)."""

    SEND = "send"  # a message to the task: resume it, or (0.1, its own) re-open it
    GET = "get"
    LIST = "list"
    CANCEL = "cancel"
    RESUBSCRIBE = "resubscribe"  # follow its events from now on (a snapshot first)
    PUSH_SET = "push-set"
    PUSH_GET = "push-get"
    PUSH_LIST = "push-list"
    PUSH_DELETE = "push-delete"
    START = "start"  # AIP: a start that names a task which exists already
    COMPLETE = "complete"  # AIP: the Leader confirms the products


class Phase(StrEnum):
    """The state classes the table is written in."""

    ACTIVE = "active"  # submitted, working
    INTERRUPTED = "interrupted"  # input-required, auth-required
    AWAITING_COMPLETION = "awaiting-completion"  # AIP's own: only tasks AIP made wait so
    COMPLETED = "completed"
    CLOSED = "closed"  # canceled, failed, rejected


PHASES: dict[str, Phase] = {
    TaskState.SUBMITTED: Phase.ACTIVE,
    TaskState.WORKING: Phase.ACTIVE,
    TaskState.INPUT_REQUIRED: Phase.INTERRUPTED,
    TaskState.AUTH_REQUIRED: Phase.INTERRUPTED,
    TaskState.AWAITING_COMPLETION: Phase.AWAITING_COMPLETION,
    TaskState.COMPLETED: Phase.COMPLETED,
    TaskState.CANCELED: Phase.CLOSED,
    TaskState.FAILED: Phase.CLOSED,
    TaskState.REJECTED: Phase.CLOSED,
}

# Each dialect's methods for each operation (what docs/dialects.md names; a dialect without an
# entry has no such operation).
METHODS: dict[str, dict[Op, str]] = {
    Dialect.A2A_1_0: {
        Op.SEND: "SendMessage, SendStreamingMessage",
        Op.GET: "GetTask",
        Op.LIST: "ListTasks",
        Op.CANCEL: "CancelTask",
        Op.RESUBSCRIBE: "SubscribeToTask",
        Op.PUSH_SET: "CreateTaskPushNotificationConfig",
        Op.PUSH_GET: "GetTaskPushNotificationConfig",
        Op.PUSH_LIST: "ListTaskPushNotificationConfigs",
        Op.PUSH_DELETE: "DeleteTaskPushNotificationConfig",
    },
    Dialect.A2A_0_3: {
        Op.SEND: "message/send, message/stream",
        Op.GET: "tasks/get",
        Op.CANCEL: "tasks/cancel",
        Op.RESUBSCRIBE: "tasks/resubscribe",
        Op.PUSH_SET: "tasks/pushNotificationConfig/set",
        Op.PUSH_GET: "tasks/pushNotificationConfig/get",
        Op.PUSH_LIST: "tasks/pushNotificationConfig/list",
        Op.PUSH_DELETE: "tasks/pushNotificationConfig/delete",
    },
    Dialect.A2A_0_1: {
        Op.SEND: "tasks/send, tasks/sendSubscribe",
        Op.GET: "tasks/get",
        Op.CANCEL: "tasks/cancel",
        Op.RESUBSCRIBE: "tasks/resubscribe",
        Op.PUSH_SET: "tasks/pushNotification/set",
        Op.PUSH_GET: "tasks/pushNotification/get",
    },
    Dialect.AIP_1_0: {
        Op.SEND: "continue",
        Op.START: "start",
        Op.COMPLETE: "complete",
        Op.GET: "get",
        Op.CANCEL: "cancel",
        Op.RESUBSCRIBE: "re-stream",
        Op.PUSH_SET: "notification/set",
        Op.PUSH_GET: "notification/get",  # with a notificationConfigId
        Op.PUSH_LIST: "notification/get",  # without one
        Op.PUSH_DELETE: "notification/delete",
    },
}


@dataclass(frozen=True)
class Refusal:
    """Why an operation may not act on a task, in no dialect's words: the domain error each
    dialect renders, and what it says (`{task}` and `{state}` filled in)."""

    error: type[DomainError]
    why: str

    def raised(self, *, task: str, state: str) -> DomainError:
        return self.error(self.why.format(task=task, state=state))


BUSY = Refusal(UnsupportedOperation, "task {task} is {state}; send a follow-up once it asks for input")
FINAL = Refusal(UnsupportedOperation, "task {task} is {state}; a task in a terminal state accepts no more messages")
NOT_CANCELABLE = Refusal(TaskNotCancelable, "task {task} is already {state}")
FINISHED = Refusal(UnsupportedOperation, "task {task} is {state}; a finished task has no events to follow")
EXISTS = Refusal(UnsupportedOperation, "task {task} exists already ({state}); a start names a new task")
NOT_AWAITING = Refusal(UnsupportedOperation, "task {task} is {state}; only a task awaiting completion is completed")


def decide(*, creator: str, acting: str, op: Op, state: str) -> Refusal | None:
    """None if `acting`'s `op` may act on a task `creator` made, now in `state`; else why not."""
    phase = PHASES[state]
    if op is Op.SEND:
        if phase in (Phase.INTERRUPTED, Phase.AWAITING_COMPLETION):
            return None
        if phase is Phase.ACTIVE:
            return BUSY
        # 0.1's "re-open a completed task" is 0.1's lifecycle: its own tasks, its own clients.
        if phase is Phase.COMPLETED and creator == acting == Dialect.A2A_0_1:
            return None
        return FINAL
    if op is Op.CANCEL:
        return NOT_CANCELABLE if phase in (Phase.COMPLETED, Phase.CLOSED) else None
    if op is Op.RESUBSCRIBE:
        # AIP's re-stream replays from a position (none: the first event), which a finished
        # task has; A2A's resubscription follows what is still to come (a Last-Event-ID makes
        # it a replay, accepted in every state).
        if acting != Dialect.AIP_1_0 and phase in (Phase.COMPLETED, Phase.CLOSED):
            return FINISHED
        return None
    if op is Op.START:
        return EXISTS
    if op is Op.COMPLETE:
        return None if phase is Phase.AWAITING_COMPLETION else NOT_AWAITING
    return None  # reads and push configs: any task in any state


def check(*, creator: str, acting: str, op: Op, state: str, task: str) -> None:
    """`decide`, with the refusal raised."""
    refusal = decide(creator=creator, acting=acting, op=op, state=state)
    if refusal is not None:
        raise refusal.raised(task=task, state=state)


def resumes_in(creator: str) -> str:
    """The state a follow-up puts a task in until its run begins: the creator's lifecycle
    (AIP's goes from awaiting straight back to working: it has no way back to accepted)."""
    return TaskState.WORKING if creator in WORKS_FIRST else TaskState.SUBMITTED


def keeps_command_messages(creator: str) -> bool:
    """Whether an AIP Leader's cancel, complete and get join the task's history (the seed shows
    them there): on AIP's own tasks only. Another dialect's history holds its exchange's
    messages, and a task it made final stays as it was."""
    return creator == Dialect.AIP_1_0


def follow_up(acting: str) -> FollowUp:
    """The store's question for a send to an existing task (asked with the task locked): may
    it, and in what state does it resume the task (`services.message_receive`)."""

    def rule(creator: str, state: str, task: str) -> str:
        check(creator=creator, acting=acting, op=Op.SEND, state=state, task=task)
        return resumes_in(creator)

    return rule


def admit(acting: str, op: Op) -> Admit:
    """The store's question for another operation on a locked task (`services.task_cancel`,
    `services.task_confirm`)."""

    def rule(creator: str, state: str, task: str) -> None:
        check(creator=creator, acting=acting, op=op, state=state, task=task)

    return rule
