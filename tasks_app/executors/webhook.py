"""Webhook agents: the agent's logic runs at its tenant's own HTTPS endpoint.

For each run the worker POSTs the run's context (`agentserver.run.v1`: the new message, the
history before it, the ids, the agent's settings, the activated extensions), signed with the
agent's secret by the Standard Webhooks rules, and applies the actions the endpoint answers
with through the same AgentContext verbs a Python executor uses, each as it arrives: an
NDJSON answer streams to the task's clients line by line. Every way the endpoint can
misbehave fails the task with a reason that says what happened and where. The contract, for
the endpoint's authors, is docs/executors.md ("Webhook agents").

    request ──> guard (ssrf) ──> POST, signed ──> 429/502/503/504, no connection: wait, again
                                      │
                                      └─> 2xx: application/x-ndjson: parse, check, apply each line
                                               application/json: parse and check all, apply
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

import orjson
from django.conf import settings
from jsonschema import Draft202012Validator

from accounts import storable
from accounts.services import SECRET_PREFIX
from outbound import client, ssrf

from .. import parts as P
from ..domain import MessageView
from ..errors import InvalidTransition, TaskClosed
from ..lifecycle import Failure
from .base import AgentContext, AgentFailure, Executor, Misconfigured

log = logging.getLogger(__name__)

REQUEST_TYPE = "agentserver.run.v1"
NDJSON = "application/x-ndjson"
JSON = "application/json"
USER_AGENT = "agentserver-webhook/1"
# Answers that say "not now" rather than "no": tried again, like a connection that failed.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
EXCERPT_BYTES = 200  # of an error answer's body, kept in the reason
EXCERPT_PATIENCE = 1.0  # seconds an error answer's body is waited for
DEFAULT_TIMEOUT = 60.0
DEFAULT_IDLE_TIMEOUT = 30.0
DEFAULT_HISTORY_LENGTH = 20
DEFAULT_RETRIES = 2

# --- the actions -------------------------------------------------------------------------

WORKING, ARTIFACT, INPUT_REQUIRED, AUTH_REQUIRED = "working", "artifact", "input-required", "auth-required"
COMPLETE, FAIL, REJECT, REPLY = "complete", "fail", "reject", "reply"
_ARTIFACT_FIELDS = frozenset({"parts", "text", "artifactId", "name", "description", "append", "metadata"})
# The fields each action may carry besides its `type`.
FIELDS: dict[str, frozenset[str]] = {
    WORKING: frozenset({"message"}),
    ARTIFACT: _ARTIFACT_FIELDS | {"lastChunk"},
    INPUT_REQUIRED: frozenset({"message"}),
    AUTH_REQUIRED: frozenset({"message"}),
    COMPLETE: frozenset({"message", "artifact"}),
    FAIL: frozenset({"message"}),
    REJECT: frozenset({"message"}),
    REPLY: frozenset({"message", "metadata"}),
}
# The run is over once one of these is applied: what follows is not read.
SETTLING = frozenset({INPUT_REQUIRED, AUTH_REQUIRED, COMPLETE, FAIL, REJECT, REPLY})
_MESSAGE_REQUIRED = frozenset({INPUT_REQUIRED, AUTH_REQUIRED, FAIL, REJECT, REPLY})
_SETTLERS = "complete, fail, reject, reply, input-required or auth-required"


class ActionError(ValueError):
    """An action that cannot be applied; the message names the field and why."""


@dataclass(frozen=True)
class ArtifactSpec:
    parts: list[P.Part]
    artifact_id: str | None = None
    name: str = ""
    description: str = ""
    append: bool = False
    last_chunk: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Action:
    type: str
    message: list[P.Part] | None = None
    artifact: ArtifactSpec | None = None
    metadata: dict[str, Any] | None = None

    @property
    def settles(self) -> bool:
        return self.type in SETTLING


_JSON_TYPES = {
    bool: "a boolean",
    str: "a string",
    int: "a number",
    float: "a number",
    list: "a list",
    dict: "an object",
}


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def _string(value: Any, where: str, *, max_length: int | None = None) -> str:
    if not isinstance(value, str):
        raise ActionError(f"{where} must be a string, not {_json_type(value)}")
    if max_length is not None:
        try:
            storable.check_text(value, where=where, max_length=max_length)
        except storable.Refused as exc:
            raise ActionError(str(exc)) from None
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ActionError(f"{where} must be true or false, not {_json_type(value)}")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ActionError(f"{where} must be an object, not {_json_type(value)}")
    return value


def _parts(value: Any, where: str) -> list[P.Part]:
    try:
        return P.validate_all(value, where=where)
    except storable.Refused as exc:
        raise ActionError(str(exc)) from None


def _content(holder: dict[str, Any], where: str) -> list[P.Part]:
    """`text` (one text part) or `parts` (canonical parts), exactly one of them."""
    has_text, has_parts = "text" in holder, "parts" in holder
    if has_text == has_parts:
        raise ActionError(f"{where} needs exactly one of text or parts")
    if has_text:
        return [P.text(_string(holder["text"], f"{where}.text"))]
    return _parts(holder["parts"], f"{where}.parts")


def _message(value: Any, where: str) -> list[P.Part]:
    """A message: a string, or an object with `text` or `parts`."""
    if isinstance(value, str):
        return [P.text(value)]
    holder = _object(value, where)
    unknown = sorted(set(holder) - {"text", "parts"})
    if unknown:
        raise ActionError(f"{where} has an unknown field {storable.brief(unknown[0])}")
    return _content(holder, where)


def _artifact(value: dict[str, Any], where: str, *, last_chunk: bool | None) -> ArtifactSpec:
    artifact_id = None
    if "artifactId" in value:
        artifact_id = _string(value["artifactId"], f"{where}.artifactId", max_length=storable.ID_LENGTH)
        if not artifact_id:
            raise ActionError(f"{where}.artifactId must not be empty")
    append = _flag(value["append"], f"{where}.append") if "append" in value else False
    if append and artifact_id is None:
        raise ActionError(f"{where}.append needs the artifactId of the artifact to add to")
    return ArtifactSpec(
        parts=_content(value, where),
        artifact_id=artifact_id,
        name=_string(value.get("name", ""), f"{where}.name", max_length=storable.NAME_LENGTH),
        description=_string(value.get("description", ""), f"{where}.description"),
        append=append,
        last_chunk=last_chunk if last_chunk is not None else _flag(value.get("lastChunk", False), f"{where}.lastChunk"),
        metadata=_object(value.get("metadata", {}), f"{where}.metadata"),
    )


def parse_action(value: Any) -> Action:
    """One action as the endpoint sent it (parsed JSON), checked field by field: ActionError
    names the first field that is wrong."""
    if not isinstance(value, dict):
        raise ActionError(f"an action must be a JSON object, not {_json_type(value)}")
    kind = value.get("type")
    if kind is None:
        raise ActionError("the action has no type")
    if not isinstance(kind, str) or kind not in FIELDS:
        raise ActionError(f"unknown action type {storable.brief(kind)} (known: {', '.join(FIELDS)})")
    unknown = sorted(set(value) - FIELDS[kind] - {"type"})
    if unknown:
        raise ActionError(f"{kind} has an unknown field {storable.brief(unknown[0])}")
    try:
        storable.check(value, where=kind)
    except storable.Refused as exc:
        raise ActionError(str(exc)) from None
    message = None
    if "message" in value:
        message = _message(value["message"], f"{kind}.message")
        if kind in _MESSAGE_REQUIRED and not message:
            raise ActionError(f"{kind}.message has no parts")
    elif kind in _MESSAGE_REQUIRED:
        raise ActionError(f"{kind} needs a message")
    if kind == ARTIFACT:
        return Action(kind, artifact=_artifact(value, kind, last_chunk=None))
    artifact = None
    if kind == COMPLETE and "artifact" in value:
        holder = _object(value["artifact"], "complete.artifact")
        unknown = sorted(set(holder) - _ARTIFACT_FIELDS)
        if unknown:
            raise ActionError(f"complete.artifact has an unknown field {storable.brief(unknown[0])}")
        artifact = _artifact(holder, "complete.artifact", last_chunk=True)
    metadata = _object(value["metadata"], f"{kind}.metadata") if "metadata" in value else None
    return Action(kind, message=message, artifact=artifact, metadata=metadata)


def apply(ctx: AgentContext, action: Action) -> None:
    """The action through the verb a Python executor would call."""
    kind, message, artifact = action.type, action.message, action.artifact
    if kind == WORKING:
        ctx.working(message)
    elif kind == ARTIFACT:
        assert artifact is not None
        ctx.artifact(
            artifact.parts,
            artifact_id=artifact.artifact_id,
            name=artifact.name,
            description=artifact.description,
            append=artifact.append,
            last_chunk=artifact.last_chunk,
            metadata=artifact.metadata,
        )
    elif kind == INPUT_REQUIRED:
        ctx.require_input(message)
    elif kind == AUTH_REQUIRED:
        ctx.require_auth(message)
    elif kind == COMPLETE:
        if artifact is None:
            ctx.complete(message)
        else:
            ctx.complete(
                message,
                artifact=artifact.parts,
                artifact_id=artifact.artifact_id,
                name=artifact.name,
                description=artifact.description,
                append=artifact.append,
                metadata=artifact.metadata,
            )
    elif kind == FAIL:
        ctx.fail(message)
    elif kind == REJECT:
        ctx.reject(message)
    elif kind == REPLY:
        ctx.reply(message, metadata=action.metadata)
    else:  # pragma: no cover - parse_action knows no other
        raise AssertionError(kind)


# --- the request -------------------------------------------------------------------------


def signing_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: base64 after `whsec_`."""
    if not secret:
        raise Misconfigured(
            "it has no secret to sign its webhook requests with: set one (Standard Webhooks form, whsec_ and base64)",
            public=_MISCONFIGURED_NO_SECRET,
        )
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not key:
        raise Misconfigured(
            "its secret is not a Standard Webhooks secret (whsec_ followed by base64): set it again",
            public=_MISCONFIGURED_SECRET,
        )
    return key


