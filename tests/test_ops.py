"""Operating the server (issue 26, first step): /healthz, /readyz failing for each dependency
that is down, and /metrics counting requests, runs, pushes and the store's gauges, in one
process and summed across daphne and a Celery worker's children; a worker's own metrics port."""

from __future__ import annotations

import re
import socket
import time
from datetime import timedelta

import httpx
import pytest
from django.db import connections
from django.utils import timezone
from opentelemetry.trace import SpanKind

from tasks_app.models import Task
from tests.conftest import user_message

pytestmark = pytest.mark.django_db(transaction=True)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition, 0 if it is not there."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if match and match[1] == name:
            found = ",".join(sorted((match[2] or "").split(","))) if match[2] else ""
            if found == wanted:
                return float(match[3])
    return 0.0


def test_healthz_answers_while_the_process_lives(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["ok"] is True


def test_readyz_is_ready_when_postgres_redis_and_the_queue_answer(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["ready"] is True and set(body["checks"]) == {"postgres", "redis", "queue"}
    assert all(check["ok"] for check in body["checks"].values())
    assert response["Cache-Control"] == "no-store"


def test_readyz_fails_when_postgres_does_not_answer(client, monkeypatch):
    monkeypatch.setitem(connections["default"].settings_dict, "PORT", closed_port())
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks == {"postgres": {"ok": False}, "redis": {"ok": True}, "queue": {"ok": False}}


def test_readyz_fails_when_redis_does_not_answer_and_says_why_only_in_the_log(client, settings, caplog):
    port = closed_port()
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"postgres": {"ok": True}, "redis": {"ok": False}, "queue": {"ok": True}}
    # The backend's error (its host, port, exception) is the operator's, not any caller's.
    assert str(port) not in response.content.decode() and "Error" not in response.content.decode()
    assert "readiness: redis failed" in caplog.text and "ConnectionError" in caplog.text and str(port) in caplog.text


def test_readyz_fails_when_the_broker_does_not_answer(client, settings):
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["checks"]["queue"]["ok"] is False


def test_readyz_fails_when_no_worker_has_taken_a_run_for_too_long(client, settings, echo_agent, alice_key, rpc, caplog):
    from tasks_app import dispatch

    settings.READY_MAX_QUEUE_AGE = 60
    original = dispatch.enqueue_run
    dispatch.enqueue_run = lambda **kwargs: None  # no worker takes it
    try:
        rpc.send("/agents/acme/echo/", key=alice_key, configuration={"returnImmediately": True})
    finally:
        dispatch.enqueue_run = original
    assert client.get("/readyz").status_code == 200  # queued a moment ago: fine
    Task.objects.update(run_requested_at=timezone.now() - timedelta(seconds=61))
    with caplog.at_level("WARNING", logger="ops.views"):
        response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["checks"]["queue"] == {"ok": False}
    assert "the oldest of 1 queued runs has waited 61 s" in caplog.text


def test_metrics_are_off_unless_enabled_and_then_only_for_the_token_when_one_is_set(client, settings):
    settings.METRICS_ENABLED = False
    assert client.get("/metrics").status_code == 404
    settings.METRICS_ENABLED, settings.METRICS_TOKEN = True, "s3cret"
    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    allowed = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert allowed.status_code == 200 and allowed["Content-Type"].startswith("text/plain")


def test_without_a_token_metrics_are_served_to_no_one_unless_debug_or_metrics_public(client, settings, echo_agent):
    """A deployment that turned metrics on and forgot the token fails closed: /metrics names
    every tenant's agents, private ones too."""
    settings.METRICS_ENABLED, settings.METRICS_TOKEN, settings.DEBUG, settings.METRICS_PUBLIC = True, "", False, False
    for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Bearer anything"}):
        refused = client.get("/metrics", headers=headers)
        assert refused.status_code == 403 and b"METRICS_TOKEN" in refused.content, headers
        assert b"agentserver_" not in refused.content
    settings.METRICS_PUBLIC = True  # the operator says the network keeps them private
    assert b"agentserver_requests_total" in client.get("/metrics").content
    settings.METRICS_PUBLIC, settings.DEBUG = False, True  # local development
    assert client.get("/metrics").status_code == 200


def test_metrics_count_requests_by_method_and_outcome_runs_by_agent_and_the_store(
    client, settings, rpc, echo_agent, alice_key
):
    settings.METRICS_ENABLED, settings.METRICS_STORE_EVERY, settings.METRICS_PUBLIC = True, 0, True
    before = client.get("/metrics").content.decode()
    rpc.send("/agents/acme/echo/", key=alice_key)
    rpc("/agents/acme/echo/", "GetTask", {"id": "nope"}, key=alice_key)
    after = client.get("/metrics").content.decode()
    ok = {"binding": "JSONRPC", "dialect": "a2a/1.0", "method": "SendMessage", "outcome": "ok"}
    assert sample(after, "agentserver_requests_total", **ok) == sample(before, "agentserver_requests_total", **ok) + 1
    missing = {"binding": "JSONRPC", "dialect": "a2a/1.0", "method": "GetTask", "outcome": "TASK_NOT_FOUND"}
    assert sample(after, "agentserver_requests_total", **missing) >= 1
    runs = "agentserver_run_seconds_count"
    assert sample(after, runs, agent="acme/echo") == sample(before, runs, agent="acme/echo") + 1
    assert sample(after, "agentserver_tasks", state="completed") >= 1
    assert "agentserver_run_queue_depth" in after and "agentserver_request_seconds_bucket" in after


def test_a_method_no_dialect_has_is_counted_as_unknown_not_by_its_name(client, settings, rpc, echo_agent, alice_key):
    settings.METRICS_ENABLED, settings.METRICS_PUBLIC = True, True
    rpc("/agents/acme/echo/", "Mine/AllYours", {}, key=alice_key)
    text = client.get("/metrics").content.decode()
    assert "Mine/AllYours" not in text
    labels = {"binding": "JSONRPC", "dialect": "", "method": "unknown", "outcome": "METHOD_NOT_FOUND"}
    assert sample(text, "agentserver_requests_total", **labels) >= 1


def send_with_push(base: str, key: str, text: str, config: dict) -> dict:
    """A blocking SendMessage to the echo agent over HTTP, with a push config inline; the result."""
    params = {"message": user_message(text), "configuration": {"taskPushNotificationConfig": config}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    headers = {"X-API-Key": key, "A2A-Version": "1.0"}
    return httpx.post(f"{base}/agents/acme/echo/", json=body, headers=headers, timeout=30).json()["result"]


@pytest.mark.live
def test_metrics_sum_the_web_and_worker_processes(live, echo_agent, alice_key, receiver):
    before = httpx.get(f"{live.urls[1]}/metrics", timeout=10).text
    assert send_with_push(live.url, alice_key, "count me", {"url": receiver.url(), "id": "p"})
    receiver.wait_for(lambda requests: len(requests) >= 3)  # submitted, the artifact, completed
    # The other web process reads what the first one and the worker's children counted.
    after = httpx.get(f"{live.urls[1]}/metrics", timeout=10).text
    ok = {"binding": "JSONRPC", "dialect": "a2a/1.0", "method": "SendMessage", "outcome": "ok"}
    assert sample(after, "agentserver_requests_total", **ok) == sample(before, "agentserver_requests_total", **ok) + 1
    runs = "agentserver_run_seconds_count"
    assert sample(after, runs, agent="acme/echo") >= sample(before, runs, agent="acme/echo") + 1
    assert sample(after, "agentserver_runs_total", outcome="done") >= 1
    assert sample(after, "agentserver_push_attempts_total", outcome="delivered") >= 3
    assert sample(after, "agentserver_push_attempt_seconds_count") >= 3


# --- traces --------------------------------------------------------------------------------------


@pytest.fixture
def spans(monkeypatch):
    """This process traced into memory; the instrumentations undone afterwards."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentserver import tracing

    exporter = InMemorySpanExporter()
    monkeypatch.setattr(tracing, "_provider", None)
    assert tracing.configure(service="agentserver-test", exporter=exporter)
    connections.close_all()  # the instrumentation traces the connections made from now on
    yield exporter
    tracing.uninstrument()


def test_one_trace_joins_the_request_the_agents_run_and_its_push_deliveries(
    spans, rpc, echo_agent, alice_key, receiver, monkeypatch
):
    from push import delivery, dispatch

    # Deliveries as the worker makes them (here eagerly, in this process), not only recorded.
    monkeypatch.setattr(
        dispatch, "enqueue_delivery", lambda *, config_pk, countdown=None: delivery.run(config_pk=config_pk)
    )
    config = {"url": receiver.url(), "id": "traced"}
    assert rpc.send("/agents/acme/echo/", key=alice_key, configuration={"taskPushNotificationConfig": config}).result
    finished = spans.get_finished_spans()
    request = next(s for s in finished if s.name == "agent request JSONRPC")
    assert request.attributes["agentserver.method"] == "SendMessage"
    assert request.attributes["agentserver.agent"] == "acme/echo"
    trace_id = request.context.trace_id
    run = [s for s in finished if s.name.endswith("tasks_app.tasks.run_agent")]
    pushes = [s for s in finished if s.name == "push deliver"]
    assert run and all(s.context.trace_id == trace_id for s in run)
    assert len(pushes) >= 3 and all(s.context.trace_id == trace_id for s in pushes)
    assert {s.attributes["agentserver.outcome"] for s in pushes} == {"delivered"}
    # Each delivery's POST is a client span below it, and carries the trace to the receiver.
    posts = [s for s in finished if s.parent and s.parent.span_id in ids(pushes) and is_http_post(s)]
    assert len(posts) == len(pushes)
    assert {r.headers["traceparent"].split("-")[1] for r in receiver.requests} == {f"{trace_id:032x}"}
    # The store's and Redis's calls are in it too.
    assert any(s.context.trace_id == trace_id and s.attributes.get("db.system") == "postgresql" for s in finished)


def ids(spans) -> set[int]:
    return {s.context.span_id for s in spans}


def is_http_post(span) -> bool:
    method = span.attributes.get("http.request.method", span.attributes.get("http.method"))
    return span.kind == SpanKind.CLIENT and method == "POST"


def test_a_django_page_is_traced_from_its_http_request(spans, client):
    assert client.get("/registry/").status_code == 200
    (page,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert page.attributes["http.route"] == "registry/" and page.name == "GET registry/"


def test_traces_are_off_unless_configured(settings, monkeypatch):
    from agentserver import tracing

    monkeypatch.setattr(tracing, "_provider", None)
    settings.TRACING_EXPORTER = ""
    assert tracing.configure(service="agentserver-test") is False
    settings.TRACING_EXPORTER = "carrier-pigeon"
    with pytest.raises(ValueError, match="otlp, console or file"):
        tracing.configure(service="agentserver-test")


@pytest.fixture
def traced(live, tmp_path):
    """A daphne and a Celery worker of their own, traced into a file, on a queue of their own
    (the shared live worker must not take their runs), over the live stack's database."""
    from tests.conftest import _free_port, serving

    spans = tmp_path / "spans.jsonl"
    env = {**live.env, "TRACING_EXPORTER": f"file:{spans}", "CELERY_QUEUE": "traced"}
    port = _free_port()
    with serving(env, [port], tmp_path):
        yield f"http://127.0.0.1:{port}", spans


@pytest.mark.live
def test_one_trace_joins_the_request_in_daphne_the_run_and_the_deliveries_in_worker_processes(
    traced, echo_agent, alice_key, receiver
):
    import json

    url, spans = traced
    assert send_with_push(url, alice_key, "trace me", {"url": receiver.url(), "id": "traced"})
    receiver.wait_for(lambda requests: len(requests) >= 3)

    def recorded() -> list[dict]:
        return [json.loads(line) for line in spans.read_text().splitlines()] if spans.exists() else []

    def joined(found: list[dict]) -> bool:
        requests = [s for s in found if s["name"] == "agent request JSONRPC"]
        if not requests:
            return False
        trace_id = requests[0]["trace_id"]
        return sum(s["name"] == "push deliver" and s["trace_id"] == trace_id for s in found) >= 3 and any(
            s["name"].endswith("run_agent") and s["trace_id"] == trace_id for s in found
        )

    deadline = time.monotonic() + 15
    while not joined(found := recorded()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert joined(found), [(s["service"], s["name"], s["trace_id"][:8]) for s in found if s["parent_id"] == ""]
    request = next(s for s in found if s["name"] == "agent request JSONRPC")
    assert request["service"] == "agentserver-web" and request["attributes"]["agentserver.method"] == "SendMessage"
    # Its root is daphne's HTTP request, the ASGI instrumentation's server span.
    (http,) = [s for s in found if s["span_id"] == request["parent_id"]]
    assert http["kind"] == "SERVER" and http["parent_id"] == "" and http["name"].startswith("POST")
    services = {s["service"] for s in found if s["trace_id"] == request["trace_id"]}
    assert services == {"agentserver-web", "agentserver-worker"}


# --- a worker's own metrics port (Kubernetes scrapes each pod) -----------------------------------


@pytest.fixture
def metered_worker(live, tmp_path):
    """A Celery worker of its own serving its children's counts on WORKER_METRICS_PORT to a
    bearer of METRICS_TOKEN, with a metrics directory of its own (a pod's emptyDir) and a queue
    of its own (the shared live worker must not take its runs), over the live stack's database."""
    from tests.conftest import _free_port, serving

    port, metrics_dir = _free_port(), tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {
        **live.env,
        "WORKER_METRICS_PORT": str(port),
        "WORKER_METRICS_ADDR": "127.0.0.1",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "METRICS_TOKEN": "worker-s3cret",
        "CELERY_QUEUE": f"metered-{port}",
    }
    with serving(env, [], tmp_path):
        yield f"http://127.0.0.1:{port}/metrics", env["CELERY_QUEUE"]


@pytest.mark.live
def test_a_worker_serves_the_counts_of_its_children_on_its_metrics_port(
    metered_worker, rpc, echo_agent, alice_key, monkeypatch
):
    from agentserver.celery import app as celery_app
    from tasks_app import dispatch

    url, queue = metered_worker
    bearer = {"Authorization": "Bearer worker-s3cret"}
    refused = httpx.get(url, timeout=10)
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert "agentserver_" not in refused.text
    assert httpx.get(url, headers={"Authorization": "Bearer nope"}, timeout=10).status_code == 401
    before = httpx.get(url, headers=bearer, timeout=10)
    assert before.status_code == 200 and sample(before.text, "agentserver_runs_total", outcome="done") == 0

    runs = []
    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: runs.append(kw))
    rpc.send("/agents/acme/echo/", key=alice_key, configuration={"returnImmediately": True})
    celery_app.conf.task_always_eager = False  # really through the broker, to that worker's queue
    celery_app.send_task(dispatch.RUN_AGENT, args=(str(runs[0]["task_id"]), str(runs[0]["run_token"])), queue=queue)

    deadline = time.monotonic() + 15
    while sample(text := httpx.get(url, headers=bearer, timeout=10).text, "agentserver_runs_total", outcome="done") < 1:
        assert time.monotonic() < deadline, text
        time.sleep(0.2)
    assert sample(text, "agentserver_runs_total", outcome="done") == 1  # counted in a child, served by the parent
    assert sample(text, "agentserver_run_seconds_count", agent="acme/echo") == 1
    assert "agentserver_tasks{" not in text  # the store's gauges come from the web pods only


def test_the_worker_metrics_server_answers_only_a_bearer_of_the_token_when_one_is_set(settings):
    from ops import metrics
    from tests.conftest import _free_port

    port = _free_port()
    server = metrics.serve(port=port, addr="127.0.0.1", registry=metrics.registry(store=False))
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        settings.METRICS_TOKEN, settings.METRICS_PUBLIC = "", False
        no_token = httpx.get(url, timeout=5)
        assert no_token.status_code == 403 and "agentserver_" not in no_token.text  # fails closed
        settings.METRICS_PUBLIC = True
        assert httpx.get(url, timeout=5).status_code == 200
        settings.METRICS_TOKEN = "s3cret"
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "s3cret-and-more"}):
            refused = httpx.get(url, headers=headers, timeout=5)
            assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == 'Bearer realm="metrics"'
        allowed = httpx.get(url, headers={"Authorization": "Bearer s3cret"}, timeout=5)
        assert allowed.status_code == 200 and "agentserver_runs_total" in allowed.text
    finally:
        server.shutdown()
        server.server_close()


def test_a_worker_serves_no_metrics_unless_asked_or_without_a_directory_its_children_share(
    settings, monkeypatch, caplog
):
    from ops import metrics

    settings.WORKER_METRICS_PORT = 0
    assert metrics.serve_worker() is None
    settings.WORKER_METRICS_PORT = closed_port()
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    assert metrics.serve_worker() is None
    assert "WORKER_METRICS_PORT is set but PROMETHEUS_MULTIPROC_DIR is not" in caplog.text


def test_metrics_on_without_a_token_is_a_warning_at_start(settings):
    from django.core.checks import run_checks

    settings.METRICS_ENABLED, settings.METRICS_TOKEN, settings.DEBUG, settings.METRICS_PUBLIC = True, "", False, False
    assert "ops.W001" in [m.id for m in run_checks()]
    settings.METRICS_TOKEN = "s3cret"
    assert "ops.W001" not in [m.id for m in run_checks()]
