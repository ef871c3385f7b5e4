"""The directory's own conformance checks of an approved entry: a few safe questions put to
each interface its approved card declares, and what came back.

Safe means nothing sent could act on the world, whatever the agent does with it: the card read
again; a get of a task id made up for the run (no agent has it); a request that is not JSON at
all; and, for each capability the card says it lacks (streaming, push notifications, an
extended card), the read that capability would answer (subscribe to, or read the push config
of, the made-up task; fetch the extended card). Never a message, never a cancel, never a config
set. Every request goes through the address guard (outbound.ssrf) with no redirect followed,
REGISTRY_CONFORMANCE_TIMEOUT seconds per connect and per read, at most MAX_BODY bytes of the
answer read, and the run stops asking when REGISTRY_CONFORMANCE_BUDGET seconds are spent.

Checked: the JSON-RPC binding of A2A 1.0, 0.3 and 0.1, the HTTP+JSON binding of A2A 1.0 (no
malformed-request check there: the only routes that read a body are writes), and its gRPC
binding (registry.conformance_grpc); of an ACS card (ACPs AIP), its JSON-RPC endpoints (a
Leader's `get` of a made-up task, and the malformed request). Other bindings (AMQP, AIP's HTTP
form) get one `interface` result, skipped, saying so.
An endpoint that answers 401/403 wants credentials the directory does not have: skipped, not
failed. docs/registry.md says what a result promises (those answers, at that time) and what it
does not (anything of how the agent does its work).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from outbound import client, ssrf

from . import attestations, cards, conformance_grpc
from .models import Attestation, ConformanceResult, Entry, Outcome, State
from .probe import _ascii_url
from .proofs import no_answer_reason

MAX_BODY = 16 * 1024
MAX_INTERFACES = 4
USER_AGENT = "agentserver-registry (conformance check)"
CHECKS = ("card", "interface", "unknown_task", "malformed", "denied_streaming", "denied_push", "denied_extended_card")

TASK_NOT_FOUND = -32001
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
EXTENDED_CARD_NOT_CONFIGURED = -32007
PARSE_ERROR = -32700
INVALID_REQUEST = -32600

# Per dialect: the JSON-RPC method of each question (None: the dialect has no such method).
METHODS: dict[str, dict[str, str | None]] = {
    "1.0": {
        "get": "GetTask",
        "subscribe": "SubscribeToTask",
        "push_get": "GetTaskPushNotificationConfig",
        "extended": "GetExtendedAgentCard",
    },
    "0.3": {
        "get": "tasks/get",
        "subscribe": "tasks/resubscribe",
        "push_get": "tasks/pushNotificationConfig/get",
        "extended": "agent/getAuthenticatedExtendedCard",
    },
    "0.1": {
        "get": "tasks/get",
        "subscribe": "tasks/resubscribe",
        "push_get": "tasks/pushNotification/get",
        "extended": None,
    },
}


@dataclass(frozen=True)
class Result:
    name: str
    dialect: str
    binding: str
    url: str
    outcome: str
    detail: str


class _Budget:
    """The run's time left: each request gets at most half of it (a request's own deadline is
    twice its timeout, outbound.client)."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def timeout(self) -> float | None:
        left = self.deadline - time.monotonic()
        if left < 0.2:
            return None
        return min(float(settings.REGISTRY_CONFORMANCE_TIMEOUT), left / 2)


@dataclass(frozen=True)
class _Answer:
    status: int
    content_type: str
    body: bytes
    truncated: bool