def sign(key: bytes, *, msg_id: str, timestamp: int, body: bytes) -> str:
    """`webhook-signature`: v1 and the base64 HMAC-SHA256 of "{id}.{timestamp}.{body}"."""
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(key: bytes, *, msg_id: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    timestamp = int(time.time()) if timestamp is None else timestamp
    return {
        "Content-Type": JSON,
        "Accept": f"{NDJSON}, {JSON}",
        "User-Agent": USER_AGENT,
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(key, msg_id=msg_id, timestamp=timestamp, body=body),
    }


def _wire_message(message: MessageView) -> dict[str, Any]:
    return {"messageId": message.message_id, "role": message.role, "parts": message.parts, "metadata": message.metadata}


def request_body(ctx: AgentContext, *, history_length: int) -> bytes:
    earlier = [m for m in ctx.history if m is not ctx.message]
    history = earlier[-history_length:] if history_length else []
    return orjson.dumps(
        {
            "type": REQUEST_TYPE,
            "taskId": ctx.task_id,
            "contextId": ctx.context_id,
            "message": _wire_message(ctx.message),
            "history": [_wire_message(m) for m in history],
            "settings": ctx.settings,
            "extensions": ctx.extensions,
            "acceptedOutputModes": ctx.accepted_output_modes,
        }
    )


# --- the settings ------------------------------------------------------------------------

SETTINGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url"],
    "properties": {
        "url": {
            "type": "string",
            "minLength": 1,
            "maxLength": storable.URL_LENGTH,
            "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://",
            "description": "the endpoint: https (http only where the server sets WEBHOOK_ALLOW_HTTP), "
            "a public address (or one the server's OUTBOUND_ALLOW_NETS names)",
        },
        "timeout": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": DEFAULT_TIMEOUT,
            "description": "seconds a run may take in all, retries included (at most the server's "
            "AGENT_SOFT_TIME_LIMIT less a second)",
        },
        "idle_timeout": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": DEFAULT_IDLE_TIMEOUT,
            "description": "seconds without a byte from the endpoint (connecting, before its answer, "
            "between lines) after which the run fails",
        },
        "history_length": {
            "type": "integer",
            "minimum": 0,
            "maximum": 1000,
            "default": DEFAULT_HISTORY_LENGTH,
            "description": "how many of the task's earlier messages each request carries (the newest)",
        },
        "max_response_bytes": {
            "type": "integer",
            "minimum": 1,
            "description": "the longest answer read (default and at most the server's WEBHOOK_RESPONSE_MAX_BYTES)",
        },
        "retries": {
            "type": "integer",
            "minimum": 0,
            "maximum": 10,
            "default": DEFAULT_RETRIES,
            "description": "further attempts when the endpoint cannot be reached or answers 429, 502, 503 or 504",
        },
        "config": {
            "type": "object",
            "description": "anything the endpoint wants to know about this agent: sent with the settings",
        },
    },
}
_VALIDATOR = Draft202012Validator(SETTINGS_SCHEMA)

