"""The agent-logic API. An executor sees only an `AgentContext`: the incoming message, the
history and the context id, and verbs that report progress. Every verb is a service call,
so each one is persisted, logged as an event and visible to readers before it returns."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

from .. import dbcalls, dispatch, media, selectors, services
from .. import parts as P
from ..domain import MessageView, NewArtifact, TaskLimits
from ..errors import TaskClosed
from ..lifecycle import CLIENT_CONFIRMS, SETTLED, TERMINAL, WORKS_FIRST, Failure, Role, TaskState, public_text
from .extensions import EXTENSIONS, ExtensionUse, ServerExtension, uses

Content = str | list[P.Part] | None


@dataclass
class AgentContext:
    task_id: str
    context_id: str
    message: MessageView
    history: list[MessageView]
    settings: dict[str, Any] = field(default_factory=dict)
    accepted_output_modes: list[str] = field(default_factory=list)
    run_token: Any = None
    settled: bool = False
    # The agent's secret as its tenant set it ("" when none; None when the server's keys cannot
    # open it): read it through `secret`, which says so.
    agent_secret: str | None = ""
    # What this executor kept on this task at an earlier run; change it, then `save_state()`.
    state: dict[str, Any] = field(default_factory=dict)
    # The extensions the agent's card declares, and those the request being answered activated
    # (as the client's message keeps them): read them through `extensions` and `extension()`.
    declared_extensions: list[dict[str, Any]] = field(default_factory=list)
    activated_extensions: list[dict[str, Any]] = field(default_factory=list)
    # The dialect that created the task, the task's state (as this run began, then as it left
    # it), and what its client asked of it (timeouts, the products' size): the dialect's rules
    # apply to the verbs.
    dialect: str = ""
    task_state: str = TaskState.SUBMITTED
    limits: TaskLimits = field(default_factory=TaskLimits)
    _products: dict[str, int] | None = field(default=None, init=False, repr=False)  # bytes by artifact id

    @property
    def secret(self) -> str:
        if self.agent_secret is None:
            raise Misconfigured(
                "the agent's secret cannot be decrypted with this server's keys (PUSH_CREDENTIALS_KEY): set it again"
            )
        return self.agent_secret

    @property
    def extensions(self) -> list[str]:
        """The URIs of the extensions the client activated on the request being answered (its
        A2A-Extensions header), among those the agent's card declares."""
        return [use.uri for use in self._uses()]

    def extension(self, uri: str) -> ExtensionUse | None:
        """The extension `uri` if the client activated it: its params as the card declares
        them, and the request's metadata filed under its URI. None if it is not active."""
        return next((use for use in self._uses() if use.uri == uri), None)

    def _uses(self) -> list[ExtensionUse]:
        return uses(self.declared_extensions, self.activated_extensions)

    def _server_extensions(self) -> list[tuple[ServerExtension, ExtensionUse]]:
        """The active extensions the server implements, in the card's order."""
        return [(EXTENSIONS[use.uri](), use) for use in self._uses() if use.uri in EXTENSIONS]

    def _message_metadata(self, metadata: dict[str, Any] | None) -> dict[str, Any]:
        found = dict(metadata or {})
        for extension, use in self._server_extensions():
            found = extension.message_metadata(found, use)
        return found

    def _artifact_metadata(self, metadata: dict[str, Any] | None) -> dict[str, Any]:
        found = dict(metadata or {})
        for extension, use in self._server_extensions():
            found = extension.artifact_metadata(found, use)
        return found

    def save_state(self) -> None:
        """Keep `state` for this task's next run (a later message, a rerun)."""
        services.task_executor_state_save(task_id=self.task_id, run_token=self.run_token, state=self.state)

    @property
    def text(self) -> str:
        """The incoming message's text parts, joined."""
        return P.plain_text(self.message.parts)

    @property
    def user_texts(self) -> list[str]:
        """Text of every user message of this task so far, oldest first."""
        return [P.plain_text(m.parts) for m in self.history if m.role == Role.USER]

    def accepts(self, media_type: str) -> bool:
        """Whether the client takes parts of this media type (`acceptedOutputModes`; a client
        that named none takes anything). The server has already refused a client that accepts
        nothing the agent's card says it produces; among those modes, pick one it accepts."""
        return not self.accepted_output_modes or media.accepts_any(self.accepted_output_modes, [media_type])

    @property
    def cancelled(self) -> bool:
        """True once the task was canceled (or otherwise closed) behind the executor's back."""
        state = selectors.task_state(self.task_id)
        return state is None or state in TERMINAL

    def _move(self, state: str, content: Content, reason: str = "", artifact: NewArtifact | None = None) -> None:
        parts = P.coerce(content)
        if state == TaskState.COMPLETED and self.dialect in CLIENT_CONFIRMS:
            state = TaskState.AWAITING_COMPLETION  # the client completes it, or its timeout does
        if state not in (TaskState.WORKING, TaskState.REJECTED):
            self._work_first()
        if artifact is not None:
            self._products_check(artifact.artifact_id, artifact.parts, append=artifact.append)
        services.task_transition(
            task_id=self.task_id,
            state=state,
            parts=parts,
            reason=reason,
            run_token=self.run_token,
            artifact=artifact,
            message_metadata=self._message_metadata(None) if parts else None,
        )
        self.settled = state in SETTLED
        self.task_state = state
        self._expiry_schedule(state)

    def _work_first(self) -> None:
        """In a dialect whose tasks work before they settle, a task not yet working is first."""
        if self.dialect in WORKS_FIRST and self.task_state != TaskState.WORKING:
            self._move(TaskState.WORKING, None)

    def _expiry_schedule(self, state: str) -> None:
        """A task that now waits on its client is closed if the client outstays its timeout."""
        timeouts: dict[str, timedelta | None] = {
            TaskState.INPUT_REQUIRED: self.limits.input_timeout,
            TaskState.AWAITING_COMPLETION: self.limits.completion_timeout,
        }
        timeout = timeouts.get(state)
        if timeout is not None:
            # A hair late, so the job never finds the wait not yet over.
            dispatch.enqueue_expiry(task_id=self.task_id, countdown=timeout.total_seconds() + 0.05)

    def _products_check(self, artifact_id: str, parts: list[P.Part], *, append: bool) -> None:
        """The task's products may not outgrow what its client allowed (AIP's maxProductsBytes):
        the run fails, saying by how much, and the product is not kept. A chunk adds to its
        artifact; a whole artifact replaces the one of its id."""
        limit = self.limits.products_max_bytes
        if limit is None:
            return
        if self._products is None:
            self._products = selectors.products_sizes(self.task_id)
        sizes = dict(self._products)
        sizes[artifact_id] = (sizes.get(artifact_id, 0) if append else 0) + P.content_size(parts)
        size = sum(sizes.values())
        if size > limit:
            said = f"products would be {size} bytes, more than the {limit} bytes the client allowed (maxProductsBytes)"
            raise AgentFailure(f"the {said}", failure=Failure.PRODUCTS_TOO_LARGE, public=f"the agent's {said}")
        self._products = sizes

    def working(self, msg: Content = None) -> None:
        self._move(TaskState.WORKING, msg)

    def artifact(
        self,
        parts: Content,
        *,
        name: str = "",
        artifact_id: str | None = None,
        description: str = "",
        append: bool = False,
        last_chunk: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Add an artifact (or, with append=True and the same artifact_id, a chunk of one)."""
        coerced = P.coerce(parts)
        self._work_first()
        if self.limits.products_max_bytes is not None:
            # The id is chosen here, not by the store, so that the check knows which it is.
            artifact_id = artifact_id or str(uuid.uuid4())
            self._products_check(artifact_id, coerced, append=append)
        return services.artifact_append(
            task_id=self.task_id,
            parts=coerced,
            artifact_id=artifact_id,
            name=name,
            description=description,
            metadata=self._artifact_metadata(metadata),
            append=append,
            last_chunk=last_chunk,
            run_token=self.run_token,
        )

    def require_input(self, msg: Content) -> None:
        self._move(TaskState.INPUT_REQUIRED, msg)

    def require_auth(self, msg: Content) -> None:
        self._move(TaskState.AUTH_REQUIRED, msg)

    def complete(
        self,
        msg: Content = None,
        *,
        artifact: Content = None,
        name: str = "",
        artifact_id: str | None = None,
        append: bool = False,
        description: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Complete the task. With `artifact`, first add it (as `artifact()` would, as its
        last chunk) in the same transaction: the answer and the completion become visible
        together, and the worker writes once instead of twice."""
        result = None
        if artifact is not None:
            result = NewArtifact(
                artifact_id=artifact_id or str(uuid.uuid4()),
                parts=P.coerce(artifact),
                name=name,
                description=description,
                metadata=self._artifact_metadata(metadata),
                append=append,
                last_chunk=True,
            )
        self._move(TaskState.COMPLETED, msg, artifact=result)

    def fail(self, msg: Content) -> None:
        self._move(TaskState.FAILED, msg)

    def reject(self, msg: Content) -> None:
        self._move(TaskState.REJECTED, msg)

    def reply(self, message: Content, *, metadata: dict[str, Any] | None = None) -> None:
        """Answer with a bare Message instead of a task (A2A's message-only agents). A task
        whose client confirms its results has no bare answers: the reply completes it."""
        if self.dialect in CLIENT_CONFIRMS:
            self.complete(message)
            return
        services.task_reply(
            task_id=self.task_id,
            parts=P.coerce(message),
            run_token=self.run_token,
            metadata=self._message_metadata(metadata),
        )
        self.settled = True


class AsyncAgentContext:
    """What an async executor (`async def execute(ctx)`) is given: the reads of `AgentContext`
    as they are, and its verbs awaitable (`await ctx.complete(...)`, `await ctx.cancelled`).

    Each verb is the same service call as the sync verb's, run on the bounded DB threads
    (tasks_app.dbcalls), so a run that waits between verbs holds no connection and no thread.
    A run's verbs take turns (one at a time, in the order awaited), as the sync ones do. A run
    needs not poll `cancelled`: a cancel of its task cancels its coroutine within a second."""

    def __init__(self, sync: AgentContext) -> None:
        self.sync = sync
        self.busy = 0  # verbs under way: a cancel waits for them (each raises TaskClosed itself)
        self._turn = asyncio.Lock()

    async def _call(self, verb: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.busy += 1
        try:
            async with self._turn:
                return await dbcalls.run(verb, *args, **kwargs)
        finally:
            self.busy -= 1

    # --- reads (no query) ---------------------------------------------------------------

    @property
    def task_id(self) -> str:
        return self.sync.task_id

    @property
    def context_id(self) -> str:
        return self.sync.context_id

    @property
    def message(self) -> MessageView:
        return self.sync.message

    @property
    def history(self) -> list[MessageView]:
        return self.sync.history

    @property
    def settings(self) -> dict[str, Any]:
        return self.sync.settings

    @property
    def accepted_output_modes(self) -> list[str]:
        return self.sync.accepted_output_modes

    @property
    def state(self) -> dict[str, Any]:
        return self.sync.state

    @property
    def settled(self) -> bool:
        return self.sync.settled

    @property
    def dialect(self) -> str:
        return self.sync.dialect

    @property
    def task_state(self) -> str:
        return self.sync.task_state

    @property
    def limits(self) -> TaskLimits:
        return self.sync.limits

    @property
    def secret(self) -> str:
        return self.sync.secret

    @property
    def extensions(self) -> list[str]:
        return self.sync.extensions

    def extension(self, uri: str) -> ExtensionUse | None:
        return self.sync.extension(uri)

    @property
    def text(self) -> str:
        return self.sync.text

    @property
    def user_texts(self) -> list[str]:
        return self.sync.user_texts

    def accepts(self, media_type: str) -> bool:
        return self.sync.accepts(media_type)

    # --- verbs (awaitable) ----------------------------------------------------------------

    @property
    def cancelled(self) -> Awaitable[bool]:
        """`await ctx.cancelled`: True once the task was canceled (or otherwise closed)."""
        return self._call(lambda: self.sync.cancelled)

    async def save_state(self) -> None:
        await self._call(self.sync.save_state)

    async def working(self, msg: Content = None) -> None:
        await self._call(self.sync.working, msg)

    async def artifact(self, parts: Content, **kwargs: Any) -> str:
        """As `AgentContext.artifact` (name, artifact_id, description, append, last_chunk, metadata)."""
        return await self._call(self.sync.artifact, parts, **kwargs)

    async def require_input(self, msg: Content) -> None:
        await self._call(self.sync.require_input, msg)

    async def require_auth(self, msg: Content) -> None:
        await self._call(self.sync.require_auth, msg)

    async def complete(self, msg: Content = None, **kwargs: Any) -> None:
        """As `AgentContext.complete` (artifact, name, artifact_id, append, description, metadata)."""
        await self._call(self.sync.complete, msg, **kwargs)

    async def fail(self, msg: Content) -> None:
        await self._call(self.sync.fail, msg)

    async def reject(self, msg: Content) -> None:
        await self._call(self.sync.reject, msg)

    async def reply(self, message: Content, *, metadata: dict[str, Any] | None = None) -> None:
        await self._call(self.sync.reply, message, metadata=metadata)


def is_async(executor: Executor | type[Executor]) -> bool:
    """Whether the executor's `execute` is a coroutine function: its runs wait on the run host."""
    return inspect.iscoroutinefunction(executor.execute)


class Misconfigured(Exception):
    """The agent cannot run as its tenant configured it (a missing setting, an unreadable
    secret): its task fails with this message as the reason, as a misconfiguration. Its client
    reads `public` (the misconfigured default unless given), never this message."""

    def __init__(self, reason: str, *, public: str = "") -> None:
        super().__init__(reason)
        self.public = public or public_text(Failure.MISCONFIGURED)


class AgentFailure(Exception):
    """The run cannot go on, for a reason the server records: the task fails as `failure` (a
    `lifecycle.Failure`) with this message as the reason. For executors whose logic runs
    elsewhere (a webhook endpoint that cannot be reached, answers 500, or answers what cannot
    be applied), where an exception's class name alone would not say what happened.

    The reason is the admin's (it may name hosts, URLs, settings); the task's client reads
    `public` as the failed status's message: what went wrong in words it can act on, with
    nothing internal (the failure kind's default text unless given)."""

    def __init__(self, reason: str, *, failure: str = Failure.AGENT_ERROR, public: str = "") -> None:
        super().__init__(reason)
        self.failure = failure
        self.public = public or public_text(failure)


class Executor:
    """Subclass, set `name`, implement `execute`, and declare it in your distribution's entry
    points (group `agentserver.executors`, `name = module:Class`; see plugins.py)."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    # Whether a run cut off midway (its worker killed) may run again from the start: what it
    # already reported stays, and it must not matter that it reports it twice.
    rerunnable: ClassVar[bool] = False
    # A JSON Schema (2020-12) of the agent's `settings`, checked when an agent is saved in the
    # admin or by create_agent, and shown in the admin's agent form.
    settings_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    # Checked when an agent is saved (docs/executors.md, "Checked when saved"): whether it
    # cannot be saved without a secret, and a static method on_save(settings, secret) ->
    # (problems, offered card content), e.g. a fronted agent's upstream card fetched.
    secret_required: ClassVar[bool] = False
    on_save: ClassVar[Callable[[dict[str, Any], str], tuple[list[str], dict[str, Any]]] | None] = None

    @classmethod
    def settings_problems(cls, values: dict[str, Any]) -> list[str]:
        """What is wrong with the settings `values` beyond the schema (asked only of settings the schema
        accepts), one line each: rules that depend on this server's own settings."""
        return []

    def execute(self, ctx: Any) -> Any:  # pragma: no cover - interface
        """`def execute(self, ctx: AgentContext) -> None`, or for an agent that waits (on a
        model, a webhook, another agent) `async def execute(self, ctx: AsyncAgentContext)`."""
        raise NotImplementedError

    def canceled_while_idle(
        self, *, task_id: str, context_id: str, settings: dict[str, Any], secret: str, state: dict[str, Any]
    ) -> str:
        """The task `task_id` was canceled while no run of it was active (it waited for input),
        with `state` as a run left it (asked only when a run left some): pass the cancel on to
        what works elsewhere (a fronted agent's upstream task, a webhook's endpoint). Runs in a
        worker; returns what happened, for the log."""
        return "nothing to do"


REGISTRY: dict[str, type[Executor]] = {}


def register(cls: type[Executor]) -> type[Executor]:
    """Register an executor from code (tests, a project's own settings): installed ones are
    registered from their entry points."""
    REGISTRY[cls.name] = cls
    return cls


__all__ = [
    "AgentContext",
    "AsyncAgentContext",
    "is_async",
    "AgentFailure",
    "Executor",
    "Misconfigured",
    "REGISTRY",
    "register",
    "TaskClosed",
]