def _send(
    method: str, url: str, *, budget: _Budget, body: bytes | None = None, headers: dict[str, str] | None = None
) -> _Answer | str:
    """One request through the guard; the answer, or why there was none (a sentence)."""
    timeout = budget.timeout()
    if timeout is None:
        return "not run: the run's time budget was spent"
    try:
        destination = ssrf.check(_ascii_url(url))
    except ValueError as exc:
        return f"refused: the URL is not usable: {exc}"
    except ssrf.Refused as exc:
        return f"not run: refused by the address guard: {exc}"
    except ssrf.Unresolved as exc:
        return f"no answer: {exc}"
    assert destination is not None
    sent = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
    try:
        if method == "POST":
            response = client.post(
                destination,
                body=body or b"",
                headers={"Content-Type": "application/json", **sent},
                timeout=timeout,
                max_body=MAX_BODY,
            )
        else:
            response = client.get(destination, headers=sent, timeout=timeout, max_body=MAX_BODY)
    except client.SendError as exc:
        return f"no answer: {no_answer_reason(str(exc))} ({exc})"
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return _Answer(response.status, content_type, response.body, response.truncated)


def _skipped_for(answer: _Answer | str) -> str | None:
    """Why an answer says nothing either way, else None: not run (the budget was spent, or the
    guard forbids the address: this server may not reach it, which says nothing of the agent),
    or credentials wanted."""
    if isinstance(answer, str):
        return answer if answer.startswith("not run") else None
    if answer.status in (401, 403):
        return (
            f"answered {answer.status}: the endpoint wants credentials, which the directory does not send, "
            "so the answer says nothing of the check"
        )
    return None


# --- JSON-RPC -------------------------------------------------------------------------------


def _jsonrpc_verdict(answer: _Answer | str, *, expected: tuple[int, ...], request_id: str | None) -> tuple[str, str]:
    skipped = _skipped_for(answer)
    if skipped is not None:
        return Outcome.SKIPPED, skipped
    if isinstance(answer, str):
        return Outcome.FAILED, answer
    want = " or ".join(str(c) for c in expected)
    if answer.status >= 500:
        return Outcome.FAILED, f"answered {answer.status}, a server error, where a JSON-RPC error {want} was due"
    streamed = answer.content_type == "text/event-stream"
    body = _first_event(answer.body) if streamed else answer.body
    if streamed and body is None:
        return Outcome.FAILED, f"answered with an event stream holding no event where a JSON-RPC error {want} was due"
    try:
        reply = orjson.loads(body or b"")
    except orjson.JSONDecodeError:
        cut = " (cut at the size limit)" if answer.truncated else ""
        where = "an event stream whose first event is" if streamed else f"{answer.status} with a body that is"
        return Outcome.FAILED, f"answered {where} not JSON{cut}"
    if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0":
        return Outcome.FAILED, f"answered {answer.status} with JSON that is not a JSON-RPC 2.0 response"
    if "result" in reply and "error" not in reply:
        kind = "a stream of results" if streamed else "a result"
        return Outcome.FAILED, f"answered {kind} where a JSON-RPC error {want} was due"
    error = reply.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    if not isinstance(code, int) or isinstance(code, bool):
        return Outcome.FAILED, "answered a JSON-RPC response with no error code"
    message = error.get("message") if isinstance(error, dict) else ""
    said = f"error {code}" + (f" ({str(message)[:120]})" if message else "")
    if code not in expected:
        return Outcome.FAILED, f"answered {said}, not {want}"
    if request_id is not None and reply.get("id") != request_id:
        return Outcome.FAILED, f"answered {said}, but with another id than the request's"
    return Outcome.PASSED, f"answered {said}" + (" in an event stream" if streamed else "")


def _first_event(body: bytes) -> bytes | None:
    """The data of the first event of a server-sent event stream (its `data:` lines joined):
    a streaming method may answer its error as the stream's one event."""
    lines: list[bytes] = []
    for line in body.replace(b"\r\n", b"\n").split(b"\n"):
        if not line.strip():
            if lines:
                break
            continue
        if line.startswith(b"data:"):
            lines.append(line[5:].lstrip(b" "))
    return b"\n".join(lines) if lines else None


