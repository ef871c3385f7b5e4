"""Extensions seen from an agent's run (docs/extensions.md).

An agent's card declares the extensions it supports; a client activates some of them on a
request (`protocols.extensions`); the run of the agent that answers that request sees which,
with their parameters and metadata, through `AgentContext.extensions` and
`AgentContext.extension(uri)`. Most extensions are the executor's own business: it reads that
and acts. An extension whose work is the same for every agent (the timestamp extension: a time
on every message and artifact the agent writes) is written once as a `ServerExtension`, which
the AgentContext applies to what the agent writes while that extension is active. Server
extensions come from the entry point group `agentserver.extensions` (plugins.py), as executors do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class ExtensionUse:
    """An extension activated on the request the agent is answering."""

    uri: str
    params: dict[str, Any] = field(default_factory=dict)  # as the agent's card declares them
    required: bool = False
    # The request's and the message's metadata entries filed under the extension's URI
    # (`<uri>/<name>`, with or without the URI's scheme), keys as the client wrote them.
    metadata: dict[str, Any] = field(default_factory=dict)


class ServerExtension:
    """Work the server does for every agent that declares the extension `uri`, while a client
    has it activated. Subclass, set `uri`, override what the extension changes (each hook gets
    and returns the metadata of one object the agent writes), and declare it in your
    distribution's entry points (group `agentserver.extensions`)."""

    uri: ClassVar[str]
    description: ClassVar[str] = ""

    def message_metadata(self, metadata: dict[str, Any], use: ExtensionUse) -> dict[str, Any]:
        """The metadata of a message the agent writes (a status message or a bare reply)."""
        return metadata

    def artifact_metadata(self, metadata: dict[str, Any], use: ExtensionUse) -> dict[str, Any]:
        """The metadata of an artifact (or an artifact's chunk) the agent writes."""
        return metadata


# Each server extension by its URI (filled by plugins.load_all).
EXTENSIONS: dict[str, type[ServerExtension]] = {}


def uses(declared: list[dict[str, Any]], activated: list[dict[str, Any]]) -> list[ExtensionUse]:
    """The activated extensions ({"uri", "metadata"}, as the client's message keeps them), each
    with what the agent's card declares of it. An extension the card no longer declares (its
    tenant removed it since the request) is left out."""
    by_uri = {e.get("uri"): e for e in declared if isinstance(e, dict)}
    found = []
    for item in activated:
        card = by_uri.get(item.get("uri"))
        if card is None:
            continue
        found.append(
            ExtensionUse(
                uri=item["uri"],
                params=dict(card.get("params") or {}),
                required=bool(card.get("required")),
                metadata=dict(item.get("metadata") or {}),
            )
        )
    return found
