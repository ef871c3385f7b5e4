"""The `a2a-upstream` executor: an agent whose logic is a remote A2A agent (docs/executors.md,
"Fronted A2A agents"). It runs the upstream session (session.py) and performs what it reports
through the AgentContext, on the worker's own thread, while watching for our task being
canceled so that the cancel is passed upstream."""

from __future__ import annotations

import asyncio
import queue
import time
import uuid
from typing import Any, ClassVar

from ...errors import TaskClosed
from ...lifecycle import TaskState
from ..base import AgentContext, AgentFailure, Executor, Misconfigured
from . import config
from .convert import user_message
from .session import Ended, Session, cancel_task
from .translate import Action, Chunk, Failed, Memory, Remember, Reply, Status

# How often the run looks whether our task was canceled while it reads the upstream: one
# state read per interval; the cancel reaches the upstream at most this much (plus one
# CancelTask round trip) after the client canceled.
CANCEL_POLL = 0.5


class A2AUpstreamExecutor(Executor):
    name = "a2a-upstream"
    description = (
        "Fronts a remote A2A agent (1.0 or 0.3, by its card's URL): each message goes to it through the "
        "official a2a-sdk client, and its events become this task's."
    )
    settings_schema: ClassVar[dict] = config.SCHEMA
    rerunnable = False  # a second run would send the client's message to the upstream again
    # Its card fetched and offered when an agent is saved. (mypy reads the base's Callable
    # ClassVar as a method's type, with self.)
    on_save = staticmethod(config.on_save)  # type: ignore[assignment]

    def execute(self, ctx: AgentContext) -> None:
        settings = config.read(ctx.settings, ctx.secret)
        memory = Memory.from_state(ctx.state, settings.card_url)
        message = user_message(
            ctx.message, message_id=str(uuid.uuid4()), task_id=memory.task_id, context_id=memory.context_id
        )
        uses = [ctx.extension(uri) for uri in ctx.extensions]
        session = Session(
            settings,
            message,
            memory,
            accepted_output_modes=list(ctx.accepted_output_modes),
            task_id=ctx.task_id,
            extensions=ctx.extensions,
            extension_metadata={k: v for use in uses if use is not None for k, v in use.metadata.items()},
        )
        session.start()
        ended, cancel_upstream = False, True
        try:
            ended = not self._follow(ctx, session)
        except TaskClosed:
            # The task moved on to a newer run (an operator re-dispatched it): that run speaks
            # to the upstream now, so this one only stops reading.
            cancel_upstream = False
            raise
        finally:
            # Any other way out (our task canceled, the time limit, a part the store refused,
            # a misconfiguration) leaves an upstream task no one will read: it is canceled.
            if ended:
                session.release()
            else:
                session.stop(cancel_upstream=cancel_upstream)
            session.join(session.cancel_wait)

    def canceled_while_idle(
        self, *, task_id: str, context_id: str, settings: dict[str, Any], secret: str, state: dict[str, Any]
    ) -> str:
        """Our task was canceled while the upstream's waited for input: cancel that one too."""
        config_ = config.read(settings, secret)
        memory = Memory.from_state(state, config_.card_url)
        if not memory.task_id:
            return "no upstream task"
        return asyncio.run(cancel_task(config_, memory.task_id))

    def _follow(self, ctx: AgentContext, session: Session) -> bool:
        """Perform the session's actions as they come, until it ends (False) or our task is
        canceled (True)."""
        looked = time.monotonic()
        while True:
            action = _next(session, CANCEL_POLL)
            if time.monotonic() - looked >= CANCEL_POLL:
                looked = time.monotonic()
                if ctx.cancelled:
                    return True
            if action is None:
                continue
            if isinstance(action, Ended):
                return False
            try:
                _perform(ctx, action)
            except TaskClosed:
                if ctx.cancelled:
                    return True
                raise


def _next(session: Session, timeout: float) -> Action | Ended | None:
    try:
        return session.actions.get(timeout=timeout)
    except queue.Empty:
        return None


def _perform(ctx: AgentContext, action: Action) -> None:
    if isinstance(action, Remember):
        ctx.state["upstream"] = action.memory
        ctx.save_state()
    elif isinstance(action, Chunk):
        ctx.artifact(
            action.parts,
            artifact_id=action.artifact_id,
            name=action.name,
            description=action.description,
            metadata=action.metadata or None,
            append=action.append,
            last_chunk=action.last_chunk,
        )
    elif isinstance(action, Status):
        if action.memory is not None:  # an interrupted task: the next run continues from here
            ctx.state["upstream"] = action.memory
            ctx.save_state()
        content = action.parts or None
        if action.state == TaskState.WORKING:
            ctx.working(content)
        elif action.state == TaskState.INPUT_REQUIRED:
            ctx.require_input(content)
        elif action.state == TaskState.AUTH_REQUIRED:
            ctx.require_auth(content)
        elif action.state == TaskState.COMPLETED:
            ctx.complete(content)
        elif action.state == TaskState.REJECTED:
            ctx.reject(content)
        else:
            ctx.fail(content)
    elif isinstance(action, Reply):
        ctx.reply(action.parts, metadata=action.metadata or None)
    elif isinstance(action, Failed):
        # The exchange failed (not the upstream's verdict, which is a Status): the admin gets
        # the reason, our client the public text.
        if action.misconfigured:
            raise Misconfigured(action.reason, public=action.public)
        raise AgentFailure(action.reason, failure=action.failure, public=action.public)
