"""One run's exchange with the upstream agent, with the official a2a-sdk client, on an asyncio
event loop of its own thread.

The loop gets a thread of its own because the run's other half, the AgentContext verbs, is
Django ORM work, which refuses to run in a thread with a running event loop; and because the
Celery worker's main thread must stay free to receive the soft time limit. So the session
reads the upstream and puts actions (translate.py) on a queue; the executor, on the worker's
thread, performs them, watches for our task being canceled, and then tells the session to
cancel the upstream task. Each run has its own loop and its own httpx client, both closed
before the run returns.

The exchange: fetch the card (card.py), pick the interface, then
- stream (SendStreamingMessage / message/stream) when the settings and the card allow it;
  if the stream drops once the upstream task is known, resubscribe (SubscribeToTask /
  tasks/resubscribe) up to RESUBSCRIBE_TRIES times, then poll;
- else send with returnImmediately (0.3: blocking false), so that the upstream task's id is
  known at once and a cancel can reach it, then poll GetTask until the task settles.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, NoReturn, cast

import httpx
from a2a.client import A2AClientTimeoutError, Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
)
from a2a.types import TaskState as Upstream
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError

from outbound import transport

from ...lifecycle import Failure
from . import card as cards
from .config import UpstreamConfig, chosen_interface
from .translate import Action, Failed, Memory, Translator

log = logging.getLogger(__name__)

RESUBSCRIBE_TRIES = 3
POLL_FIRST = 0.1  # seconds before the first GetTask, doubling up to POLL_MAX
POLL_MAX = 1.0
POLL_RETRIES = 3  # GetTask calls in a row that may fail for want of a connection
CANCEL_TIMEOUT = 5.0  # CancelTask may take this long (at most the agent's timeout)
RELEASE_TIMEOUT = 60.0  # a session whose executor never answers ends by itself
REASON_MAX = 500


class Ended:
    """The session has put its last action."""


END = Ended()


class UpstreamFailure(Exception):
    """`reason` for the admin; `public` for our task's client (no URL, no exception text)."""

    def __init__(
        self, reason: str, *, public: str, misconfigured: bool = False, failure: str = Failure.AGENT_ERROR
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.public = public
        self.misconfigured = misconfigured
        self.failure = failure


# What our task's client reads when the upstream's card cannot be used.
CARD_PUBLIC = (
    "the agent is misconfigured: its upstream agent's card could not be fetched or used; its owner must correct it"
)


class _Stopped(Exception):
    """Our task was canceled: stop reading the upstream."""


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _is_drop(exc: BaseException) -> bool:
    """The connection went, not the upstream's will: worth reading the task again."""
    if _cause(exc, transport.Refused) or _cause(exc, transport.TooLarge):
        return False
    return isinstance(exc, A2AClientTimeoutError) or _cause(exc, httpx.TransportError) is not None


def _generator(responses: AsyncIterator[StreamResponse]) -> AsyncGenerator[StreamResponse, None]:
    """The client's streams are async generators (it declares them as iterators): closing one
    when we stop early ends its HTTP response at once, not when it is collected."""
    return cast(AsyncGenerator[StreamResponse, None], responses)


def _clip(text: str) -> str:
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


async def cancel_task(config: UpstreamConfig, task_id: str) -> str:
    """Cancel the upstream's task `task_id` outside any run (ours was canceled while it waited
    for input); what became of it, in words."""
    try:
        card = await cards.fetch(config.card_url, timeout=config.timeout, headers=config.auth)
        chosen = chosen_interface(card, config.protocol)
    except cards.CardProblem as exc:
        return f"the upstream's card cannot be used: {exc}"
    async with transport.guarded_client(timeout=config.timeout, max_body=config.max_body, headers=config.auth) as http:
        factory = ClientFactory(
            ClientConfig(
                streaming=False,
                httpx_client=http,
                supported_protocol_bindings=[chosen.interface.protocol_binding],
                use_client_preference=True,
            )
        )
        client = factory.create(chosen.card)
        try:
            async with asyncio.timeout(min(config.timeout, CANCEL_TIMEOUT)):
                task = await client.cancel_task(CancelTaskRequest(id=task_id))
            return f"the upstream task is {Upstream.Name(task.status.state)}"
        except Exception as exc:  # noqa: BLE001 - ours is canceled whatever the upstream answers
            return f"the upstream did not cancel its task: {type(exc).__name__}: {_clip(str(exc))}"
        finally:
            await client.close()


class Session:
    def __init__(
        self,
        config: UpstreamConfig,
        message: Message,
        memory: Memory,
        *,
        accepted_output_modes: list[str],
        task_id: str,
        extensions: list[str] | None = None,
        extension_metadata: dict[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.message = message
        # What our client activated on this request, passed on: the upstream activates what it
        # supports of it (its A2A-Extensions header) and reads the request's metadata under them.
        self.extensions = list(extensions or [])
        self.extension_metadata = dict(extension_metadata or {})
        self.accepted_output_modes = accepted_output_modes
        self.task_id = task_id  # ours, for the log
        self.translator = Translator(memory)
        self.actions: queue.Queue[Action | Ended] = queue.Queue()
        self.cancel_outcome = ""  # what became of our CancelTask, for the log and the tests
        self._stop = threading.Event()
        self._cancel = threading.Event()  # ... and cancel the upstream task
        self._released = threading.Event()
        self._ended = False
        self._abandoned = False  # the exchange failed while the upstream task may go on
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._work: asyncio.Task[None] | None = None
        self._client: Client | None = None
        self._thread = threading.Thread(target=self._run, name=f"a2a-upstream-{task_id}", daemon=True)

    # --- the executor's side (the worker's thread) -----------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, *, cancel_upstream: bool) -> None:
        """Stop reading the upstream (our task was canceled, or our run is ending before the
        upstream's task did); with `cancel_upstream`, ask the upstream to cancel its task
        (unless it is over already)."""
        if cancel_upstream:
            self._cancel.set()
        self._stop.set()
        self.release()

    def release(self) -> None:
        """The executor is done with the session: it may end."""
        self._released.set()
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._on_release)
            except RuntimeError:  # the loop has closed: the session is over anyway
                pass

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("task %s: the upstream session did not end within %.0f s", self.task_id, timeout)

    @property
    def cancel_wait(self) -> float:
        """How long the executor may wait for the session to cancel the upstream task."""
        return min(self.config.timeout, CANCEL_TIMEOUT) + 1.0

    # --- the session's side (its own thread and loop) --------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - whatever happens, the executor must hear of it
            log.exception("task %s: the upstream session broke", self.task_id)
            self._put(
                Failed(
                    f"the exchange with the upstream agent broke ({type(exc).__name__})",
                    public="the exchange with the upstream agent broke",
                )
            )
        finally:
            self._end()

    def _put(self, action: Action) -> None:
        if not self._ended:
            self.actions.put(action)

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self.actions.put(END)

    async def _main(self) -> None:
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._released.is_set():
            self._on_release()
        config = self.config
        try:
            card = await cards.fetch(config.card_url, timeout=config.timeout, headers=config.auth)
        except cards.CardProblem as exc:
            self._put(Failed(str(exc), misconfigured=True, public=CARD_PUBLIC))
            return
        try:
            chosen = chosen_interface(card, config.protocol)
        except cards.CardProblem as exc:
            self._put(Failed(f"the upstream's card at {config.card_url} {exc}", misconfigured=True, public=CARD_PUBLIC))
            return
        streaming = config.streaming and chosen.streams
        async with transport.guarded_client(
            timeout=config.timeout, max_body=config.max_body, headers=config.auth
        ) as http:
            factory = ClientFactory(
                ClientConfig(
                    streaming=streaming,
                    httpx_client=http,
                    supported_protocol_bindings=[chosen.interface.protocol_binding],
                    use_client_preference=True,
                )
            )
            self._client = factory.create(chosen.card)
            try:
                await self._follow(streaming)
                self._end()
                await self._released_or_timeout()
                if self._cancel.is_set() or self._abandoned:
                    await self._cancel_upstream()
            finally:
                await self._client.close()

    async def _follow(self, streaming: bool) -> None:
        if self._stop.is_set():
            return  # stopped before a word went upstream: none will (a known upstream task is canceled)
        self._work = asyncio.create_task(self._exchange(streaming))
        try:
            await self._work
        except (asyncio.CancelledError, _Stopped):
            if not self._stop.is_set():
                raise
        except UpstreamFailure as exc:
            # Our task fails; an upstream task left behind would work on for no one.
            self._abandoned = True
            self._put(
                Failed(_clip(exc.reason), misconfigured=exc.misconfigured, public=exc.public, failure=exc.failure)
            )

    def _on_release(self) -> None:
        if self._wake is not None:
            self._wake.set()
        if not self._stop.is_set() or self._work is None or self._work.done():
            return
        if self.translator.memory.task_id or not self._cancel.is_set():
            self._work.cancel()
        # Else the upstream has not named its task yet: the exchange stops as soon as it does
        # (_apply), or after the timeout, whichever comes first.
        elif self._loop is not None:
            self._loop.call_later(self.config.timeout, self._work.cancel)

    async def _released_or_timeout(self) -> None:
        assert self._wake is not None
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT):
                await self._wake.wait()
        except TimeoutError:
            log.warning("task %s: the executor never released its upstream session", self.task_id)

    def _apply(self, response: StreamResponse) -> None:
        for action in self.translator.feed(response):
            self._put(action)
        if self._stop.is_set() and (self.translator.memory.task_id or not self._cancel.is_set()):
            raise _Stopped

    async def _exchange(self, streaming: bool) -> None:
        client = self._client
        assert client is not None
        configuration = SendMessageConfiguration(
            accepted_output_modes=self.accepted_output_modes,
            history_length=0,  # the history is ours to keep; the upstream need not send it back
            return_immediately=not streaming,
        )
        request = SendMessageRequest(message=self.message, configuration=configuration)
        context = None
        if self.extensions:
            request.metadata.update(self.extension_metadata)
            parameters = ServiceParametersFactory.create([with_a2a_extensions(self.extensions)])
            context = ClientCallContext(service_parameters=parameters)
        try:
            async with aclosing(_generator(client.send_message(request, context=context))) as responses:
                async for response in responses:
                    self._apply(response)
                    if self.translator.settled:
                        return
        except _Stopped:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure of the upstream becomes a reason
            # A stream that drops after the upstream named its task is read again; before
            # that there is nothing to read again (nor is it known whether the message arrived).
            if not (self.translator.seen_any and self.translator.memory.task_id and _is_drop(exc)):
                self._fail(exc)
            log.info("task %s: the upstream's stream dropped (%s)", self.task_id, self._describe(exc))
        if not self.translator.seen_any:
            said = "the upstream agent ended the exchange without an answer"
            raise UpstreamFailure(said, public=said)
        if self.translator.settled:
            return
        if streaming:
            await self._resubscribe()
        if not self.translator.settled:
            await self._poll()

    async def _resubscribe(self) -> None:
        client = self._client
        assert client is not None
        for attempt in range(RESUBSCRIBE_TRIES):
            await asyncio.sleep(min(0.1 * 2**attempt, 1.0))
            try:
                request = SubscribeToTaskRequest(id=self.translator.memory.task_id)
                async with aclosing(_generator(client.subscribe(request))) as responses:
                    async for response in responses:
                        self._apply(response)
                        if self.translator.settled:
                            return
            except _Stopped:
                raise
            except Exception as exc:  # noqa: BLE001 - a refusal (a task already over...): GetTask tells
                if not _is_drop(exc):
                    log.info("task %s: resubscribing upstream failed (%s)", self.task_id, self._describe(exc))
                    return

    async def _poll(self) -> None:
        client = self._client
        assert client is not None
        delay, failures = POLL_FIRST, 0
        while not self.translator.settled:
            await asyncio.sleep(delay)
            delay = min(delay * 2, POLL_MAX)
            try:
                task = await client.get_task(GetTaskRequest(id=self.translator.memory.task_id, history_length=0))
            except Exception as exc:  # noqa: BLE001 - every failure of the upstream becomes a reason
                failures += 1
                if not _is_drop(exc) or failures > POLL_RETRIES:
                    self._fail(exc)
                continue
            failures = 0
            self._apply(StreamResponse(task=task))

    async def _cancel_upstream(self) -> None:
        task_id = self.translator.memory.task_id
        if not task_id or self.translator.terminal or self._client is None:
            self.cancel_outcome = "nothing to cancel upstream"
            return
        try:
            async with asyncio.timeout(min(self.config.timeout, CANCEL_TIMEOUT)):
                task = await self._client.cancel_task(CancelTaskRequest(id=task_id))
            self.cancel_outcome = f"the upstream task is {Upstream.Name(task.status.state)}"
        except Exception as exc:  # noqa: BLE001 - ours is canceled whatever the upstream answers
            self.cancel_outcome = f"the upstream did not cancel its task: {self._describe(exc)}"
        why = "canceled" if self._cancel.is_set() else "failed"
        log.info("task %s: %s; upstream task %s: %s", self.task_id, why, task_id, self.cancel_outcome)

    # --- reasons -----------------------------------------------------------------------------

    def _fail(self, exc: BaseException) -> NoReturn:
        public, failure = self._public(exc)
        raise UpstreamFailure(
            self._describe(exc),
            public=public,
            failure=failure,
            misconfigured=_cause(exc, transport.Refused) is not None,
        )

    def _public(self, exc: BaseException) -> tuple[str, str]:
        """What our task's client reads, and the failure's kind: what went wrong, never the
        upstream's address, its words or an exception's text (those are `_describe`'s). Not
        `invalid-response`, whose reason a blocking send answers with (InvalidAgentResponse)."""
        if _cause(exc, transport.Refused) is not None:
            return (
                "the agent is misconfigured: its upstream agent's address is not allowed on this server; "
                "its owner must correct it",
                Failure.MISCONFIGURED,
            )
        if _cause(exc, transport.TooLarge) is not None:
            return "the upstream agent's answer is larger than this server reads", Failure.AGENT_ERROR
        if isinstance(exc, A2AClientTimeoutError) or _cause(exc, httpx.TimeoutException) is not None:
            return f"the upstream agent did not answer within {self.config.timeout:g} s", Failure.TIME_LIMIT
        status = _cause(exc, httpx.HTTPStatusError)
        if isinstance(status, httpx.HTTPStatusError):
            code = status.response.status_code
            hint = " (the agent's secret may not match the upstream's)" if code in (401, 403) else ""
            return f"the upstream agent answered HTTP {code}{hint}", Failure.AGENT_ERROR
        if _cause(exc, httpx.TransportError) is not None:
            return "the upstream agent could not be reached", Failure.AGENT_ERROR
        rpc_code = JSON_RPC_ERROR_CODE_MAP.get(type(exc)) if isinstance(exc, A2AError) else None
        if rpc_code is not None:
            return f"the upstream agent answered with error {rpc_code}", Failure.AGENT_ERROR
        if isinstance(exc, A2AError):
            return "the upstream agent answered with an error", Failure.AGENT_ERROR
        return "the upstream agent's answer could not be read", Failure.AGENT_ERROR

    def _describe(self, exc: BaseException) -> str:
        refused = _cause(exc, transport.Refused)
        if refused is not None:
            return f"the upstream's address is refused: {refused}"
        if _cause(exc, transport.TooLarge) is not None:
            return f"the upstream's answer is longer than {self.config.max_body} bytes"
        if isinstance(exc, A2AClientTimeoutError) or _cause(exc, httpx.TimeoutException) is not None:
            return f"the upstream agent did not answer within {self.config.timeout:g} s"
        status = _cause(exc, httpx.HTTPStatusError)
        if isinstance(status, httpx.HTTPStatusError):
            code = status.response.status_code
            hint = " (is the agent's secret right?)" if code in (401, 403) else ""
            return f"the upstream agent answered HTTP {code}{hint}"
        broken = _cause(exc, httpx.TransportError)
        if broken is not None:
            return f"the upstream agent could not be reached ({type(broken).__name__}: {broken})"
        rpc_code = JSON_RPC_ERROR_CODE_MAP.get(type(exc)) if isinstance(exc, A2AError) else None
        if rpc_code is not None:
            return f"the upstream agent answered with error {rpc_code}: {exc}"
        if isinstance(exc, A2AError):
            return f"the upstream agent answered with an error: {exc}"
        return f"the upstream agent's answer could not be read ({type(exc).__name__}: {exc})"