# How a run waits between attempts (tests replace it to act at that moment).
_sleep = time.sleep


def run_limit() -> float:
    """The longest a run may take: the soft time limit, less a second to record the outcome
    (so the task fails with the endpoint's reason, not the worker's limit)."""
    return max(float(settings.AGENT_SOFT_TIME_LIMIT) - 1.0, 0.5)


def _scheme_problem(url: str) -> str | None:
    if urlsplit(url).scheme.lower() == "http" and not settings.WEBHOOK_ALLOW_HTTP:
        return "must use https (this server sends plain http only with WEBHOOK_ALLOW_HTTP set)"
    return None


@dataclass(frozen=True)
class Plan:
    """The agent's settings as a run applies them: defaults filled in, capped by the server's."""

    url: str
    endpoint: str  # host:port, to name it in reasons
    timeout: float
    timeout_capped: bool
    idle_timeout: float
    history_length: int
    max_response_bytes: int
    max_line_bytes: int
    retries: int

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Plan:
        error = next(iter(sorted(_VALIDATOR.iter_errors(raw), key=lambda e: list(map(str, e.absolute_path)))), None)
        if error is not None:
            where = "".join(f"[{p!r}]" for p in error.absolute_path)
            raise Misconfigured(f"its settings{where} do not fit the webhook executor: {error.message[:200]}")
        url = raw["url"]
        problem = _scheme_problem(url)
        if problem:
            raise Misconfigured(f"its webhook url {problem}", public=_MISCONFIGURED_URL)
        limit = run_limit()
        wanted = float(raw.get("timeout", DEFAULT_TIMEOUT))
        timeout = min(wanted, limit)
        cap = _response_cap()
        max_bytes = min(int(raw.get("max_response_bytes", cap)), cap)
        try:
            parts = urlsplit(url)
            host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
            endpoint = f"{host}:{parts.port or (443 if parts.scheme.lower() == 'https' else 80)}"
        except ValueError:
            endpoint = "its url"
        return cls(
            url=url,
            endpoint=endpoint,
            timeout=timeout,
            timeout_capped=timeout < wanted,
            idle_timeout=min(float(raw.get("idle_timeout", DEFAULT_IDLE_TIMEOUT)), timeout),
            history_length=int(raw.get("history_length", DEFAULT_HISTORY_LENGTH)),
            max_response_bytes=max_bytes,
            max_line_bytes=min(settings.WEBHOOK_LINE_MAX_BYTES, max_bytes),
            retries=int(raw.get("retries", DEFAULT_RETRIES)),
        )


