"""Nothing the caller sends is an internal error: property tests with hostile requests.

Whatever a client sends, to every method of a keyed agent and of a public one, the answer is
JSON-RPC (a stream of JSON-RPC responses for a streaming method that passed its checks) with
the request's id whenever it had a usable one; never HTTP 5xx, never -32603. The same over
HTTP+JSON, to every route and to paths of none: a google.rpc.Status with an ErrorInfo, a JSON
result, or a stream of bare StreamResponses. And a task stored before the run can still be
read and listed after it. In-process through Django's
handler, and across daphne with a real Celery worker, whose logs must hold no traceback.

The requests come from tests/hostile.py (built from the A2A 1.0 protobuf schema, and for
A2A 0.3's methods from 0.3's JSON schema, sent without A2A-Version as 0.3 clients send them).

- Default: a few dozen requests per method, in-process and live.
- `HOSTILE_PROFILE=long` (with `HOSTILE_EXAMPLES` per case, default 1700: ~42,000 requests
  over the 25 cases) is the benchmark-style run `bench/hostile.py` makes. It keeps going past
  a broken answer (as `HOSTILE_KEEP_GOING=1` does in any profile), counts it, and fails at
  the end with the first request of each kind of breakage; the default run stops at the first
  and lets hypothesis shrink it.
- `HOSTILE_REPORT=<file>`: the counts per (HTTP status, JSON-RPC code or ErrorInfo reason) go
  there as markdown.

The tenant API's write routes get their hostile bodies in tests/test_hostile_tenant_api.py
(from this module's values and body breakers).

No request leaves this machine: in-process the SSRF guard's resolver is faked (`dns`) and
push jobs are only recorded (`push_jobs`); live, push URLs are loopback literals outside the
allow-list and every body naming any other host is filtered out (`hostile.foreign_url`).
"""

from __future__ import annotations

import gc
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

import httpx
import orjson
import pytest
from asgiref.sync import async_to_sync
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests import hostile
from tests.conftest import asgi_get, make_agent, run_async, user_message
from tests.hostile import Broken, HostileRequest, Pools

LONG = os.environ.get("HOSTILE_PROFILE") == "long"
EXAMPLES = int(os.environ.get("HOSTILE_EXAMPLES", "1700")) if LONG else None
KEEP_GOING = LONG or os.environ.get("HOSTILE_KEEP_GOING") == "1"
# None: the envelope case (any method, envelope and body broken); 0.3's methods after 1.0's,
# then 0.1's own.
CASES = [*hostile.ALL_METHODS, None]
PATHS = {"keyed": "/agents/acme/echo/", "public": "/agents/acme/conformance/"}
# In-process the resolver is faked, so a name may be given too: push configs then get made.
IN_PROCESS_URLS = (*hostile.LIVE_URLS, "https://push.example.test/hook")


def case_id(method: str | None) -> str:
    return method or "envelope"


