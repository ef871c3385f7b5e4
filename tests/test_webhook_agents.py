"""Webhook agents: the agent's logic at a real HTTP endpoint on 127.0.0.1 (tests/webhook_endpoint.py),
which checks every request's signature with the Standard Webhooks reference library and answers
from a script. Each way an endpoint can misbehave has its own endpoint answer here, and each
ends the task failed with a reason that says what happened. No test sends traffic beyond
127.0.0.1 (refusals are tested with 127.0.0.2 and ::ffff:127.0.0.3, which the guard stops
before any connection)."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from accounts import agent_kinds
from accounts.selectors import Principal
from accounts.services import agent_secret_generate, agent_secret_set
from protocols import contract
from tasks_app import runner, selectors, services
from tasks_app.domain import NewMessage
from tasks_app.executors import Misconfigured, webhook
from tasks_app.executors.webhook import Action, ActionError, ArtifactSpec, parse_action
from tasks_app.lifecycle import SETTLED, Dialect, Failure, TaskState
from tasks_app.models import Task
from tests.conftest import make_agent, user_message
from tests.webhook_endpoint import Endpoint, Reply, document, line, ndjson, run_until_working

ALICE = Principal("alice", api_key_id=1)
A2A_FOLLOW_UP = contract.follow_up(Dialect.A2A_1_0)  # the tasks here are 1.0 tasks


# --- the signature and the actions, without a server ----------------------------------------


def test_our_signature_is_one_the_standard_webhooks_library_verifies_and_a_changed_body_is_not():
    secret = agent_secret_generate()
    body = b'{"type":"agentserver.run.v1","message":{"parts":[{"type":"text","text":"h\xc3\xa9"}]}}'
    headers = webhook.signed_headers(webhook.signing_key(secret), msg_id="3f2c", body=body)
    Webhook(secret).verify(body, headers, json_parse=False)
    assert headers["webhook-id"] == "3f2c" and headers["webhook-signature"].startswith("v1,")
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace(b"h", b"H"), headers, json_parse=False)


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_not base64!", "no-such-secret?"])
def test_a_secret_that_is_missing_or_not_a_standard_webhooks_secret_is_a_misconfiguration(secret):
    with pytest.raises(Misconfigured):
        webhook.signing_key(secret)


def test_a_secret_without_the_whsec_prefix_is_read_as_base64_as_the_reference_library_reads_it():
    secret = agent_secret_generate().removeprefix("whsec_")
    body = b"{}"
    Webhook(secret).verify(
        body, webhook.signed_headers(webhook.signing_key(secret), msg_id="a", body=body), json_parse=False
    )


@pytest.mark.parametrize(
    "value, expected",
    [
        ({"type": "working"}, Action("working")),
        ({"type": "working", "message": "thinking"}, Action("working", message=[{"type": "text", "text": "thinking"}])),
        (
            {"type": "fail", "message": {"parts": [{"type": "data", "data": {"code": 7}}]}},
            Action("fail", message=[{"type": "data", "data": {"code": 7}}]),
        ),
        (
            {"type": "artifact", "text": "chunk", "artifactId": "a1", "append": True, "lastChunk": True},
            Action(
                "artifact",
                artifact=ArtifactSpec([{"type": "text", "text": "chunk"}], "a1", append=True, last_chunk=True),
            ),
        ),
        (
            {"type": "complete", "artifact": {"text": "the answer", "name": "answer.txt"}},
            Action(
                "complete",
                artifact=ArtifactSpec([{"type": "text", "text": "the answer"}], name="answer.txt", last_chunk=True),
            ),
        ),
        (
            {"type": "reply", "message": {"text": "hi"}, "metadata": {"k": 1}},
            Action("reply", message=[{"type": "text", "text": "hi"}], metadata={"k": 1}),
        ),
    ],
)
def test_an_action_is_read_into_what_its_verb_takes(value, expected):
    assert parse_action(value) == expected


@pytest.mark.parametrize(
    "value, why",
    [
        ([1], "an action must be a JSON object, not a list"),
        ({"message": "x"}, "the action has no type"),
        ({"type": "dance"}, "unknown action type 'dance' (known: working, artifact,"),
        ({"type": 7}, "unknown action type 7"),
        ({"type": "working", "mesage": "x"}, "working has an unknown field 'mesage'"),
        ({"type": "fail"}, "fail needs a message"),
        ({"type": "reject", "message": {"parts": []}}, "reject.message has no parts"),
        ({"type": "reply", "message": 5}, "reply.message must be an object, not a number"),
        (
            {"type": "working", "message": {"text": "a", "parts": []}},
            "working.message needs exactly one of text or parts",
        ),
        ({"type": "working", "message": {"txt": "a"}}, "working.message has an unknown field 'txt'"),
        ({"type": "artifact"}, "artifact needs exactly one of text or parts"),
        (
            {"type": "artifact", "text": "x", "lastChunk": "yes"},
            "artifact.lastChunk must be true or false, not a string",
        ),
        ({"type": "artifact", "text": "x", "append": True}, "artifact.append needs the artifactId"),
        ({"type": "artifact", "text": "x", "artifactId": ""}, "artifact.artifactId must not be empty"),
        ({"type": "artifact", "text": "x", "artifactId": "a" * 201}, "artifactId is longer than 200 characters"),
        ({"type": "artifact", "parts": [{"type": "video"}]}, "artifact.parts[0] has unknown type 'video'"),
        ({"type": "artifact", "text": "x", "metadata": []}, "artifact.metadata must be an object, not a list"),
        ({"type": "artifact", "text": "nul \u0000"}, "artifact.text"),
        ({"type": "complete", "artifact": {"text": "x", "lastChunk": True}}, "complete.artifact has an unknown field"),
        ({"type": "complete", "artifact": "x"}, "complete.artifact must be an object, not a string"),
    ],
)
def test_an_action_that_cannot_be_applied_is_refused_naming_the_field(value, why):
    with pytest.raises(ActionError) as refused:
        parse_action(value)
    assert why in str(refused.value)


# --- the settings ---------------------------------------------------------------------------


def test_the_agent_form_refuses_plain_http_unless_the_server_allows_it(settings):
    settings.WEBHOOK_ALLOW_HTTP = False
    assert agent_kinds.settings_problems("webhook", {"url": "http://127.0.0.1:9/agent"}) == [
        "settings['url']: must use https (this server sends plain http only with WEBHOOK_ALLOW_HTTP set)"
    ]
    assert agent_kinds.settings_problems("webhook", {"url": "https://127.0.0.1:9/agent"}) == []
    settings.WEBHOOK_ALLOW_HTTP = True
    assert agent_kinds.settings_problems("webhook", {"url": "http://127.0.0.1:9/agent"}) == []


def test_the_agent_form_refuses_a_destination_the_guard_refuses_and_limits_past_the_server_s(settings):
    settings.AGENT_SOFT_TIME_LIMIT = 30
    problems = agent_kinds.settings_problems(
        "webhook", {"url": "http://127.0.0.2:8080/agent", "timeout": 45, "max_response_bytes": 10**10}
    )
    assert len(problems) == 3
    assert problems[0] == "settings['url']: this address is not allowed: 127.0.0.2"
    assert problems[1].startswith("settings['timeout']: 45 is more than this server gives a run (29 s")
    assert problems[2].startswith("settings['max_response_bytes']: 10000000000 is more than this server reads")


def test_the_agent_form_checks_the_schema_first(settings):
    assert agent_kinds.settings_problems("webhook", {"url": "ftp://x", "retries": -1, "colour": "red"}) == [
        "settings: Additional properties are not allowed ('colour' was unexpected)",
        "settings['retries']: -1 is less than the minimum of 0",
        "settings['url']: 'ftp://x' does not match '^[Hh][Tt][Tt][Pp][Ss]?://'",
    ]


# --- runs against a real endpoint ---------------------------------------------------------------


def webhook_agent(tenant, secret: str | None, url: str, slug: str = "hook", **settings: Any):
    agent = make_agent(tenant, slug, "webhook", settings={"url": url, **settings})
    if secret is not None:
        agent_secret_set(agent=agent, secret=secret)
    return agent


@pytest.fixture
def hook(tenant, secret, endpoint):
    return webhook_agent(tenant, secret, endpoint.url())


def send(agent, text: str = "hello", *, task_id: Any = None, extensions: list[str] | None = None) -> tuple[Task, str]:
    """A client's message (activating `extensions`, which the agent then declares), then the
    run it asks for (in this thread): the task after it, and what the runner said."""
    message = NewMessage(
        message_id=str(uuid.uuid4()),
        role="user",
        parts=[{"type": "text", "text": text}],
        task_id=str(task_id) if task_id else None,
    )
    if extensions:
        agent.extensions = [{"uri": uri} for uri in extensions]
        agent.save()
    activated = [{"uri": uri, "metadata": {}} for uri in extensions or []]
    task, _ = services.message_receive(
        agent=agent, principal=ALICE, message=message, activated_extensions=activated, follow_up=A2A_FOLLOW_UP
    )
    outcome = runner.run(task_id=task.pk, run_token=str(task.run_token))
    task.refresh_from_db()
    return task, outcome


def failed(task: Task) -> tuple[str, str]:
    assert task.state == TaskState.FAILED, task.state
    return task.failure, selectors.failure_reason(task)


def texts(message) -> str:
    return " ".join(p["text"] for p in message.parts if p["type"] == "text")


def test_a_webhook_agent_applies_each_streamed_action_and_completes(hook, endpoint, secret):
    endpoint.answer(
        ndjson(
            {"type": "working", "message": "reading"},
            {"type": "artifact", "text": "Once ", "artifactId": "story", "name": "story.txt"},
            {"type": "artifact", "text": "upon a time.", "artifactId": "story", "append": True, "lastChunk": True},
            {"type": "complete", "message": "done"},
        )
    )
    task, outcome = send(hook, "tell me a story", extensions=["https://example.com/ext/tone/v1"])
    assert (outcome, task.state) == ("done", TaskState.COMPLETED)
    assert texts(task.status_message) == "done"
    (artifact,) = task.artifacts.all()
    assert (artifact.artifact_id, artifact.name, artifact.complete) == ("story", "story.txt", True)
    assert [p["text"] for p in artifact.parts] == ["Once ", "upon a time."]
    states = [e.payload.get("state") for e in task.events.order_by("seq") if e.kind == "status"]
    assert states == ["submitted", "working", "completed"]

    (request,) = endpoint.seen
    assert request.verified  # by the reference library, with the agent's secret
    assert request.headers["webhook-id"] == str(task.run_token)
    assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 5
    assert request.headers["content-type"] == "application/json"
    assert request.headers["accept"] == "application/x-ndjson, application/json"
    body = request.json
    assert body["type"] == "agentserver.run.v1"
    assert (body["taskId"], body["contextId"]) == (str(task.pk), task.context_id)
    assert body["message"]["role"] == "user" and body["message"]["parts"] == [
        {"type": "text", "text": "tell me a story"}
    ]
    assert set(body["message"]) == {"messageId", "role", "parts", "metadata"}
    assert body["history"] == []
    assert body["settings"] == {"url": hook.settings["url"]}
    assert body["extensions"] == ["https://example.com/ext/tone/v1"]


def test_an_input_required_round_trip_sends_the_history_with_the_second_run(hook, endpoint):
    endpoint.answer(
        ndjson({"type": "input-required", "message": "About what?"}),
        ndjson({"type": "complete", "artifact": {"text": "A poem about rivers."}}),
    )
    asked, _ = send(hook, "write a poem")
    assert asked.state == TaskState.INPUT_REQUIRED and texts(asked.status_message) == "About what?"
    done, _ = send(hook, "rivers", task_id=asked.pk)
    assert done.state == TaskState.COMPLETED
    first, second = endpoint.seen
    assert second.json["message"]["parts"] == [{"type": "text", "text": "rivers"}]
    assert [(m["role"], m["parts"][0]["text"]) for m in second.json["history"]] == [
        ("user", "write a poem"),
        ("agent", "About what?"),
    ]
    assert first.headers["webhook-id"] != second.headers["webhook-id"]  # two runs, two ids


def test_the_history_sent_is_the_newest_history_length_messages(tenant, secret, endpoint):
    agent = webhook_agent(tenant, secret, endpoint.url(), history_length=1)
    endpoint.answer(ndjson({"type": "input-required", "message": "More?"}), ndjson({"type": "complete"}))
    asked, _ = send(agent, "one")
    send(agent, "two", task_id=asked.pk)
    assert [m["parts"][0]["text"] for m in endpoint.seen[1].json["history"]] == ["More?"]


@pytest.mark.parametrize(
    "answer",
    [
        document({"actions": [{"type": "working"}, {"type": "complete", "message": "done"}]}),
        document([{"type": "working"}, {"type": "complete", "message": "done"}]),
    ],
    ids=["an object of actions", "a bare list"],
)
def test_a_json_answer_applies_its_actions_in_order(hook, endpoint, answer):
    endpoint.answer(answer)
    task, _ = send(hook)
    assert task.state == TaskState.COMPLETED and texts(task.status_message) == "done"
    assert [e.payload.get("state") for e in task.events.order_by("seq")] == ["submitted", "working", "completed"]


def test_a_reply_answers_a_new_exchange_with_a_bare_message(hook, endpoint):
    endpoint.answer(ndjson({"type": "reply", "message": "hi there", "metadata": {"lang": "en"}}))
    task, _ = send(hook)
    assert task.state == TaskState.COMPLETED and task.reply_only
    assert texts(task.status_message) == "hi there" and task.status_message.metadata == {"lang": "en"}


def test_the_first_settling_action_wins_and_what_follows_is_not_read(hook, endpoint):
    endpoint.answer(ndjson({"type": "complete", "message": "done"}, {"type": "fail", "message": "no"}, pause=0.05))
    task, _ = send(hook)
    assert task.state == TaskState.COMPLETED


def test_a_json_answer_s_actions_after_the_settling_one_are_ignored(hook, endpoint):
    endpoint.answer(document([{"type": "reject", "message": "not mine"}, {"type": "complete"}]))
    task, _ = send(hook)
    assert task.state == TaskState.REJECTED and task.failure == ""  # the agent's own verdict


def test_the_agent_failing_its_task_is_its_verdict_not_a_server_failure(hook, endpoint):
    endpoint.answer(ndjson({"type": "fail", "message": "I cannot do that"}))
    task, outcome = send(hook)
    assert (outcome, task.state, task.failure) == ("done", TaskState.FAILED, "")


# --- every misbehaviour, one endpoint answer each ------------------------------------------------


def lines(*raw: bytes, **reply: Any) -> Reply:
    return Reply(chunks=[(0.0, r) for r in raw], **reply)


WORKING = line({"type": "working"})
MISBEHAVIOURS = [
    (
        "HTTP 500",
        Reply(500, "text/plain", [(0, b"Traceback (most recent call last):\n  KeyError: 'x'")]),
        Failure.AGENT_ERROR,
        "the webhook endpoint at 127.0.0.1:{port} answered HTTP 500: "
        "Traceback (most recent call last):\\x0a  KeyError: 'x'",
    ),
    (
        "HTTP 404, a long body cut short",
        Reply(404, "text/html", [(0, b"<p>" + b"x" * 500)]),
        Failure.AGENT_ERROR,
        "answered HTTP 404: <p>" + "x" * 197 + "…",
    ),
    (
        "a redirect",
        Reply(302, None, headers={"Location": "https://elsewhere.example/agent"}),
        Failure.AGENT_ERROR,
        "answered HTTP 302, a redirect (to 'https://elsewhere.example/agent'), which is not followed",
    ),
    (
        "the wrong content type",
        Reply(200, "text/html", [(0, b"<html>hi</html>")]),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint answered with 'text/html', not application/x-ndjson or application/json",
    ),
    (
        "no content type",
        Reply(200, None, [(0, b"hello")]),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint answered with no Content-Type, not application/x-ndjson or application/json",
    ),
    (
        "bad JSON on a line",
        lines(WORKING, b'{"type": "complete",}\n'),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint's answer, line 2, is not valid JSON: "
        "Expecting property name enclosed in double quotes at column 21",
    ),
    (
        "a line that is not UTF-8",
        lines(b'{"type": "working", "message": "\xff"}\n'),
        Failure.INVALID_RESPONSE,
        "line 1, is not valid JSON: the body is not UTF-8",
    ),
    (
        "an unknown action",
        lines(WORKING, b"\n", line({"type": "dance"})),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint's answer, line 3: unknown action type 'dance'",
    ),
    (
        "an invalid action field",
        lines(line({"type": "artifact", "text": "x", "lastChunk": 1})),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint's answer, line 1: artifact.lastChunk must be true or false, not a number",
    ),
    (
        "a part the store cannot hold",
        lines(line({"type": "complete", "message": "nul \u0000 here"})),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint's answer, line 1: complete.message",
    ),
    (
        "an answer that ends without settling",
        lines(WORKING, line({"type": "artifact", "text": "half"})),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint's answer ended after 2 actions without settling the task (complete, fail, reject, "
        "reply, input-required or auth-required)",
    ),
    (
        "an empty answer",
        Reply(200, None),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint's answer ended after 0 actions without settling the task",
    ),
    (
        "bad JSON in a JSON answer",
        Reply(200, "application/json", [(0, b"[{")]),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint's answer is not valid JSON: Expecting property name enclosed in double quotes",
    ),
    (
        "a JSON answer that is not a list of actions",
        document({"action": []}),
        Failure.INVALID_RESPONSE,
        'the webhook endpoint\'s JSON answer must be a list of actions or {"actions": [...]}, not an object with '
        "the members ['action']",
    ),
    (
        "a bad action in a JSON answer",
        document([{"type": "working"}, {"type": "complete", "message": 3}]),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint's answer, action 2: complete.message must be an object, not a number",
    ),
    (
        "a compressed answer",
        lines(WORKING, headers={"Content-Encoding": "gzip"}),
        Failure.INVALID_RESPONSE,
        "the webhook endpoint's answer is compressed ('gzip'), unasked",
    ),
    (
        "an answer that is not HTTP",
        Reply(raw=b"SSH-2.0-OpenSSH_9.2\r\n"),
        Failure.AGENT_ERROR,
        "the webhook endpoint at 127.0.0.1:{port} failed: the answer is not valid HTTP",
    ),
    (
        "a connection closed mid-answer",
        lines(WORKING, end=False),
        Failure.AGENT_ERROR,
        "the webhook endpoint at 127.0.0.1:{port} failed: the connection was closed before the answer ended "
        "(after 1 applied action)",
    ),
    (
        "an endpoint that goes quiet",
        Reply(chunks=[(0, WORKING), (1.5, line({"type": "complete"}))]),
        Failure.TIME_LIMIT,
        "the webhook endpoint at 127.0.0.1:{port} sent nothing for 0.4 s (its idle_timeout) while streaming its "
        "answer (after 1 applied action)",
    ),
    (
        "an endpoint that never answers",
        Reply(delay=1.5),
        Failure.TIME_LIMIT,
        "sent nothing for 0.4 s (its idle_timeout) waiting for its answer",
    ),
]


@pytest.mark.parametrize("answer, failure, reason", [m[1:] for m in MISBEHAVIOURS], ids=[m[0] for m in MISBEHAVIOURS])
def test_an_endpoint_that_misbehaves_fails_the_task_saying_how(tenant, secret, endpoint, answer, failure, reason):
    agent = webhook_agent(tenant, secret, endpoint.url(), idle_timeout=0.4, retries=0)
    endpoint.answer(answer)
    task, outcome = send(agent)
    assert outcome == "failed"
    got_failure, got_reason = failed(task)
    assert got_failure == failure
    assert reason.replace("{port}", str(endpoint.port)) in got_reason
    assert len(endpoint.seen) == 1


def test_an_endpoint_that_trickles_past_the_run_s_timeout_is_cut_off(tenant, secret, endpoint):
    agent = webhook_agent(tenant, secret, endpoint.url(), timeout=0.6, idle_timeout=0.5)
    endpoint.answer(Reply(chunks=[(0.25, WORKING)] * 10))
    task, _ = send(agent)
    failure, reason = failed(task)
    assert failure == Failure.TIME_LIMIT
    assert reason == (
        f"the webhook endpoint at 127.0.0.1:{endpoint.port} did not finish within the run's timeout of 0.6 s "
        "(after 2 applied actions)"
    )


def test_a_timeout_past_the_soft_time_limit_is_cut_to_it_and_the_reason_says_so(tenant, secret, endpoint, settings):
    settings.AGENT_SOFT_TIME_LIMIT = 1.5
    agent = webhook_agent(tenant, secret, endpoint.url(), timeout=60)
    endpoint.answer(Reply(chunks=[(0.2, WORKING)] * 10))
    started = time.monotonic()
    task, _ = send(agent)
    assert time.monotonic() - started < 1.2
    assert (
        "did not finish within the run's timeout of 0.5 s (capped by the server's AGENT_SOFT_TIME_LIMIT)"
        in failed(task)[1]
    )


def test_an_answer_over_max_response_bytes_is_refused(tenant, secret, endpoint):
    agent = webhook_agent(tenant, secret, endpoint.url(), max_response_bytes=1000)
    endpoint.answer(ndjson(*[{"type": "working", "message": "x" * 100}] * 20))
    failure, reason = failed(send(agent)[0])
    assert failure == Failure.INVALID_RESPONSE
    assert reason.startswith("the webhook endpoint's answer is too large: more than 1000 bytes (after ")


def test_a_line_over_the_server_s_line_cap_is_refused(tenant, secret, endpoint, settings):
    settings.WEBHOOK_LINE_MAX_BYTES = 500
    agent = webhook_agent(tenant, secret, endpoint.url())
    endpoint.answer(ndjson({"type": "working"}, {"type": "complete", "message": "x" * 600}))
    failure, reason = failed(send(agent)[0])
    assert failure == Failure.INVALID_RESPONSE
    assert reason == "the webhook endpoint's answer is too large: a line longer than 500 bytes (after 1 applied action)"


def test_an_https_url_to_an_endpoint_without_tls_fails_the_handshake_and_is_not_tried_again(tenant, secret):
    accepted = []

    def plain_http(listener: socket.socket) -> None:
        # Answers every connection at once in plain HTTP, as a server without TLS would.
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            accepted.append(connection)
            connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            connection.close()

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        threading.Thread(target=plain_http, args=(listener,), daemon=True).start()
        agent = webhook_agent(tenant, secret, f"https://127.0.0.1:{port}/agent")
        failure, reason = failed(send(agent)[0])
    assert failure == Failure.AGENT_ERROR
    assert reason.startswith(f"the webhook endpoint at 127.0.0.1:{port} failed the TLS handshake: TLS: ")
    assert len(accepted) == 1  # a handshake that failed would fail again


def test_an_agent_without_a_secret_is_misconfigured(tenant, endpoint):
    agent = webhook_agent(tenant, None, endpoint.url())
    failure, reason = failed(send(agent)[0])
    assert failure == Failure.MISCONFIGURED
    assert reason.startswith("the agent is misconfigured: it has no secret to sign its webhook requests with")
    assert endpoint.seen == []


def test_plain_http_is_refused_at_run_time_where_the_server_does_not_allow_it(hook, endpoint, settings):
    settings.WEBHOOK_ALLOW_HTTP = False
    failure, reason = failed(send(hook)[0])
    assert failure == Failure.MISCONFIGURED
    assert reason == (
        "the agent is misconfigured: its webhook url must use https (this server sends plain http only with "
        "WEBHOOK_ALLOW_HTTP set)"
    )


def test_settings_saved_around_the_schema_are_a_misconfiguration_at_run_time(tenant, secret, endpoint):
    agent = webhook_agent(tenant, secret, endpoint.url(), retries="many")
    failure, reason = failed(send(agent)[0])
    assert failure == Failure.MISCONFIGURED
    assert reason == (
        "the agent is misconfigured: its settings['retries'] do not fit the webhook executor: "
        "'many' is not of type 'integer'"
    )


@pytest.mark.parametrize("host", ["127.0.0.2", "[::ffff:127.0.0.3]"])
def test_a_destination_outside_the_allow_list_is_refused_before_any_connection(tenant, secret, endpoint, host):
    agent = webhook_agent(tenant, secret, endpoint.url(host=host))
    failure, reason = failed(send(agent)[0])
    assert failure == Failure.MISCONFIGURED
    assert reason == f"the agent is misconfigured: its webhook url is refused: this address is not allowed: {host}"
    assert endpoint.seen == []


# --- retries ---------------------------------------------------------------------------------


def test_an_endpoint_that_refuses_connections_fails_the_task_after_every_attempt(tenant, secret):
    with socket.socket() as reserved:  # bound, never listening: connections to it are refused
        reserved.bind(("127.0.0.1", 0))
        port = reserved.getsockname()[1]
        agent = webhook_agent(tenant, secret, f"http://127.0.0.1:{port}/agent", retries=2)
        failure, reason = failed(send(agent)[0])
    assert failure == Failure.AGENT_ERROR
    assert (
        reason
        == f"the webhook endpoint at 127.0.0.1:{port} could not be reached: the connection was refused (3 attempts)"
    )


def test_a_refused_connection_is_tried_again_and_the_run_succeeds_once_the_endpoint_listens(
    tenant, secret, monkeypatch
):
    reserved = socket.socket()
    reserved.bind(("127.0.0.1", 0))
    port = reserved.getsockname()[1]
    started: list[Endpoint] = []

    def endpoint_comes_up(seconds: float) -> None:
        # Between the refused attempt and the next one: the endpoint starts on that port.
        if not started:
            reserved.close()
            started.append(Endpoint(secret, port=port).answer(ndjson({"type": "complete"})).start())

    monkeypatch.setattr(webhook, "_sleep", endpoint_comes_up)
    agent = webhook_agent(tenant, secret, f"http://127.0.0.1:{port}/agent")
    try:
        task, _ = send(agent)
    finally:
        for running in started:
            running.stop()
    assert task.state == TaskState.COMPLETED
    assert len(started[0].seen) == 1 and started[0].seen[0].verified


def test_a_503_is_tried_again_with_the_same_webhook_id_and_a_fresh_signature(hook, endpoint):
    endpoint.answer(Reply(503, "text/plain", [(0, b"busy")]), ndjson({"type": "complete"}))
    task, _ = send(hook)
    assert task.state == TaskState.COMPLETED
    first, second = endpoint.seen
    assert first.verified and second.verified
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == str(task.run_token)


@pytest.mark.parametrize("status", [429, 502, 504])
def test_statuses_that_say_later_are_tried_again(hook, endpoint, status):
    endpoint.answer(Reply(status, "text/plain"), ndjson({"type": "complete"}))
    assert send(hook)[0].state == TaskState.COMPLETED
    assert len(endpoint.seen) == 2


def test_retry_after_is_honoured(hook, endpoint):
    endpoint.answer(Reply(503, "text/plain", headers={"Retry-After": "1"}), ndjson({"type": "complete"}))
    assert send(hook)[0].state == TaskState.COMPLETED
    first, second = endpoint.seen
    assert second.at - first.at >= 1.0  # the test backoff is 0.05 s


def test_a_connection_dropped_before_an_answer_is_tried_again(hook, endpoint):
    endpoint.answer(Reply(raw=b""), ndjson({"type": "complete"}))
    assert send(hook)[0].state == TaskState.COMPLETED
    assert len(endpoint.seen) == 2


def test_a_connection_dropped_after_an_applied_action_is_not_tried_again(hook, endpoint):
    endpoint.answer(lines(WORKING, end=False), ndjson({"type": "complete"}))
    task, _ = send(hook)
    failure, reason = failed(task)
    assert failure == Failure.AGENT_ERROR and "(after 1 applied action)" in reason
    assert len(endpoint.seen) == 1


def test_a_retry_that_would_pass_the_run_s_timeout_is_not_made(tenant, secret, endpoint):
    agent = webhook_agent(tenant, secret, endpoint.url(), timeout=1)
    endpoint.answer(Reply(503, "text/plain", headers={"Retry-After": "2"}), ndjson({"type": "complete"}))
    failure, reason = failed(send(agent)[0])
    assert failure == Failure.AGENT_ERROR
    assert reason.endswith(
        "answered HTTP 503 (attempt 1 of 3; no time left for another within the run's timeout of 1 s)"
    )
    assert len(endpoint.seen) == 1


def test_a_500_is_not_tried_again(hook, endpoint):
    endpoint.answer(Reply(500, "text/plain"), ndjson({"type": "complete"}))
    assert send(hook)[0].state == TaskState.FAILED
    assert len(endpoint.seen) == 1


# --- cancellation -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_task_canceled_while_its_endpoint_is_quiet_stops_the_run_and_closes_the_connection(
    tenant, secret, endpoint, monkeypatch
):

    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)  # this test runs it, in a thread of its own
    agent = webhook_agent(tenant, secret, endpoint.url())
    endpoint.answer(Reply(chunks=[(0, WORKING), (1.5, line({"type": "complete"})), (0.1, WORKING)]))
    message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "hello"}])
    task, _ = services.message_receive(agent=agent, principal=ALICE, message=message, follow_up=A2A_FOLLOW_UP)
    worker, outcome = run_until_working(task)
    canceled_at = time.monotonic()
    services.task_cancel_as_operator(task_id=task.pk, reason="an operator stopped it")
    worker.join(10)
    assert outcome == ["closed"]
    assert time.monotonic() - canceled_at < 1.2  # the endpoint's next line was 1.5 s away
    endpoint.wait_finished()
    assert endpoint.cut_off == 1  # when it came, the connection was closed
    assert selectors.task_state(task.pk) == TaskState.CANCELED


# --- whatever the endpoint sends ------------------------------------------------------------------

_ACTION_TYPES = ["working", "artifact", "input-required", "auth-required", "complete", "fail", "reject", "reply", "x"]
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_ACTIONISH = st.fixed_dictionaries(
    {"type": st.sampled_from(_ACTION_TYPES)},
    optional={
        "message": st.one_of(st.text(max_size=10), st.fixed_dictionaries({"text": st.text(max_size=5)}), _VALUES),
        "text": st.text(max_size=10),
        "artifactId": st.sampled_from(["a", "b", ""]),
        "append": st.booleans(),
        "lastChunk": _VALUES,
        "artifact": st.fixed_dictionaries({"text": st.text(max_size=5)}) | _VALUES,
        "metadata": _VALUES,
    },
)


def _json(value: object) -> bytes:
    # The standard library's: it writes integers past 64 bits too, which an endpoint may send.
    return json.dumps(value).encode()


_NDJSON_BODY = st.lists(st.one_of(_ACTIONISH.map(_json), st.binary(max_size=30), st.just(b"")), max_size=6).map(
    lambda items: b"\n".join(items)
)
ANSWERS = st.one_of(
    st.builds(
        lambda body, kind: Reply(content_type=kind, chunks=[(0, body)] if body else []),
        st.one_of(st.binary(max_size=300), _NDJSON_BODY),
        st.sampled_from(["application/x-ndjson", "application/json", "text/plain", None]),
    ),
    st.builds(
        lambda body: Reply(content_type="application/json", chunks=[(0, _json(body))]),
        st.lists(_ACTIONISH, max_size=4),
    ),
    st.builds(lambda raw: Reply(raw=raw), st.binary(max_size=200)),
    st.builds(
        lambda raw: Reply(raw=b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n" + raw), _NDJSON_BODY
    ),
)


@hypothesis_settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=ANSWERS)
def test_whatever_the_endpoint_sends_the_task_ends_settled_with_a_reason(tenant, secret, endpoint, answer):
    agent = webhook_agent(tenant, secret, endpoint.url(), retries=0, idle_timeout=2)
    endpoint.answer(answer)
    task, outcome = send(agent)
    assert outcome in ("done", "failed")
    assert task.state in SETTLED
    if outcome == "failed":
        assert task.failure and selectors.failure_reason(task)


# --- across the real thing ----------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_streaming_client_sees_the_endpoint_s_events_before_the_endpoint_has_finished(
    live, tenant, secret, endpoint, alice_key
):
    agent = webhook_agent(tenant, secret, endpoint.url())
    endpoint.answer(
        ndjson(
            {"type": "working", "message": "drafting"},
            {"type": "artifact", "text": "one ", "artifactId": "draft"},
            {"type": "artifact", "text": "two", "artifactId": "draft", "append": True, "lastChunk": True},
            {"type": "complete", "message": "done"},
            pause=0.3,
        )
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": user_message("go")}}
    headers = {"A2A-Version": "1.0", "X-API-Key": alice_key, "Accept": "text/event-stream"}
    arrivals: list[tuple[str, float]] = []
    with httpx.stream("POST", f"{live.url}{agent.path}", json=body, headers=headers, timeout=30) as response:
        assert response.status_code == 200
        for text in response.iter_lines():
            if text.startswith("data:"):
                result = orjson.loads(text[5:])["result"]
                if "statusUpdate" in result:
                    kind = result["statusUpdate"]["status"]["state"].removeprefix("TASK_STATE_")
                else:
                    kind = "artifact" if "artifactUpdate" in result else "task"
                arrivals.append((kind, time.monotonic()))
    assert [kind for kind, _ in arrivals] == ["task", "WORKING", "artifact", "artifact", "COMPLETED"]
    (finished,) = endpoint.finished
    # Live: the working status and the first chunk reached the client while the endpoint was
    # still writing its answer (its last line came 0.3 s after the chunk before it).
    assert arrivals[1][1] < finished and arrivals[2][1] < finished
    assert endpoint.seen[0].verified
    task = Task.objects.get(pk=endpoint.seen[0].json["taskId"])
    assert task.state == TaskState.COMPLETED
