"""Failures the client can read: a run the server fails leaves the task failed with a status
message (an agent Message with one text part) that says what went wrong in words a client can
act on, and never a host, URL, path, exception text or secret; the admin keeps the full reason
on the status change. Each failure kind's text is checked with hostile URLs and exception
texts (hypothesis); then a webhook agent whose endpoint answers 500 is seen failed, with that
message, by an A2A 1.0 client (JSON-RPC and HTTP+JSON), a 0.3 client, a 0.1 client, an AIP
client and a push receiver, and once across the live stack (daphne and a Celery worker)."""

from __future__ import annotations

import contextlib
import ipaddress
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest
from a2a.client import A2AClientTimeoutError
from a2a.utils.errors import InternalError
from django.conf import settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from accounts.selectors import Principal
from accounts.services import agent_secret_generate, agent_secret_set
from outbound import client, ssrf, transport
from tasks_app import runner, selectors, services
from tasks_app.domain import MessageView, NewMessage
from tasks_app.executors import REGISTRY, AgentContext, AgentFailure, Executor, Misconfigured, webhook
from tasks_app.executors.upstream import session
from tasks_app.lifecycle import PUBLIC_TEXTS, Failure, TaskState, public_text
from tasks_app.models import Task
from tests.conftest import drain_push_jobs, make_agent, user_message, user_message_v03
from tests.webhook_endpoint import Endpoint, Reply

ALICE = Principal("alice", api_key_id=1)
MARK = "zq"  # every hostile string carries it: a public text that shows any of them shows it

HOSTS = st.from_regex(r"zq[a-z0-9]{1,12}\.(internal|corp\.example|svc\.cluster\.local)", fullmatch=True)
PATHS = st.from_regex(r"/zq[a-zA-Z0-9_/.-]{0,30}(\?token=zq[a-z0-9]{4,12})?", fullmatch=True)
# Printable ASCII: the same words go into headers, which carry nothing else.
WORDS = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40).map(lambda text: f"{MARK}{text}")


def clean(public: str, *hostile: str) -> None:
    """What a client may read: words, with nothing of the hostile inputs."""
    assert public and MARK not in public.lower()
    assert "://" not in public and "Traceback" not in public
    for value in hostile:
        assert value not in public


# --- the texts ---------------------------------------------------------------------------------


def test_every_failure_the_server_can_record_has_a_public_text():
    assert set(PUBLIC_TEXTS) == set(Failure.values) - {Failure.NONE}
    for failure in PUBLIC_TEXTS:
        clean(public_text(failure))
    assert public_text("not-a-kind") == PUBLIC_TEXTS[Failure.AGENT_ERROR]


@given(reason=WORDS, failure=st.sampled_from(sorted(PUBLIC_TEXTS)))
def test_an_agent_failure_without_public_words_is_told_as_its_kind_s_default(reason, failure):
    exc = AgentFailure(reason, failure=failure)
    assert (str(exc), exc.public) == (reason, public_text(failure))
    assert Misconfigured(reason).public == public_text(Failure.MISCONFIGURED)


# --- the webhook executor, each way it fails, with hostile inputs ----------------------------


