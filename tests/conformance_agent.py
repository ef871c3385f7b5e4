"""A fake A2A agent for the directory's conformance and attestation tests: a CardServer on
127.0.0.1 behind a FakeDns name, answering JSON-RPC as the spec says an agent with no
streaming, no push and no extended card does, and the approved entries whose card it serves."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from registry.models import Entry
from tests.card_server import CardServer, Page
from tests.registry_factories import card_document, make_entry

HOST = "agent.conformance.test"
CARD_PATH = "/.well-known/agent-card.json"
# The only methods a run may send: reads of a made-up task or of the extended card.
SAFE_METHODS = {
    "GetTask",
    "SubscribeToTask",
    "GetTaskPushNotificationConfig",
    "GetExtendedAgentCard",
    "tasks/get",
    "tasks/resubscribe",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotification/get",
    "agent/getAuthenticatedExtendedCard",
}


def error(request_id: Any, code: int, message: str = "no") -> Page:
    return Page(
        200,
        {"Content-Type": "application/json"},
        orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}),
    )


def conforming_jsonrpc(body: bytes) -> Page:
    """An A2A 1.0 JSON-RPC agent with no streaming, no push and no extended card, as the spec says."""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError:
        return error(None, -32700, "Parse error")
    codes = {
        "GetTask": -32001,
        "SubscribeToTask": -32004,
        "GetTaskPushNotificationConfig": -32003,
        "GetExtendedAgentCard": -32004,
    }
    return error(request.get("id"), codes.get(request.get("method"), -32601))


def running_agent(dns: Any) -> Iterator[CardServer]:
    """The body of each module's `agent` fixture."""
    dns[HOST] = ["127.0.0.1"]
    running = CardServer().start()
    running.posts["/rpc"] = conforming_jsonrpc
    yield running
    running.stop()


def approved_entry(agent: CardServer, **spec: Any) -> Entry:
    """An approved entry whose card `agent` serves, exactly as approved."""
    spec = {"name": "Conformance agent", "url": agent.url("/rpc", host=HOST), **spec}
    agent.serve(CARD_PATH, card_document(**spec))
    return make_entry(card_url=agent.url(CARD_PATH, host=HOST), **spec)
