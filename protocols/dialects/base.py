"""What a dialect declares (see the registry, `protocols.dialects`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tasks_app.encoders import EventEncoder, PushHeaders, TaskEncoder
from tasks_app.errors import DomainError

from .. import jsonrpc
from ..exchange import Call

Handler = Callable[[Call, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class WireDialect:
    name: str  # the value tasks_app.lifecycle.Dialect stores on the tasks it creates
    label: str  # the version as people write it, for messages
    versions: frozenset[str]  # the A2A-Version values it answers ("" for none sent)
    methods: Mapping[str, Handler]
    encode_event: EventEncoder  # a stored event as its streams and push notifications carry it
    encode_task: TaskEncoder  # a TaskView as its get-task method returns it (the admin shows it too)
    card: Callable[..., dict[str, Any]] | None  # (agent, *, base_url, url) -> its agent card (AIP has none)
    error: Callable[[Any, DomainError], bytes] = field(default=jsonrpc.domain_error)  # (id, error) -> response
    # The body of a push notification, when it is not the event as encode_event writes it
    encode_push: EventEncoder | None = None
    # What it calls the store's states, where its names differ (AIP: submitted is "accepted")
    state_names: Callable[[str], str] | None = None
    # How its push notifications are labelled (media type, the token's header)
    push_headers: PushHeaders = field(default_factory=PushHeaders)
    # The response headers that echo the activated extensions (0.3 peers may read the X- name);
    # none: the dialect has no A2A extensions (AIP), and an agent's required ones do not apply
    extension_headers: tuple[str, ...] = ("A2A-Extensions",)
    # The creating dialects (tasks_app.lifecycle.Dialect) of the tasks for which it answers a
    # method it shares with another dialect of the same A2A-Version (a request without one:
    # A2A 0.1 and 0.3 both have tasks/get). Of such dialects, the one that claims the named
    # task's dialect answers; for any other task, the one that claims none (`dialects.by_task`).
    claims: frozenset[str] = frozenset()