def _jsonrpc_checks(
    *, url: str, dialect: str, tenant: str, capabilities: set[str], budget: _Budget
) -> list[tuple[str, str, str]]:
    """(check, outcome, detail) of each question to one JSON-RPC interface."""
    names = METHODS[dialect]
    headers = {"A2A-Version": "1.0"} if dialect == "1.0" else {}
    task_id = str(uuid.uuid4())
    found: list[tuple[str, str, str]] = []

    def ask(check: str, method: str, params: dict[str, Any], expected: tuple[int, ...]) -> None:
        if dialect == "1.0" and tenant:
            params = {**params, "tenant": tenant}
        request_id = f"conformance-{uuid.uuid4().hex[:12]}"
        body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        answer = _send("POST", url, budget=budget, body=body, headers=headers)
        found.append((check, *_jsonrpc_verdict(answer, expected=expected, request_id=request_id)))

    ask("unknown_task", str(names["get"]), {"id": task_id}, (TASK_NOT_FOUND,))
    # Not JSON at all: a server must say parse error (or invalid request) and act on nothing.
    answer = _send("POST", url, budget=budget, body=b'{"jsonrpc": "2.0", "id": ', headers=headers)
    found.append(("malformed", *_jsonrpc_verdict(answer, expected=(PARSE_ERROR, INVALID_REQUEST), request_id=None)))
    if "streaming" not in capabilities:
        ask("denied_streaming", str(names["subscribe"]), {"id": task_id}, (UNSUPPORTED_OPERATION,))
    if "push_notifications" not in capabilities:
        params = {"taskId": task_id, "id": str(uuid.uuid4())} if dialect == "1.0" else {"id": task_id}
        ask("denied_push", str(names["push_get"]), params, (PUSH_NOT_SUPPORTED, UNSUPPORTED_OPERATION))
    if "extended_card" not in capabilities and names["extended"]:
        expected = (
            (UNSUPPORTED_OPERATION,) if dialect == "1.0" else (UNSUPPORTED_OPERATION, EXTENDED_CARD_NOT_CONFIGURED)
        )
        ask("denied_extended_card", str(names["extended"]), {}, expected)
    return found


# --- ACPs AIP (JSON-RPC) ------------------------------------------------------------------------


def _aip_checks(*, url: str, budget: _Budget) -> list[tuple[str, str, str]]:
    """(check, outcome, detail) of each question to an ACS card's JSON-RPC endpoint: a Leader's
    `get` of a task made up for the run (AIP's only read, an error for a task that does not
    exist: nothing stored), and a body that is not JSON."""
    request_id = f"conformance-{uuid.uuid4().hex[:12]}"
    message = {
        "type": "message",
        "id": f"msg-{uuid.uuid4()}",
        "sentAt": timezone.now().isoformat(timespec="seconds"),
        "senderRole": "leader",
        "senderId": "agentserver-registry",
        "command": "get",
        "dataItems": [],
        "taskId": f"task-{uuid.uuid4()}",
        "sessionId": f"session-{uuid.uuid4()}",
    }
    body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "rpc", "params": {"message": message}})
    found = [
        (
            "unknown_task",
            *_jsonrpc_verdict(
                _send("POST", url, budget=budget, body=body), expected=(TASK_NOT_FOUND,), request_id=request_id
            ),
        )
    ]
    answer = _send("POST", url, budget=budget, body=b'{"jsonrpc": "2.0", "id": ')
    found.append(("malformed", *_jsonrpc_verdict(answer, expected=(PARSE_ERROR, INVALID_REQUEST), request_id=None)))
    return found


# --- HTTP+JSON (A2A 1.0) --------------------------------------------------------------------


def _rest_verdict(answer: _Answer | str, *, expected: tuple[int, ...], what: str) -> tuple[str, str]:
    skipped = _skipped_for(answer)
    if skipped is not None:
        return Outcome.SKIPPED, skipped
    if isinstance(answer, str):
        return Outcome.FAILED, answer
    want = " or ".join(str(s) for s in expected)
    if answer.status in expected:
        return Outcome.PASSED, f"answered {answer.status} ({what})"
    if answer.status >= 500:
        return Outcome.FAILED, f"answered {answer.status}, a server error, where {want} ({what}) was due"
    return Outcome.FAILED, f"answered {answer.status} where {want} ({what}) was due"