def _response_cap() -> int:
    return int(settings.WEBHOOK_RESPONSE_MAX_BYTES)


# --- a run -------------------------------------------------------------------------------

# What the task's client reads when a run fails (its status message; docs/executors.md, "What a
# client sees when a run fails"): what happened, never the endpoint's address or its words.
_UNREACHABLE = "the agent's endpoint could not be reached"
_MISCONFIGURED_NO_SECRET = "the agent is misconfigured: it has no webhook secret; its owner must set one"
_MISCONFIGURED_SECRET = "the agent is misconfigured: its webhook secret is not valid; its owner must set it again"
_MISCONFIGURED_URL = "the agent is misconfigured: its endpoint must use https on this server; its owner must correct it"
_MISCONFIGURED_ADDRESS = (
    "the agent is misconfigured: its endpoint's address is not allowed on this server; its owner must correct it"
)


class _Undelivered(Exception):
    """This attempt did not reach the endpoint's logic (no connection, dropped before an
    answer, an answer that says "later"): the run may try again."""

    def __init__(self, reason: str, *, public: str = "", retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.public = public or _UNREACHABLE
        self.retry_after = retry_after


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escaped(raw: bytes) -> str:
    """An excerpt of what the endpoint sent, safe to store and show on one line: decoded
    leniently, control characters escaped, cut to EXCERPT_BYTES."""
    text = raw[:EXCERPT_BYTES].decode("utf-8", errors="replace")
    shown = _CONTROL.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}", text
    )
    return shown + ("…" if len(raw) > EXCERPT_BYTES else "")


