"""What the agent endpoint counts, for Prometheus (docs/operations.md). Labels take only
values the server knows (a method no dialect has is "unknown"): a client cannot grow them."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REQUESTS = Counter(
    "agentserver_requests",
    "Requests to agent endpoints, by binding, dialect, method and outcome (ok, stream, the error's code, or "
    "the HTTP status of a refusal before the method).",
    ["binding", "dialect", "method", "outcome"],
)
REQUEST_SECONDS = Histogram(
    "agentserver_request_seconds",
    "Time to answer a request to an agent endpoint (a stream: until its headers go out), by binding and method.",
    ["binding", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 150),
)