def hostile_settings(examples: int) -> settings:
    return settings(
        max_examples=EXAMPLES or examples,
        deadline=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


# --- counting ------------------------------------------------------------------------------


@dataclass
class Tally:
    """Outcomes of every hostile request of this module's run, per (status, code)."""

    started: float = field(default_factory=time.monotonic)
    outcomes: Counter = field(default_factory=Counter)
    tests: list[tuple[str, int, float]] = field(default_factory=list)
    broken: dict[str, list] = field(default_factory=dict)  # kind -> [count, first message]

    def write(self, path: str) -> None:
        total = sum(self.outcomes.values())
        lines = [
            "# Hostile requests",
            "",
            f"Profile: {'long' if LONG else 'default'}"
            f"{f', {EXAMPLES} examples per case' if EXAMPLES else ''}; {total} requests in "
            f"{time.monotonic() - self.started:.0f} s; "
            f"finished {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}.",
            "",
            "| test | requests | seconds |",
            "|---|--:|--:|",
            *(f"| {name} | {n} | {seconds:.1f} |" for name, n, seconds in self.tests),
            "",
            "| HTTP | JSON-RPC code or reason | requests |",
            "|--:|---|--:|",
            *(f"| {status} | {code} | {n} |" for (status, code), n in sorted(self.outcomes.items())),
        ]
        if self.broken:
            lines += ["", "## Broken answers", "", "| kind | requests | first |", "|---|--:|---|"]
            lines += [
                f"| {kind} | {n} | {first[:600].replace('|', '¦').replace(chr(10), ' ')} |"
                for kind, (n, first) in sorted(self.broken.items())
            ]
        Path(path).write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def tally():
    counted = Tally()
    yield counted
    if os.environ.get("HOSTILE_REPORT"):
        counted.write(os.environ["HOSTILE_REPORT"])


class Run:
    """One test's hostile run: judges each answer, counts it, and, keeping going, collects
    what broke instead of stopping at it."""

    def __init__(self, tally: Tally, name: str) -> None:
        self.tally, self.name, self.requests, self.started = tally, name, 0, time.monotonic()
        self.broken: dict[str, list] = {}

    def judge(
        self, request: HostileRequest, status: int, content_type: str, body: bytes, complete: bool = True
    ) -> None:
        self.requests += 1
        note(f"request: {request.describe()}")
        note(f"answer: HTTP {status} {content_type!r} {body[:600]!r}")
        try:
            outcome = hostile.verdict(request, status, content_type, body, complete=complete)
        except Broken as broken:
            if not KEEP_GOING:
                raise
            kind = type(broken).__name__
            outcome = (status, f"BROKEN {kind}")
            first = self.broken.setdefault(kind, [0, f"{broken} <- {request.describe()}"])
            first[0] += 1
            self.tally.broken.setdefault(f"{kind} ({self.name})", first)
        self.tally.outcomes[outcome] += 1

    def finish(self) -> None:
        self.tally.tests.append((self.name, self.requests, time.monotonic() - self.started))
        assert not self.broken, "hostile requests got broken answers:\n" + "\n".join(
            f"- {kind} ×{n}: {first[:1500]}" for kind, (n, first) in self.broken.items()
        )


def separate_database_key(attempt, name: str) -> None:
    # Every parametrization defines the same inner test: without its own key, hypothesis
    # would replay one method's failures under another's strategy.
    attempt.hypothesis.inner_test._hypothesis_internal_add_digest = name.encode()


# --- the world before the run -------------------------------------------------------------------


@pytest.fixture
def world(tenant):
    """The keyed echo agent, the public conformance agent (a shared sandbox, so that anonymous
    callers list tasks) and a key, made once per test."""
    from accounts.services import api_key_create

    make_agent(tenant, "echo", "echo")
    make_agent(tenant, "conformance", "conformance", is_public=True, shared_sandbox=True)
    return api_key_create(tenant=tenant, name="alice", principal="alice")[1]


Send = Callable[[str, str, dict, "str | None"], dict]


def completed_tasks(send: Send, key: str) -> dict[str, list[dict]]:
    """Per agent, the canary and one more completed task: stored before anything hostile
    arrives, both terminal (so a stream on them ends at once)."""
    made: dict[str, list[dict]] = {}
    for agent, path in PATHS.items():
        agent_key = key if agent == "keyed" else None
        made[agent] = []
        for text in ("the canary", "another"):
            message = user_message(text, contextId=f"{text.replace(' ', '-')}-{uuid.uuid4()}")
            answer = send(path, "SendMessage", {"message": message}, agent_key)
            task = answer["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
            made[agent].append(task)
    return made


def pools_of(tasks: dict[str, list[dict]], urls: tuple[str, ...]) -> Pools:
    every = [t for ts in tasks.values() for t in ts]
    return Pools(task_ids=[t["id"] for t in every], context_ids=[t["contextId"] for t in every], urls=urls)


def still_readable(send: Send, key: str, tasks: dict[str, list[dict]]) -> None:
    """The canary reads back, its context lists it, and every stored task still lists."""
    for agent, path in PATHS.items():
        agent_key = key if agent == "keyed" else None
        canary = tasks[agent][0]
        got = send(path, "GetTask", {"id": canary["id"], "historyLength": 10}, agent_key)
        assert got.get("result", {}).get("id") == canary["id"], f"GetTask of the canary: {got}"
        listed = every_page(send, path, {"contextId": canary["contextId"]}, agent_key)
        assert canary["id"] in listed, f"ListTasks of the canary's context does not list it: {listed}"
        # What the run stored must not make a list fail either (one poisoned row would).
        every_page(send, path, {"pageSize": 100, "historyLength": 5, "includeArtifacts": True}, agent_key)


def every_page(send: Send, path: str, params: dict, key: str | None, limit: int = 500) -> list[str]:
    ids, token = [], ""
    for _ in range(limit):
        answer = send(path, "ListTasks", {**params, **({"pageToken": token} if token else {})}, key)
        assert "result" in answer, f"ListTasks {params} after the run: {answer}"
        ids += [t["id"] for t in answer["result"]["tasks"]]
        token = answer["result"].get("nextPageToken")
        if not token:
            return ids
    raise AssertionError(f"ListTasks {params} has more than {limit} pages")


# --- in-process ------------------------------------------------------------------------------------


def in_process(client) -> Send:
    def send(path, method, params, key):
        body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        headers = {"A2A-Version": "1.0", **({"X-API-Key": key} if key else {})}
        return client.post(path, data=body, content_type="application/json", headers=headers).json()

    return send


def environ_of(request: HostileRequest) -> dict[str, Any]:
    return _environ("POST", PATHS[request.agent], request.path_query, request.headers, request.body)


def _environ(http_method: str, path: str, query: str, headers: dict[str, bytes], body: bytes) -> dict[str, Any]:
    """A request as Django's test client takes it: the path decoded as a WSGI server does,
    header bytes as they are (latin-1), and no Content-Type at all when the request has none
    (`generic` would always send one)."""
    from django.test.client import FakePayload

    environ: dict[str, Any] = {
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "REQUEST_METHOD": http_method,
        "QUERY_STRING": query.removeprefix("?"),
    }
    if body:
        environ.update({"CONTENT_LENGTH": str(len(body)), "wsgi.input": FakePayload(body)})
    for name, value in headers.items():
        meta = "CONTENT_TYPE" if name == "Content-Type" else "HTTP_" + name.upper().replace("-", "_")
        environ[meta] = value.decode("latin-1")
    return environ


async def _drained(chunks) -> bytes:
    return b"".join([chunk async for chunk in chunks])


@pytest.mark.django_db(transaction=True)  # the agent runs on commit: a blocking SendMessage needs one
@pytest.mark.parametrize("method", CASES, ids=case_id)
def test_no_hostile_request_is_an_internal_error_in_process(client, world, tally, dns, push_jobs, caplog, method):
    # What earlier tests left to the garbage collector (an AMQP client's task that failed after
    # its test closed the connection) is logged now, not counted against this run.
    gc.collect()
    caplog.clear()
    key, send = world, in_process(client)
    tasks = completed_tasks(send, key)
    run = Run(tally, f"in-process {case_id(method)}")

    @hostile_settings(40)
    @given(request=hostile.requests(method, pools_of(tasks, IN_PROCESS_URLS), key=key))
    def attempt(request: HostileRequest) -> None:
        response = client.request(**environ_of(request))
        # Django's client hands an async stream over unread; every stream here ends at once
        # (only terminal tasks are subscribed to, and the agents finish on commit).
        body = async_to_sync(_drained)(response.streaming_content) if response.streaming else response.content
        run.judge(request, response.status_code, response.get("Content-Type", ""), body)

    separate_database_key(attempt, f"in-process {case_id(method)}")
    attempt()
    run.finish()
    still_readable(send, key, tasks)
    logged = [r for r in caplog.records if r.exc_info]
    assert not logged, "the server logged tracebacks during the run:\n" + "\n".join(
        f"{r.name}: {r.getMessage()[:300]}" for r in logged[:10]
    )


# --- across daphne ------------------------------------------------------------------------------

STREAM_SECONDS = 8  # a stream of a finished task ends at once; this only bounds a bug


def over_http(base: str) -> Send:
    def send(path, method, params, key):
        headers = {"A2A-Version": "1.0", **({"X-API-Key": key} if key else {})}
        body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
        return httpx.post(f"{base}{path}", json=body, headers=headers, timeout=30).json()

    return send


def exchange(http: httpx.Client, base: str, request: HostileRequest) -> tuple[int, str, bytes, bool]:
    """(status, Content-Type, body, whether the body was read to its end)."""
    url = f"{base}{PATHS[request.agent]}{request.path_query}"
    try:
        with http.stream("POST", url, content=request.body, headers=request.headers) as response:
            chunks, deadline, complete = [], time.monotonic() + STREAM_SECONDS, True
            for chunk in response.iter_raw():
                chunks.append(chunk)
                if time.monotonic() > deadline:  # judge what came; keep-alives make this check run
                    complete = False
                    break
            return response.status_code, response.headers.get("content-type", ""), b"".join(chunks), complete
    except httpx.TimeoutException as exc:
        raise NoAnswer(f"no answer in time ({exc!r}) to {request.describe()}") from None
    except httpx.TransportError as exc:
        raise NoAnswer(f"the connection failed ({exc!r}) for {request.describe()}") from None


class NoAnswer(Broken):
    """The server did not answer (in time), or dropped the connection."""


def log_sizes(live) -> dict[str, int]:
    return {name: (live.logs / f"{name}.log").stat().st_size for name in ("web0", "web1", "worker")}


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method", CASES, ids=case_id)
def test_no_hostile_request_is_an_internal_error_across_daphne(live, world, tally, method):
    key = world
    send = over_http(live.urls[0])
    tasks = completed_tasks(send, key)
    pools = pools_of(tasks, hostile.LIVE_URLS)  # push URLs: loopback literals the guard refuses
    logs_before = log_sizes(live)
    run = Run(tally, f"across daphne {case_id(method)}")
    turn = iter(range(10**9))

    with httpx.Client(timeout=httpx.Timeout(30, read=10)) as http:

        @hostile_settings(25)
        @given(request=hostile.requests(method, pools, key=key, live=True))
        def attempt(request: HostileRequest) -> None:
            assert not hostile.foreign_url(request.body, pools.urls)  # never off this machine
            base = live.urls[next(turn) % 2]  # both daphne processes take their share
            try:
                status, content_type, body, complete = exchange(http, base, request)
            except NoAnswer:
                if not KEEP_GOING:
                    raise
                run.tally.outcomes[(0, "BROKEN NoAnswer")] += 1
                run.broken.setdefault("NoAnswer", [0, request.describe()])[0] += 1
                return
            run.judge(request, status, content_type, body, complete)

        separate_database_key(attempt, f"across daphne {case_id(method)}")
        attempt()

    run.finish()
    still_readable(send, key, tasks)
    time.sleep(1)  # what the worker does after an answer, and log lines still in flight
    for name, start in logs_before.items():
        written = (live.logs / f"{name}.log").read_bytes()[start:].decode("utf-8", "replace")
        assert "Traceback" not in written, f"{name} logged a traceback during the run:\n{written[-4000:]}"


# --- HTTP+JSON: every route, in-process and across daphne -------------------------------------------
#
# The same params as the JSON-RPC cases draw, travelling as each route has them, and the routes'
# own hostility (HTTP methods, odd segments, paths of no route, broken queries): the answer is a
# google.rpc.Status with an ErrorInfo, a JSON result, or a stream of bare StreamResponses; never
# HTTP 5xx (502 only for an agent's own invalid response, as -32006 is allowed above).

REST_CASES = [*sorted(hostile.REST_ROUTES), "paths"]


def rest_environ_of(request: hostile.RestHostileRequest) -> dict[str, Any]:
    path = PATHS[request.agent] + request.path
    return _environ(request.http_method, path, request.query, request.headers, request.body)


class RestRun(Run):
    def judge(self, request, status, content_type, body, complete=True) -> None:
        self.requests += 1
        note(f"request: {request.describe()}")
        note(f"answer: HTTP {status} {content_type!r} {body[:600]!r}")
        try:
            outcome = hostile.rest_verdict(request, status, content_type, body, complete=complete)
        except Broken as broken:
            if not KEEP_GOING:
                raise
            kind = type(broken).__name__
            outcome = (status, f"BROKEN {kind}")
            first = self.broken.setdefault(kind, [0, f"{broken} <- {request.describe()}"])
            first[0] += 1
            self.tally.broken.setdefault(f"{kind} ({self.name})", first)
        self.tally.outcomes[outcome] += 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", REST_CASES)
def test_no_hostile_http_json_request_is_an_internal_error_in_process(
    client, world, tally, dns, push_jobs, caplog, case
):
    key, send = world, in_process(client)
    tasks = completed_tasks(send, key)
    run = RestRun(tally, f"in-process HTTP+JSON {case}")

    @hostile_settings(30)
    @given(request=hostile.rest_requests(case, pools_of(tasks, IN_PROCESS_URLS), key=key))
    def attempt(request: hostile.RestHostileRequest) -> None:
        response = client.request(**rest_environ_of(request))
        body = async_to_sync(_drained)(response.streaming_content) if response.streaming else response.content
        run.judge(request, response.status_code, response.get("Content-Type", ""), body)

    separate_database_key(attempt, f"in-process HTTP+JSON {case}")
    attempt()
    run.finish()
    still_readable(send, key, tasks)
    logged = [r for r in caplog.records if r.exc_info]
    assert not logged, "the server logged tracebacks during the run:\n" + "\n".join(
        f"{r.name}: {r.getMessage()[:300]}" for r in logged[:10]
    )


def rest_exchange(http: httpx.Client, base: str, request: hostile.RestHostileRequest) -> tuple[int, str, bytes, bool]:
    url = f"{base}{PATHS[request.agent]}{request.path}{request.query}"
    try:
        with http.stream(request.http_method, url, content=request.body, headers=request.headers) as response:
            chunks, deadline, complete = [], time.monotonic() + STREAM_SECONDS, True
            for chunk in response.iter_raw():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    complete = False
                    break
            return response.status_code, response.headers.get("content-type", ""), b"".join(chunks), complete
    except httpx.TimeoutException as exc:
        raise NoAnswer(f"no answer in time ({exc!r}) to {request.describe()}") from None
    except httpx.TransportError as exc:
        raise NoAnswer(f"the connection failed ({exc!r}) for {request.describe()}") from None


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", REST_CASES)
def test_no_hostile_http_json_request_is_an_internal_error_across_daphne(live, world, tally, case):
    key = world
    send = over_http(live.urls[0])
    tasks = completed_tasks(send, key)
    pools = pools_of(tasks, hostile.LIVE_URLS)
    logs_before = log_sizes(live)
    run = RestRun(tally, f"across daphne HTTP+JSON {case}")
    turn = iter(range(10**9))

    with httpx.Client(timeout=httpx.Timeout(30, read=10)) as http:

        @hostile_settings(20)
        @given(request=hostile.rest_requests(case, pools, key=key, live=True))
        def attempt(request: hostile.RestHostileRequest) -> None:
            assert not hostile.foreign_url(request.body, pools.urls)  # never off this machine
            base = live.urls[next(turn) % 2]
            try:
                status, content_type, body, complete = rest_exchange(http, base, request)
            except NoAnswer:
                if not KEEP_GOING:
                    raise
                run.tally.outcomes[(0, "BROKEN NoAnswer")] += 1
                run.broken.setdefault("NoAnswer", [0, request.describe()])[0] += 1
                return
            run.judge(request, status, content_type, body, complete)

        separate_database_key(attempt, f"across daphne HTTP+JSON {case}")
        attempt()

    run.finish()
    still_readable(send, key, tasks)
    time.sleep(1)
    for name, start in logs_before.items():
        written = (live.logs / f"{name}.log").read_bytes()[start:].decode("utf-8", "replace")
        assert "Traceback" not in written, f"{name} logged a traceback during the run:\n{written[-4000:]}"


# --- the tools themselves -----------------------------------------------------------------------------


def test_an_id_is_usable_only_if_the_server_can_echo_it_exactly():
    rule = hostile.id_rule
    assert rule(b'{"id": "a", "method": "x"}') == ("a", ("a",))
    assert rule(b'{"params": {"id": 2}, "id": 1.5}') == (1.5, (1.5,))
    assert rule(b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b', "id": 7}') == (7, (7,))  # any depth is read
    assert rule(b'{"id": 1, "params": {"n": 1e400}}') == (1, (1,))  # JSON, though no store holds it
    assert rule(b'{"id": 18446744073709551615}')[0] == 2**64 - 1
    for body in (
        b'{"method": "x"}',
        b'{"id": null}',
        b"[1]",
        b"{",
        b'{"id": 1} x',
        b'{"id": true}',
        b'{"id": {}}',
        b'{"id": NaN}',
        b'{"id": 1e400}',
        b'\xff{"id": 1}',
        b"",
    ):
        assert rule(body) == (None, (None,)), body
    assert rule(b'{"id": 1, "id": 2}') == (None, (None, 1, 2))
    assert rule(b'{"id": "\\u0000"}') == (None, (None, "\x00"))
    assert rule(b'\xef\xbb\xbf{"id": 3}') == (None, (None, 3))
    assert rule(b'{"id": 18446744073709551616}') == (None, (None, "18446744073709551616"))


def test_no_live_body_can_name_a_host_outside_the_loopback_literals():
    allowed = hostile.LIVE_URLS
    assert not hostile.foreign_url(orjson.dumps({"url": allowed[1], "path": "text/plain"}), allowed)
    for url in (
        "http://example.com/",
        "https://10.0.0.1/",
        "//evil",
        "http:/\\/x",
        "http:\\/\\/x",
        "h:/\\t/x",
        "http:\\u002f\\u002Fx",
        allowed[0] + "@evil.test",
        "x" + allowed[0],
    ):
        assert hostile.foreign_url(b'{"url": "' + url.encode() + b'"}', allowed), url


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(data=st.data(), method=st.sampled_from(CASES))
def test_live_requests_follow_the_schema_and_the_network_rules(data, method):
    pools = Pools(task_ids=[str(uuid.uuid4())], context_ids=["c"])
    request = data.draw(hostile.requests(method, pools, key="ask_1_secret", live=True))
    assert not hostile.foreign_url(request.body, pools.urls)
    for name, value in request.headers.items():  # what an HTTP client can send
        assert not set(value) & {0, 10, 13} and value == value.strip(b" \t"), (name, value)
        assert not set(value) & hostile.DAPHNE_REFUSES, (name, value)
    unmutated = data.draw(hostile.params_for(method or "SendMessage", pools))
    known = hostile.known_members(method or "SendMessage")
    assert set(unmutated) <= known


# --- Host headers (protocols.hosts: a bound name serves its agent at the root) -------------------

BOUND = "bound.example"
HOST_PATHS = [
    "/",
    "/.well-known/agent-card.json",
    "/.well-known/agent-card-jwks.json",
    "/admin/",
    "/agents/acme/echo/",
    "/message:send",
    "/aip/rpc",
]
# What a client may put in Host: garbage, very long, unicode (IDNA or not), near misses of the
# bound name, with and without ports and brackets.
HOSTS = st.one_of(
    st.text(max_size=40),
    st.text(min_size=250, max_size=2000),
    st.from_regex(r"[a-zA-Z0-9.\-\[\]:_]{0,80}", fullmatch=True),
    st.sampled_from(
        [BOUND, BOUND.upper(), f"{BOUND}.", f"{BOUND}:8000", f"{BOUND}:99999", f"[{BOUND}]", "bücher.example"]
    ),
    st.builds(lambda a, b: f"{a}.{BOUND}{b}", st.text(max_size=5), st.text(max_size=6)),
)


@pytest.fixture
def bound_name(world):
    from accounts.host_services import host_bind
    from accounts.models import Agent

    host_bind(agent=Agent.objects.get(tenant__slug="acme", slug="echo"), host=BOUND)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=HOSTS, path=st.sampled_from(HOST_PATHS))
def test_no_host_header_is_an_internal_error_in_process(client, bound_name, host, path):
    note(repr(host))
    try:
        answer = client.get(path, HTTP_HOST=host)
    except UnicodeEncodeError:
        return  # no WSGI server hands such a header over: it must be latin-1
    assert answer.status_code < 500, (host, path, answer.content[:300])
    if answer.status_code == 200 and path == "/.well-known/agent-card.json":
        assert orjson.loads(answer.content)["name"] == "Echo"  # only the bound agent answers at a root


@pytest.mark.django_db(transaction=True)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=st.binary(max_size=300) | HOSTS.map(lambda h: h.encode("utf-8")), path=st.sampled_from(HOST_PATHS))
def test_no_host_header_is_an_internal_error_through_the_asgi_router(bound_name, host, path):
    from agentserver.asgi import application

    note(repr(host))
    status, body = run_async(asgi_get(application, path, host))
    assert status < 500, (host, path, body[:300])