def _rest_checks(*, url: str, capabilities: set[str], budget: _Budget) -> list[tuple[str, str, str]]:
    base = url.rstrip("/")
    headers = {"A2A-Version": "1.0"}
    task_id = str(uuid.uuid4())
    found: list[tuple[str, str, str]] = []

    def ask(check: str, path: str, expected: tuple[int, ...], what: str) -> None:
        answer = _send("GET", f"{base}{path}", budget=budget, headers=headers)
        found.append((check, *_rest_verdict(answer, expected=expected, what=what)))

    ask("unknown_task", f"/tasks/{task_id}", (404,), "task not found")
    unsupported = (400, 501)
    if "streaming" not in capabilities:
        ask("denied_streaming", f"/tasks/{task_id}:subscribe", unsupported, "unsupported operation")
    if "push_notifications" not in capabilities:
        ask("denied_push", f"/tasks/{task_id}/pushNotificationConfigs", unsupported, "push notifications not supported")
    if "extended_card" not in capabilities:
        ask("denied_extended_card", "/extendedAgentCard", unsupported, "unsupported operation")
    return found


# --- one run -----------------------------------------------------------------------------------


def _interface_dialect(card_dialect: str, protocol_version: str) -> str:
    """The dialect an interface speaks: a 1.0 card may declare an interface in 0.3."""
    if card_dialect == "1.0" and protocol_version.strip().startswith(("0.3", "0.2")):
        return "0.3"
    return card_dialect


def _unsigned_hash(document: Any) -> str:
    """A card's hash without its `signatures`: a card signed again (a new key of its server's,
    as this server's own cards are on every rotation) says the same thing."""
    if isinstance(document, dict):
        document = {name: value for name, value in document.items() if name != "signatures"}
    return cards.card_hash(document)


def _card_check(*, card_url: str, approved: Any, dialect: str, budget: _Budget) -> Result:
    def result(outcome: str, detail: str) -> Result:
        return Result("card", dialect, "", card_url, outcome, detail)

    timeout = budget.timeout()
    if timeout is None:
        return result(Outcome.SKIPPED, "not run: the run's time budget was spent")
    try:
        ssrf.check(_ascii_url(card_url), unresolvable_ok=True)
    except ssrf.Refused as exc:
        return result(Outcome.SKIPPED, f"not run: refused by the address guard: {exc}")
    except ValueError:
        pass  # fetch_card says what is wrong with it
    try:
        # Within the run's budget, as every other request of the run.
        fetched = cards.fetch_card(card_url, timeout=timeout)
    except cards.FetchFailed as exc:
        return result(Outcome.FAILED, f"the card could not be read: {exc}")
    served, card_hash = _unsigned_hash(fetched.document), _unsigned_hash(approved)
    if served != card_hash:
        return result(
            Outcome.FAILED,
            f"the card served now (sha256 {served[:16]}… without its signatures) is not the approved one "
            f"({card_hash[:16]}…)",
        )
    return result(
        Outcome.PASSED, f"the card served is the approved one (sha256 {card_hash[:16]}… without its signatures)"
    )