class FakeAnswer:
    """What `client.post_streamed` hands over, scripted."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = httpx.Headers(headers)
        self.body = body

    def excerpt(self, *, limit: int, patience: float) -> bytes:
        return self.body[:limit]

    def read(self) -> bytes:
        return self.body

    def lines(self, *, max_line: int) -> Iterator[bytes]:
        yield from self.body.split(b"\n")


def _context() -> AgentContext:
    message = MessageView("m", "user", [{"type": "text", "text": "hi"}], "c", "t", {}, [], [])
    return AgentContext(task_id="t", context_id="c", message=message, history=[message])


def _raises(exc: Exception):
    @contextlib.contextmanager
    def post_streamed(destination, **kwargs):
        raise exc
        yield  # pragma: no cover

    return post_streamed


def _answers(answer: FakeAnswer):
    @contextlib.contextmanager
    def post_streamed(destination, **kwargs):
        yield answer

    return post_streamed


def _webhook_cases(words: str) -> list[tuple[str, Any, str]]:
    """(what happens, how post_streamed behaves, the failure kind)."""
    raw = words.encode("utf-8", "replace")
    return [
        ("refused connection", _raises(client.ConnectFailed(words, 1)), Failure.AGENT_ERROR),
        ("dropped", _raises(client.Dropped(words, 1)), Failure.AGENT_ERROR),
        ("tls", _raises(client.TlsFailed(words, 1)), Failure.AGENT_ERROR),
        ("total timeout", _raises(client.TimedOut(words, 1, which="total", answered=True)), Failure.TIME_LIMIT),
        ("idle timeout", _raises(client.TimedOut(words, 1, which="idle", answered=False)), Failure.TIME_LIMIT),
        ("too large", _raises(client.TooLarge(words, 1, limit=10, line=True)), Failure.INVALID_RESPONSE),
        ("broken", _raises(client.Broken(words, 1)), Failure.AGENT_ERROR),
        ("send error", _raises(client.SendError(words, 1)), Failure.AGENT_ERROR),
        ("500", _answers(FakeAnswer(500, {"content-type": "text/plain"}, raw)), Failure.AGENT_ERROR),
        ("401", _answers(FakeAnswer(401, {}, raw)), Failure.AGENT_ERROR),
        ("503", _answers(FakeAnswer(503, {"retry-after": "1"}, raw)), Failure.AGENT_ERROR),
        ("redirect", _answers(FakeAnswer(302, {"location": f"https://{words}/x"}, b"")), Failure.AGENT_ERROR),
        ("content type", _answers(FakeAnswer(200, {"content-type": f"text/{words}"}, raw)), Failure.INVALID_RESPONSE),
        (
            "compressed",
            _answers(FakeAnswer(200, {"content-type": webhook.NDJSON, "content-encoding": words}, raw)),
            Failure.INVALID_RESPONSE,
        ),
        ("bad line", _answers(FakeAnswer(200, {"content-type": webhook.NDJSON}, raw + b"{")), Failure.INVALID_RESPONSE),
        (
            "unknown action",
            _answers(FakeAnswer(200, {"content-type": webhook.NDJSON}, orjson.dumps({"type": words}))),
            Failure.INVALID_RESPONSE,
        ),
        (
            "not a list",
            _answers(FakeAnswer(200, {"content-type": webhook.JSON}, orjson.dumps({words: 1}))),
            Failure.INVALID_RESPONSE,
        ),
        ("unsettled", _answers(FakeAnswer(204, {}, b"")), Failure.INVALID_RESPONSE),
    ]


CASES = [name for name, _, _ in _webhook_cases("x")]


def _webhook_failure(monkeypatch, url: str, post_streamed) -> AgentFailure | Misconfigured:
    destination = ssrf.Destination("https", "h", 443, "/", ipaddress.ip_address("127.0.0.1"))
    monkeypatch.setattr(webhook.ssrf, "check", lambda url, **kw: destination)
    monkeypatch.setattr(webhook.client, "post_streamed", post_streamed)
    plan = webhook.Plan.of({"url": url, "retries": 0, "timeout": 5})
    run = webhook._Run(_context(), plan, webhook.signing_key(agent_secret_generate()))
    with pytest.raises((AgentFailure, Misconfigured)) as failed:
        run.go()
    return failed.value


@pytest.mark.parametrize("case", CASES)
@hypothesis_settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=HOSTS, path=PATHS, words=WORDS)
def test_a_webhook_failure_tells_the_client_what_happened_and_never_where_or_in_whose_words(
    monkeypatch, case, host, path, words
):
    url = f"https://{host}:8443{path}"
    _, post_streamed, failure = next(c for c in _webhook_cases(words) if c[0] == case)
    exc = _webhook_failure(monkeypatch, url, post_streamed)
    assert isinstance(exc, AgentFailure) and exc.failure == failure
    clean(exc.public, host, path, words, url)
    if case not in ("too large", "content type", "compressed", "bad line", "unknown action", "not a list", "unsettled"):
        assert host in str(exc)  # the admin's reason names the endpoint


@pytest.mark.parametrize(
    "case, expected",
    [
        ("500", "the agent's endpoint answered HTTP 500"),
        ("401", "the agent's endpoint answered HTTP 401 (the agent's secret may not match its endpoint's)"),
        ("503", "the agent's endpoint answered HTTP 503 (1 attempt, retries 0)"),
        ("refused connection", "the agent's endpoint could not be reached (1 attempt, retries 0)"),
        ("total timeout", "the agent did not finish within 5 s"),
        ("idle timeout", "the agent's endpoint sent nothing for 5 s waiting for its answer"),
        ("tls", "the agent's endpoint failed the TLS handshake (its certificate or TLS setup); its owner must fix it"),
        ("redirect", "the agent's endpoint answered HTTP 302, a redirect, which is not followed"),
        ("bad line", "the agent's endpoint sent an answer this server cannot use: line 1 is not valid JSON"),
        ("unknown action", "the agent's endpoint sent an answer this server cannot use: line 1 is not a valid action"),
    ],
)
def test_a_webhook_failure_s_public_text_says_which_failure_it_was(monkeypatch, case, expected):
    _, post_streamed, _ = next(c for c in _webhook_cases(f"{MARK} secret words") if c[0] == case)
    assert _webhook_failure(monkeypatch, "https://hook.internal/run?key=zqsecret", post_streamed).public == expected


@hypothesis_settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=HOSTS, words=WORDS)
def test_a_webhook_misconfiguration_tells_the_client_without_the_url_or_the_guard_s_words(monkeypatch, host, words):
    url = f"https://{host}/hook"

    def refused(url, **kwargs):
        raise ssrf.Refused(words)

    monkeypatch.setattr(webhook.ssrf, "check", refused)
    run = webhook._Run(_context(), webhook.Plan.of({"url": url, "retries": 0}), webhook.signing_key("whsec_AAAA"))
    with pytest.raises(Misconfigured) as failed:
        run.go()
    clean(failed.value.public, host, words)
    assert words in str(failed.value)
    for secret in ("", f"whsec_{words}!"):  # "!" is never base64
        with pytest.raises(Misconfigured) as failed:
            webhook.signing_key(secret)
        clean(failed.value.public, words)


# --- the fronted upstream executor --------------------------------------------------------------


def _upstream_errors(url: str, words: str) -> list[tuple[BaseException, str]]:
    request = httpx.Request("POST", url)
    status = httpx.HTTPStatusError(words, request=request, response=httpx.Response(401, request=request))
    return [
        (httpx.ConnectError(words, request=request), "the upstream agent could not be reached"),
        (status, "the upstream agent answered HTTP 401 (the agent's secret may not match the upstream's)"),
        (A2AClientTimeoutError(words), "the upstream agent did not answer within 3 s"),
        (InternalError(words), "the upstream agent answered with error -32603"),
        (ValueError(words), "the upstream agent's answer could not be read"),
        (transport.Refused(words, request=request), ""),
        (transport.TooLarge(words, request=request), "the upstream agent's answer is larger than this server reads"),
    ]


@hypothesis_settings(max_examples=30, deadline=None)
@given(host=HOSTS, path=PATHS, words=WORDS)
def test_an_upstream_failure_tells_the_client_what_happened_and_never_where_or_in_whose_words(host, path, words):
    url = f"https://{host}{path}"
    fake = SimpleNamespace(config=SimpleNamespace(timeout=3.0))
    for exc, expected in _upstream_errors(url, words):
        public, _ = session.Session._public(fake, exc)
        clean(public, host, path, words)
        if expected:
            assert public == expected


# --- the runner, whatever the executor raises ------------------------------------------------


@pytest.fixture
def raising(tenant, monkeypatch):
    """Run a task of an executor that raises `exc`: the task after it."""
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    name = f"test-{uuid.uuid4().hex[:8]}"
    agent = make_agent(tenant, name, name)

    def go(exc: BaseException) -> Task:
        def execute(self, ctx):
            raise exc

        REGISTRY[name] = type("E", (Executor,), {"name": name, "execute": execute})
        message = NewMessage(message_id=str(uuid.uuid4()), role="user", parts=[{"type": "text", "text": "hi"}])
        task, _ = services.message_receive(agent=agent, principal=ALICE, message=message)
        assert runner.run(task_id=task.pk, run_token=str(task.run_token)) == "failed"
        task.refresh_from_db()
        return task

    yield go
    REGISTRY.pop(name, None)


def status_text(task: Task) -> str:
    message = task.status_message
    assert message is not None and message.role == "agent", "a failed task carries a status message"
    (part,) = message.parts
    return part["text"]


@pytest.mark.usefixtures("store_path")
@hypothesis_settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=WORDS, kind=st.sampled_from(["exception", "misconfigured", "agent-failure"]))
def test_whatever_an_executor_raises_its_client_reads_the_failure_s_public_text(raising, words, kind):
    exc = {
        "exception": RuntimeError(words),
        "misconfigured": Misconfigured(words),
        "agent-failure": AgentFailure(words, failure=Failure.INVALID_RESPONSE),
    }[kind]
    task = raising(exc)
    assert task.state == TaskState.FAILED
    expected = {"exception": Failure.AGENT_ERROR, "misconfigured": Failure.MISCONFIGURED}.get(
        kind, Failure.INVALID_RESPONSE
    )
    assert task.failure == expected
    assert status_text(task) == public_text(expected)
    if kind != "exception":  # an exception's text is only in the worker's log
        assert words in selectors.failure_reason(task)


def test_the_time_limit_tells_the_client_how_long_the_agent_had(raising):
    from celery.exceptions import SoftTimeLimitExceeded

    task = raising(SoftTimeLimitExceeded())
    assert status_text(task) == f"the agent did not finish within its time limit of {settings.AGENT_SOFT_TIME_LIMIT} s"


def test_an_agent_that_fails_its_task_itself_keeps_its_own_message(raising, tenant, monkeypatch):
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    name = f"test-{uuid.uuid4().hex[:8]}"
    REGISTRY[name] = type("E", (Executor,), {"name": name, "execute": lambda self, ctx: ctx.fail("no rivers today")})
    try:
        agent = make_agent(tenant, name, name)
        message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "hi"}])
        task, _ = services.message_receive(agent=agent, principal=ALICE, message=message)
        assert runner.run(task_id=task.pk, run_token=str(task.run_token)) == "done"
    finally:
        REGISTRY.pop(name, None)
    task.refresh_from_db()
    assert (task.failure, status_text(task)) == ("", "no rivers today")


def test_a_run_whose_worker_was_lost_tells_the_client_to_send_again(tenant, monkeypatch):
    from django.utils import timezone

    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    agent = make_agent(tenant, "lost", "echo")
    message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "hi"}])
    task, _ = services.message_receive(agent=agent, principal=ALICE, message=message)
    long_ago = timezone.now() - timezone.timedelta(hours=1)
    Task.objects.filter(pk=task.pk).update(run_claimed_at=long_ago, state="working")
    assert services.sweep_stuck_work(unclaimed_after=30, lost_after=600)[1] == 1
    task.refresh_from_db()
    assert (task.failure, status_text(task)) == (Failure.WORKER_LOST, public_text(Failure.WORKER_LOST))
    assert selectors.failure_reason(task) == "the worker running this task was lost"


def test_failing_a_run_with_its_message_is_still_one_statement(tenant, monkeypatch, django_assert_num_queries):
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    agent = make_agent(tenant, "one", "echo")
    message = NewMessage(message_id="m", role="user", parts=[{"type": "text", "text": "hi"}])
    task, _ = services.message_receive(agent=agent, principal=ALICE, message=message)
    with django_assert_num_queries(1):
        assert services.run_fail(task_id=task.pk, run_token=task.run_token, failure=Failure.TIME_LIMIT, reason="r")
    task.refresh_from_db()
    assert status_text(task) == public_text(Failure.TIME_LIMIT)


# --- a webhook answering 500, as every client sees it --------------------------------------------

ANSWER_500 = Reply(500, "text/plain", [(0, b"Traceback (most recent call last): KeyError 'db-password=zqhunter2'")])
SHOWN = "the agent's endpoint answered HTTP 500"


@pytest.fixture
def failing_hook(tenant):
    secret = agent_secret_generate()
    endpoint = Endpoint(secret).start()
    endpoint.answer(*[ANSWER_500] * 10)
    agent = make_agent(tenant, "hook", "webhook", settings={"url": endpoint.url(), "retries": 0})
    agent_secret_set(agent=agent, secret=secret)
    yield agent, endpoint
    endpoint.stop()


def no_leak(value: Any, endpoint: Endpoint) -> None:
    shown = orjson.dumps(value).decode()
    assert f"127.0.0.1:{endpoint.port}" not in shown and "zqhunter2" not in shown and "Traceback" not in shown


@pytest.mark.django_db(transaction=True)
def test_an_a2a_1_0_client_and_its_push_receiver_see_the_failed_task_with_what_went_wrong(
    rpc, alice_key, failing_hook, receiver, push_jobs
):
    agent, endpoint = failing_hook
    push = {"taskPushNotificationConfig": {"url": receiver.url(), "token": "t"}}
    task = rpc.send(agent.path, "hello", key=alice_key, configuration=push).result["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    assert task["status"]["message"]["parts"] == [{"text": SHOWN}]
    no_leak(task, endpoint)
    got = rpc(agent.path, "GetTask", {"id": task["id"]}, key=alice_key).result
    assert got["status"]["message"]["parts"] == [{"text": SHOWN}]
    # The admin keeps the full reason.
    stored = Task.objects.get(pk=task["id"])
    assert f"127.0.0.1:{endpoint.port} answered HTTP 500: Traceback" in selectors.failure_reason(stored)

    drain_push_jobs(push_jobs)
    last = receiver.requests[-1].json["statusUpdate"]
    assert last["status"]["state"] == "TASK_STATE_FAILED"
    assert last["status"]["message"]["parts"] == [{"text": SHOWN}]
    no_leak([r.json for r in receiver.requests], endpoint)


@pytest.mark.django_db(transaction=True)
def test_a_blocking_send_answered_with_an_unusable_answer_is_an_invalid_agent_response_in_the_client_s_words(
    rpc, alice_key, tenant
):
    secret = agent_secret_generate()
    endpoint = Endpoint(secret).start()
    try:
        endpoint.answer(Reply(200, "application/json", [(0, b'{"db-password": "zqhunter2", "Traceback": 1')]))
        agent = make_agent(tenant, "garbled", "webhook", settings={"url": endpoint.url(), "retries": 0})
        agent_secret_set(agent=agent, secret=secret)
        response = rpc.send(agent.path, "hello", key=alice_key, configuration={"returnImmediately": False})
    finally:
        endpoint.stop()
    error = response.error
    assert error["code"] == -32006
    message = error["message"]
    stored = Task.objects.get(agent=agent)
    # What the task's client reads as its status message, not the admin's reason.
    assert status_text(stored) in message
    no_leak(error, endpoint)
    # The admin keeps the full reason, in the parser's words.
    assert "not valid JSON: Expecting" in selectors.failure_reason(stored)


@pytest.mark.django_db(transaction=True)
def test_an_a2a_1_0_http_json_client_sees_the_failed_task_with_what_went_wrong(rest, alice_key, failing_hook):
    agent, endpoint = failing_hook
    sent = rest("POST", agent.path, "message:send", key=alice_key, body={"message": user_message("hello")})
    assert sent.status == 200
    task = sent.body["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert task["status"]["message"]["parts"] == [{"text": SHOWN}]
    got = rest("GET", agent.path, f"tasks/{task['id']}", key=alice_key).body
    assert got["status"]["message"]["parts"] == [{"text": SHOWN}]
    no_leak([task, got], endpoint)


@pytest.mark.django_db(transaction=True)
def test_an_a2a_0_3_client_sees_the_failed_task_with_what_went_wrong(rpc03, alice_key, failing_hook):
    agent, endpoint = failing_hook
    task = rpc03(agent.path, "message/send", {"message": user_message_v03("hello")}, key=alice_key).result
    assert task["kind"] == "task" and task["status"]["state"] == "failed"
    assert task["status"]["message"]["role"] == "agent"
    assert task["status"]["message"]["parts"] == [{"kind": "text", "text": SHOWN}]
    no_leak(task, endpoint)


@pytest.mark.django_db(transaction=True)
def test_an_a2a_0_1_client_sees_the_failed_task_with_what_went_wrong(client, alice_key, failing_hook):
    agent, endpoint = failing_hook
    message = {"role": "user", "parts": [{"type": "text", "text": "hello"}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/send", "params": {"id": str(uuid.uuid4()), "message": message}}
    response = client.post(
        agent.path, data=orjson.dumps(body), content_type="application/json", headers={"X-API-Key": alice_key}
    )
    task = orjson.loads(response.content)["result"]
    assert task["status"]["state"] == "failed"
    assert task["status"]["message"]["parts"] == [{"type": "text", "text": SHOWN}]
    no_leak(task, endpoint)


@pytest.mark.django_db(transaction=True)
def test_an_aip_client_sees_the_failed_task_with_what_went_wrong(client, alice_key, failing_hook):
    agent, endpoint = failing_hook
    task_id = f"task-{uuid.uuid4()}"
    start = {
        "type": "message",
        "id": f"msg-{uuid.uuid4()}",
        "sentAt": "2025-09-01T11:58:00+08:00",
        "senderRole": "leader",
        "senderId": "leader-1",
        "command": "start",
        "dataItems": [{"type": "text", "text": "hello"}],
        "taskId": task_id,
        "sessionId": "session-1",
    }
    body = orjson.dumps({"jsonrpc": "2.0", "method": "rpc", "id": "1", "params": {"message": start}})
    response = client.post(
        f"{agent.path}aip/rpc", data=body, content_type="application/json", headers={"X-API-Key": alice_key}
    )
    task = orjson.loads(response.content)["result"]
    assert task["status"]["state"] == "failed"
    assert task["status"]["dataItems"] == [{"type": "text", "text": SHOWN}]
    no_leak(task, endpoint)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_across_the_live_stack_a_client_and_a_push_receiver_see_what_went_wrong(
    live, alice_key, failing_hook, receiver
):
    agent, endpoint = failing_hook
    params = {
        "message": user_message("hello"),
        "configuration": {"taskPushNotificationConfig": {"url": receiver.url(), "token": "t"}},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    headers = {"A2A-Version": "1.0", "X-API-Key": alice_key}
    response = httpx.post(f"{live.url}{agent.path}", json=body, headers=headers, timeout=30)
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert task["status"]["message"]["parts"] == [{"text": SHOWN}]
    no_leak(task, endpoint)
    last_seq = Task.objects.get(pk=task["id"]).last_seq
    got = receiver.wait_for(lambda seen: {r.seq for r in seen} == set(range(1, last_seq + 1)))
    (failed,) = [r.json["statusUpdate"] for r in got if r.seq == last_seq]
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    assert failed["status"]["message"]["parts"] == [{"text": SHOWN}]
    no_leak([r.json for r in got], endpoint)