# --- signed cards and their key set (protocols.card_signing) -------------------------------------

KEY_SET_PATHS = st.one_of(
    st.sampled_from(["/.well-known/agent-card-jwks.json", "/agents/acme/echo/.well-known/agent-card-jwks.json"]),
    st.builds(
        "/agents/{}/{}/.well-known/agent-card-jwks.json".format,
        st.sampled_from(["acme", "ACME", "nobody", "a" * 300, "%00", "acme%2F", "-", "_x"]),
        st.sampled_from(["echo", "conformance", "nobody", "ech", "e" * 300, "%2e%2e", "ECHO"]),
    ),
)
CARD_HEADERS = st.dictionaries(
    st.sampled_from(["A2A-Version", "If-None-Match", "If-Modified-Since", "Accept", "X-API-Key"]),
    st.one_of(st.text(max_size=60), st.sampled_from(["0.3", "1.0", "*", '"x", W/"y"', "0.1", "2.0"])),
    max_size=4,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=KEY_SET_PATHS,
    method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"]),
    headers=CARD_HEADERS,
    query=st.sampled_from(["", "?A2A-Version=0.3", "?%", "?kid=x&kid=y", "?" + "a" * 3000]),
)
def test_no_request_for_the_card_key_set_is_an_internal_error(client, world, path, method, headers, query):
    try:
        answer = client.generic(method, path + query, headers=headers)
    except UnicodeEncodeError:
        return  # no WSGI server hands such a header over: it must be latin-1
    assert answer.status_code in (200, 404, 405), (path, method, answer.content[:300])
    if answer.status_code == 200:
        assert method in ("GET", "HEAD")
        if method == "GET":
            keys = orjson.loads(answer.content)["keys"]
            assert keys and all(set(k) == {"kty", "crv", "x", "y", "kid", "use", "alg"} for k in keys)
    elif method == "GET":
        assert "error" in orjson.loads(answer.content)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    agent=st.sampled_from(["echo", "conformance"]),
    headers=CARD_HEADERS,
    query=st.sampled_from(["", "?A2A-Version=0.3", "?A2A-Version=", "?A2A-Version=%00", "?%zz"]),
)
def test_every_card_a_hostile_request_gets_is_signed_and_verifies(client, world, agent, headers, query):
    from registry.cards.signatures import verify_signatures

    try:
        answer = client.get(f"/agents/acme/{agent}/.well-known/agent-card.json{query}", headers=headers)
    except UnicodeEncodeError:
        return
    assert answer.status_code in (200, 304), answer.content[:300]
    if answer.status_code == 200:
        card = orjson.loads(answer.content)
        if "supportedInterfaces" not in card and card.get("protocolVersion") != "0.3.0":
            assert "signatures" not in card  # 0.1's card (A2A-Version: 0.1), which has no such member
            return
        jwks = orjson.loads(client.get(f"/agents/acme/{agent}/.well-known/agent-card-jwks.json").content)
        checks = verify_signatures(card, jwks_fetcher=lambda url: jwks)
        assert checks and checks[0].valid, checks