def run_checks(*, card_url: str, approved: Any, dialect: str, index: dict[str, Any]) -> list[Result]:
    """Every check of one card's interfaces (network I/O: call it outside any transaction).
    Never raises for anything the agent does."""
    budget = _Budget(float(settings.REGISTRY_CONFORMANCE_BUDGET))
    results = [_card_check(card_url=card_url, approved=approved, dialect=dialect, budget=budget)]
    capabilities = {c for c in index.get("capabilities", ()) if isinstance(c, str)}
    seen: set[tuple[str, str]] = set()
    endpoints = [e for e in index.get("endpoints", ()) if isinstance(e, dict)]
    for endpoint in endpoints:
        url, binding = str(endpoint.get("url") or ""), str(endpoint.get("binding") or "")
        if not url or (url, binding) in seen:
            continue
        seen.add((url, binding))
        if len(seen) > MAX_INTERFACES:
            results.append(
                Result(
                    "interface",
                    dialect,
                    binding,
                    url,
                    Outcome.SKIPPED,
                    f"not run: the directory checks the first {MAX_INTERFACES} interfaces of a card",
                )
            )
            continue
        speaks = _interface_dialect(dialect, str(endpoint.get("protocol_version") or ""))
        if binding == "JSONRPC" and speaks in METHODS:
            found = _jsonrpc_checks(
                url=url,
                dialect=speaks,
                tenant=str(endpoint.get("tenant") or ""),
                capabilities=capabilities,
                budget=budget,
            )
        elif binding == "HTTP+JSON" and speaks == "1.0":
            found = _rest_checks(url=url, capabilities=capabilities, budget=budget)
        elif binding == "JSONRPC" and speaks == "acs":
            found = _aip_checks(url=url, budget=budget)
        elif binding == "GRPC" and speaks == "1.0":
            found = conformance_grpc.grpc_checks(
                url=url,
                tenant=str(endpoint.get("tenant") or ""),
                capabilities=capabilities,
                timeout=budget.timeout,
                max_body=MAX_BODY,
            )
        else:
            found = [
                (
                    "interface",
                    Outcome.SKIPPED,
                    f"not run: the directory does not check {binding or 'this'} interfaces of {speaks} cards",
                )
            ]
        results += [Result(name, speaks, binding, url, outcome, detail) for name, outcome, detail in found]
    return results


# --- the service ----------------------------------------------------------------------------


def conformance_due(*, now: datetime | None = None, limit: int = 50) -> list[int]:
    """Approved entries whose conformance run is due, their next run moved on (a lease)."""
    now = now or timezone.now()
    with transaction.atomic():
        ids = list(
            Entry.objects.select_for_update(skip_locked=True)
            .filter(state=State.APPROVED, approved_version__isnull=False, proof_lapsed_at__isnull=True)
            .filter(Q(next_conformance_at__isnull=True) | Q(next_conformance_at__lte=now))
            .order_by("next_conformance_at")
            .values_list("pk", flat=True)[:limit]
        )
        Entry.objects.filter(pk__in=ids).update(
            next_conformance_at=now + timedelta(seconds=settings.REGISTRY_CONFORMANCE_INTERVAL)
        )
    return ids


# A second run this soon after one is a duplicate job (a redelivered task), not a schedule.
RERUN_GAP = timedelta(seconds=60)


def entry_conformance_run(
    *, entry_id: int, now: datetime | None = None
) -> tuple[list[ConformanceResult], Attestation | None] | None:
    """Run the checks on an approved entry's approved card, replace its results, and sign a new
    attestation. None when the entry is not approved (any more), or was checked a moment ago."""
    now = now or timezone.now()
    entry = Entry.objects.select_related("approved_version").filter(pk=entry_id, state=State.APPROVED).first()
    if entry is None or entry.approved_version is None or entry.proof_lapsed_at is not None:
        return None
    if entry.conformance_at is not None and now - entry.conformance_at < RERUN_GAP:
        return None
    version = entry.approved_version
    index = version.index if isinstance(version.index, dict) else {}
    found = run_checks(card_url=entry.card_url, approved=version.document, dialect=version.dialect, index=index)
    with transaction.atomic():
        locked = (
            Entry.objects.select_for_update(of=("self",))
            .select_related("approved_version", "current_version")
            .get(pk=entry_id)
        )
        if locked.state != State.APPROVED or locked.approved_version_id != version.pk:
            return None  # decided on meanwhile: these answers are about a card no longer attested
        ConformanceResult.objects.filter(entry=locked).delete()
        results = ConformanceResult.objects.bulk_create(
            [
                ConformanceResult(
                    entry=locked,
                    at=now,
                    card_hash=version.hash,
                    name=r.name,
                    dialect=r.dialect if r.dialect in ("1.0", "0.3", "0.1", "acs") else "",
                    binding=r.binding[:16],
                    url=r.url[:2048],
                    outcome=r.outcome,
                    detail=r.detail[:2000],
                )
                for r in found
            ]
        )
        locked.conformance_at = now
        locked.save(update_fields=["conformance_at", "updated_at"])
        attestation = attestations.issue(entry=locked, results=results, at=now)
    return results, attestation
