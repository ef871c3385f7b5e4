"""The timestamp extension (named in A2A's extensions document, seed 002; its specification is
in a2aproject/a2a-samples, extensions/timestamp/v1): while a client has it activated, every
message and artifact the agent writes carries, in its metadata, the time it was created.

The example of a server extension (docs/extensions.md): an agent gets it by declaring the URI
in its card's extensions; no executor changes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .extensions import ExtensionUse, ServerExtension

# The URI and the metadata key exactly as the extension's specification writes them (its
# sample libraries write the path without `samples/`; the specification says its URI is the
# only one accepted).
URI = "https://github.com/a2aproject/a2a-samples/samples/extensions/timestamp/v1"
FIELD = "github.com/a2aproject/a2a-samples/samples/extensions/timestamp/v1/timestamp"


def now_rfc3339() -> str:
    """Now, in UTC, as RFC 3339 with microseconds (the specification: at least seconds, at most
    nanoseconds, UTC)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class TimestampExtension(ServerExtension):
    uri = URI
    description = "Adds the time of creation to the metadata of every message and artifact the agent writes."

    def _stamped(self, metadata: dict[str, Any]) -> dict[str, Any]:
        # An agent that set the time itself knows better when it made the object.
        return metadata if FIELD in metadata else {**metadata, FIELD: now_rfc3339()}

    def message_metadata(self, metadata: dict[str, Any], use: ExtensionUse) -> dict[str, Any]:
        return self._stamped(metadata)

    def artifact_metadata(self, metadata: dict[str, Any], use: ExtensionUse) -> dict[str, Any]:
        return self._stamped(metadata)