# --- the directory's attestation routes -------------------------------------------------------
#
# Entry ids and statement ids as anyone may type them (numbers out of range, signs, text, escapes,
# separators): every answer is below 500, JSON from the routes themselves (the JWS of an entry
# that has one), the site's 404 page for a path no route has.

ATTESTATION_SEGMENTS = (
    st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | st.text(max_size=80)
    | st.sampled_from(["0", "00", "-1", "1e3", "%00", "%2e%2e", "..", "9" * 40, "1/", "\u202e1"])
)


@pytest.fixture
def attested_entry(db):
    from datetime import timedelta

    from django.utils import timezone

    from registry.models import Attestation
    from tests.registry_factories import make_entry

    entry = make_entry(name="Attested")
    now = timezone.now()
    Attestation.objects.create(
        entry=entry,
        jti="a" * 32,
        token="h.c.s",
        card_hash=entry.current_version.hash,
        issued_at=now,
        expires_at=now + timedelta(days=1),
    )
    return entry


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segment=ATTESTATION_SEGMENTS, route=st.sampled_from(["entry", "status", "api", "jwks"]))
def test_no_attestation_url_is_an_internal_error(client, attested_entry, segment, route):
    from urllib.parse import quote

    quoted = quote(segment, safe="")
    path = {
        "entry": f"/registry/{quoted}/attestation.jwt",
        "status": f"/registry/attestations/{quoted}/",
        "api": f"/api/registry/agents/{quoted}/attestation/",
        "jwks": f"/registry/jwks.json?kid={quoted}",
    }[route]
    note(path)
    answer = client.get(path)
    assert answer.status_code < 500, (path, answer.content[:300])
    if answer["Content-Type"] == "application/jwt":
        assert answer.content == b"h.c.s" and route == "entry"
    elif answer.status_code == 404 and answer["Content-Type"].startswith("text/html"):
        # No route has this path at all (`-1` is no <int:pk>): the site's own 404 page.
        assert route in ("entry", "status"), path
    else:
        assert isinstance(orjson.loads(answer.content), dict), path