def _json_problem(exc: storable.Malformed) -> str:
    # One line of NDJSON is one line of JSON: its column is all that locates the problem.
    return str(exc).replace(" at line 1 column ", " at column ")


class _Run:
    def __init__(self, ctx: AgentContext, plan: Plan, key: bytes) -> None:
        self.ctx = ctx
        self.plan = plan
        self.key = key
        self.body = request_body(ctx, history_length=plan.history_length)
        self.msg_id = str(ctx.run_token or ctx.task_id)  # the same for every attempt of this run
        self.applied = 0
        self.deadline = time.monotonic() + plan.timeout

    def fail(self, reason: str, public: str, failure: str = Failure.AGENT_ERROR) -> AgentFailure:
        """The run fails: `reason` for the admin (it names the endpoint), `public` for the
        task's client (what happened, never where)."""
        return AgentFailure(reason, failure=failure, public=public)

    def invalid(self, reason: str, public: str) -> AgentFailure:
        return self.fail(
            reason, f"the agent's endpoint sent an answer this server cannot use: {public}", Failure.INVALID_RESPONSE
        )

    def go(self) -> None:
        attempts = self.plan.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                self.attempt()
                return
            except _Undelivered as exc:
                if self.applied:  # pragma: no cover - undelivered means nothing was read
                    raise self.fail(str(exc), exc.public) from None
                log.info("task %s: webhook attempt %d of %d: %s", self.ctx.task_id, attempt, attempts, exc)
                if attempt == attempts:
                    tries = f"{attempts} attempts" if attempts > 1 else "1 attempt, retries 0"
                    raise self.fail(f"{exc} ({tries})", f"{exc.public} ({tries})") from None
                wait = self.backoff(attempt, exc.retry_after)
                if time.monotonic() + wait >= self.deadline:
                    left = f"no time left for another within the run's timeout of {self.plan.timeout:g} s"
                    raise self.fail(
                        f"{exc} (attempt {attempt} of {attempts}; {left})",
                        f"{exc.public} (attempt {attempt} of {attempts}; {left})",
                    ) from None
                _sleep(wait)
                self.check_cancelled()

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        return client.backoff(
            attempt,
            base=settings.WEBHOOK_RETRY_BACKOFF,
            retry_after=retry_after,
            retry_after_max=settings.WEBHOOK_RETRY_AFTER_MAX,
        )

    def check_cancelled(self) -> None:
        if self.ctx.cancelled:
            raise TaskClosed(f"task {self.ctx.task_id} was closed while its webhook endpoint answered")

    def attempt(self) -> None:
        where = self.plan.endpoint
        try:
            destination = ssrf.check(self.plan.url)
        except ssrf.Refused as exc:
            raise Misconfigured(f"its webhook url is refused: {exc}", public=_MISCONFIGURED_ADDRESS) from None
        except ssrf.Unresolved as exc:
            raise _Undelivered(f"the webhook endpoint could not be reached: {exc}") from None
        assert destination is not None  # without unresolvable_ok a name that does not resolve raises
        headers = signed_headers(self.key, msg_id=self.msg_id, body=self.body)
        try:
            with client.post_streamed(
                destination,
                body=self.body,
                headers=headers,
                timeout=max(self.deadline - time.monotonic(), 0.001),
                idle_timeout=self.plan.idle_timeout,
                max_body=self.plan.max_response_bytes,
                while_waiting=self.check_cancelled,
                wait_check_every=settings.WEBHOOK_CANCEL_CHECK_EVERY,
            ) as answer:
                self.answer(answer)
        except (client.ConnectFailed, client.Dropped) as exc:
            raise _Undelivered(f"the webhook endpoint at {where} could not be reached: {exc}") from None
        except client.TlsFailed as exc:
            raise self.fail(
                f"the webhook endpoint at {where} failed the TLS handshake: {exc}",
                "the agent's endpoint failed the TLS handshake (its certificate or TLS setup); its owner must fix it",
            ) from None
        except client.TimedOut as exc:
            raise self.fail(self.timed_out(exc), self.timed_out_public(exc), Failure.TIME_LIMIT) from None
        except client.TooLarge as exc:
            what = f"a line longer than {exc.limit} bytes" if exc.line else f"more than {exc.limit} bytes"
            raise self.invalid(
                f"the webhook endpoint's answer is too large: {what}{self.so_far()}", f"it is too large: {what}"
            ) from None
        except client.Broken as exc:
            raise self.fail(
                f"the webhook endpoint at {where} failed: {exc}{self.so_far()}",
                f"the agent's endpoint broke off its answer{self.so_far()}",
            ) from None
        except client.SendError as exc:
            raise self.fail(
                f"the request to the webhook endpoint at {where} failed: {exc}",
                "the request to the agent's endpoint failed",
            ) from None

    def so_far(self) -> str:
        return f" (after {self.applied} applied action{'s' if self.applied != 1 else ''})" if self.applied else ""

    def timed_out(self, exc: client.TimedOut) -> str:
        where = self.plan.endpoint
        if exc.which == "total":
            capped = " (capped by the server's AGENT_SOFT_TIME_LIMIT)" if self.plan.timeout_capped else ""
            return (
                f"the webhook endpoint at {where} did not finish within the run's timeout of "
                f"{self.plan.timeout:g} s{capped}{self.so_far()}"
            )
        waiting = "while streaming its answer" if exc.answered else "waiting for its answer"
        return (
            f"the webhook endpoint at {where} sent nothing for {self.plan.idle_timeout:g} s (its idle_timeout) "
            f"{waiting}{self.so_far()}"
        )

    def timed_out_public(self, exc: client.TimedOut) -> str:
        if exc.which == "total":
            return f"the agent did not finish within {self.plan.timeout:g} s{self.so_far()}"
        waiting = "while streaming its answer" if exc.answered else "waiting for its answer"
        return f"the agent's endpoint sent nothing for {self.plan.idle_timeout:g} s {waiting}{self.so_far()}"

    def answer(self, answer: client.Streamed) -> None:
        where, status = self.plan.endpoint, answer.status
        if not 200 <= status < 300:
            excerpt = _escaped(answer.excerpt(limit=EXCERPT_BYTES + 1, patience=EXCERPT_PATIENCE))
            said = f": {excerpt}" if excerpt.strip() else ""
            if status in RETRY_STATUSES:
                retry_after = client.retry_after_seconds(answer.headers.get("retry-after"))
                raise _Undelivered(
                    f"the webhook endpoint at {where} answered HTTP {status}{said}",
                    public=f"the agent's endpoint answered HTTP {status}",
                    retry_after=retry_after,
                )
            if 300 <= status < 400:
                location = storable.brief(answer.headers.get("location", ""), 120)
                raise self.fail(
                    f"the webhook endpoint at {where} answered HTTP {status}, a redirect (to {location}), which is "
                    "not followed: set the agent's url to where it points",
                    f"the agent's endpoint answered HTTP {status}, a redirect, which is not followed",
                )
            hint = " (the agent's secret may not match its endpoint's)" if status in (401, 403) else ""
            raise self.fail(
                f"the webhook endpoint at {where} answered HTTP {status}{said}",
                f"the agent's endpoint answered HTTP {status}{hint}",
            )
        encoding = answer.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise self.invalid(
                f"the webhook endpoint's answer is compressed ({storable.brief(encoding)}), unasked",
                "it is compressed, unasked",
            )
        content_type = answer.headers.get("content-type", "")
        media_type = content_type.split(";", 1)[0].strip().lower()
        if media_type == NDJSON:
            self.stream(answer)
        elif media_type == JSON:
            self.document(answer)
        elif status == 204 or (not content_type and not answer.read()):
            self.unsettled()
        else:
            shown = storable.brief(content_type) if content_type else "no Content-Type"
            raise self.invalid(
                f"the webhook endpoint answered with {shown}, not {NDJSON} or {JSON}",
                f"its content type is not {NDJSON} or {JSON}",
            )

    def stream(self, answer: client.Streamed) -> None:
        """NDJSON: each line applied the moment it arrives."""
        for number, line in enumerate(answer.lines(max_line=self.plan.max_line_bytes), start=1):
            if not line.strip():  # a keep-alive
                continue
            where = f"line {number}"
            try:
                action = parse_action(storable.loads(line))
            except storable.Malformed as exc:
                raise self.invalid(
                    f"the webhook endpoint's answer, {where}, is not valid JSON: {_json_problem(exc)}",
                    f"{where} is not valid JSON",
                ) from None
            except ActionError as exc:
                raise self.invalid(
                    f"the webhook endpoint's answer, {where}: {exc}", f"{where} is not a valid action"
                ) from None
            self.apply(action, where)
            if action.settles:
                return
        self.unsettled()

    def document(self, answer: client.Streamed) -> None:
        """JSON: the whole list checked first, so a bad action leaves nothing half done."""
        try:
            value = storable.loads(answer.read())
        except storable.Malformed as exc:
            raise self.invalid(
                f"the webhook endpoint's answer is not valid JSON: {exc}", "it is not valid JSON"
            ) from None
        if isinstance(value, dict) and set(value) == {"actions"}:
            value = value["actions"]
        if not isinstance(value, list):
            raise self.invalid(
                'the webhook endpoint\'s JSON answer must be a list of actions or {"actions": [...]}, '
                f"not {_json_type(value)}" + (f" with the members {storable.brief(sorted(value))}" if value else ""),
                "its JSON answer is not a list of actions",
            )
        actions = []
        for number, item in enumerate(value, start=1):
            try:
                actions.append(parse_action(item))
            except ActionError as exc:
                raise self.invalid(
                    f"the webhook endpoint's answer, action {number}: {exc}", f"action {number} is not a valid action"
                ) from None
        for number, action in enumerate(actions, start=1):
            self.apply(action, f"action {number}")
            if action.settles:
                if number < len(actions):
                    log.warning(
                        "task %s: the webhook endpoint's actions after its settling action %d (%s) were ignored",
                        self.ctx.task_id,
                        number,
                        action.type,
                    )
                return
        self.unsettled()

    def apply(self, action: Action, where: str) -> None:
        if action.type in (INPUT_REQUIRED, AUTH_REQUIRED) and STATE_KEY not in self.ctx.state:
            # The task will wait with no request open: should it be canceled then, the endpoint
            # is sent a cancel notice (canceled_while_idle, asked only of an executor that kept
            # state on the task). Once per task, before the wait begins (a run may save state
            # only while it holds it).
            self.ctx.state[STATE_KEY] = {"waited": True}
            self.ctx.save_state()
        try:
            apply(self.ctx, action)
        except (InvalidTransition, storable.Refused) as exc:
            raise self.invalid(
                f"the webhook endpoint's answer, {where} ({action.type}), could not be applied: {exc}",
                f"{where} ({action.type}) could not be applied to the task",
            ) from None
        self.applied += 1

    def unsettled(self) -> None:
        count = f"{self.applied} action{'s' if self.applied != 1 else ''}"
        raise self.invalid(
            f"the webhook endpoint's answer ended after {count} without settling the task ({_SETTLERS})",
            f"it ended after {count} without settling the task ({_SETTLERS})",
        )


