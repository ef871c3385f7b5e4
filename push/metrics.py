"""What push counts, for Prometheus (docs/operations.md)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

DELIVERIES = Counter(
    "agentserver_push_attempts", "Push notification attempts, by outcome (delivered, retry, dead, lost).", ["outcome"]
)
DELIVERY_SECONDS = Histogram(
    "agentserver_push_attempt_seconds",
    "How long a push attempt's POST took (connect to the whole answer read).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