class WebhookExecutor(Executor):
    """The agent's logic at its tenant's endpoint: see the module's docstring and
    docs/executors.md ("Webhook agents")."""

    name = "webhook"
    description = "Runs at the tenant's own HTTPS endpoint: a signed request per run, actions streamed back."
    # A run cut off midway is not sent again: the endpoint may have acted on it already, and
    # a fresh run would come under a new webhook-id that its deduplication cannot recognise.
    rerunnable = False
    secret_required = True  # every request is signed with the agent's secret: none, no save
    settings_schema: ClassVar[dict[str, Any]] = SETTINGS_SCHEMA

    @classmethod
    def settings_problems(cls, values: dict[str, Any]) -> list[str]:
        problems = []
        url = values["url"]
        problem = _scheme_problem(url)
        if problem:
            problems.append(f"settings['url']: {problem}")
        try:
            ssrf.check(url, unresolvable_ok=True)  # a name that does not resolve yet is checked at each run
        except ssrf.Refused as exc:
            problems.append(f"settings['url']: {exc}")
        limit = run_limit()
        if values.get("timeout", 0) > limit:
            problems.append(
                f"settings['timeout']: {values['timeout']} is more than this server gives a run ({limit:g} s: "
                "AGENT_SOFT_TIME_LIMIT less a second to record the outcome)"
            )
        if values.get("max_response_bytes", 0) > _response_cap():
            problems.append(
                f"settings['max_response_bytes']: {values['max_response_bytes']} is more than this server "
                f"reads ({_response_cap()}, WEBHOOK_RESPONSE_MAX_BYTES)"
            )
        return problems

    def execute(self, ctx: AgentContext) -> None:
        plan = Plan.of(ctx.settings)
        _Run(ctx, plan, signing_key(ctx.secret)).go()

    def canceled_while_idle(
        self, *, task_id: str, context_id: str, settings: dict[str, Any], secret: str, state: dict[str, Any]
    ) -> str:
        """The task was canceled while it waited (no request open): the endpoint, which asked
        for input and may hold something for the task, is sent a signed cancel notice."""
        if STATE_KEY not in state:
            return "the endpoint never left the task waiting: nothing to tell it"
        return send_cancel_notice(Plan.of(settings), signing_key(secret), task_id=task_id, context_id=context_id)


# --- the cancel notice -------------------------------------------------------------------

CANCEL_NOTICE_TYPE = "agentserver.task.canceled.v1"
STATE_KEY = "webhook"  # in the task's executor state: the endpoint left the task waiting once
NOTICE_ANSWER_MAX_BYTES = 1024  # of the endpoint's answer to a notice, read and ignored


def cancel_notice_id(task_id: str) -> str:
    """The notice's webhook-id: one per task, the same at every attempt and every repeat of
    the job that sends it, so that the endpoint's deduplication sees one notice."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"agentserver:{CANCEL_NOTICE_TYPE}:{task_id}"))


def cancel_notice_body(*, task_id: str, context_id: str, at: datetime | None = None) -> bytes:
    at = at or datetime.now(UTC)
    return orjson.dumps(
        {
            "type": CANCEL_NOTICE_TYPE,
            "taskId": task_id,
            "contextId": context_id,
            "timestamp": at.isoformat().replace("+00:00", "Z"),
        }
    )


def send_cancel_notice(plan: Plan, key: bytes, *, task_id: str, context_id: str) -> str:
    """POST the notice, signed as a run's request, retried as one (the agent's `retries`, the
    server's backoff, all within the agent's `timeout`); what became of it, for the log.
    Nothing the endpoint answers changes the task: it is canceled whatever happens here."""
    body = cancel_notice_body(task_id=task_id, context_id=context_id)
    msg_id = cancel_notice_id(task_id)
    deadline = time.monotonic() + plan.timeout
    attempts = plan.retries + 1
    outcome = ""
    for attempt in range(1, attempts + 1):
        retry_after = None
        try:
            destination = ssrf.check(plan.url)
        except ssrf.Refused as exc:
            return f"not sent: the webhook url is refused: {exc}"
        except ssrf.Unresolved as exc:
            outcome = f"the endpoint could not be reached: {exc}"
        else:
            assert destination is not None
            try:
                answer = client.post(
                    destination,
                    body=body,
                    headers=signed_headers(key, msg_id=msg_id, body=body),
                    timeout=max(min(plan.idle_timeout, deadline - time.monotonic()), 0.001),
                    max_body=NOTICE_ANSWER_MAX_BYTES,
                )
            except client.SendError as exc:
                outcome = f"the endpoint could not be reached: {exc}"
            else:
                if 200 <= answer.status < 300:
                    return f"the endpoint took the cancel notice (HTTP {answer.status}, attempt {attempt})"
                outcome = f"the endpoint answered HTTP {answer.status}"
                if answer.status not in RETRY_STATUSES:
                    return f"{outcome} to the cancel notice (not retried)"
                retry_after = client.retry_after_seconds(answer.headers.get("retry-after"))
        log.info("task %s: cancel notice attempt %d of %d: %s", task_id, attempt, attempts, outcome)
        if attempt == attempts:
            break
        wait = client.backoff(
            attempt,
            base=settings.WEBHOOK_RETRY_BACKOFF,
            retry_after=retry_after,
            retry_after_max=settings.WEBHOOK_RETRY_AFTER_MAX,
        )
        if time.monotonic() + wait >= deadline:
            return f"{outcome} (attempt {attempt} of {attempts}; no time left within the agent's timeout)"
        _sleep(wait)
    return f"{outcome} ({attempts} attempts)"
