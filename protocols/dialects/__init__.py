"""The dialect registry: every wire dialect the agent endpoint speaks, and which one a request
speaks. A dialect is one package here that declares a `WireDialect` (`base.py`); adding one is
that package and one line in `DIALECTS`. The flow every dialect shares is `protocols.exchange`."""

from __future__ import annotations

from tasks_app import storable
from tasks_app.errors import VersionNotSupported

from .a2a_v03 import DIALECT as A2A_V03
from .a2a_v1 import DIALECT as A2A_V1
from .base import Handler, WireDialect

__all__ = ["DIALECTS", "Handler", "WireDialect", "card_for", "default", "for_request", "version_missing"]

# The first is the default: its card is the one at the well-known path.
DIALECTS: list[WireDialect] = [A2A_V1, A2A_V03]


def for_request(version: str, method: str) -> WireDialect | None:
    """The dialect a request speaks, by its A2A-Version and its method; None if a dialect of
    that version exists but none has the method. VersionNotSupported if none answers the version."""
    speaking = [d for d in DIALECTS if version in d.versions]
    if not speaking:
        raise _unsupported(version)
    return next((d for d in speaking if method in d.methods), None)


def _unsupported(version: str) -> VersionNotSupported:
    spoken = ", ".join(d.label for d in DIALECTS)
    return VersionNotSupported(f"A2A version {storable.brief(version)} is not supported; this endpoint speaks {spoken}")


def version_missing(version: str, method: str) -> VersionNotSupported | None:
    """For a request without A2A-Version whose method no dialect without one has (for_request
    found none) but a versioned one does: the error that says which header to send. It is
    most likely a client of that version that forgot the header (HTTP+JSON's routes, all 1.0's,
    come here too: 0.3's REST routes were others)."""
    if version:
        return None
    owners = [d.label for d in DIALECTS if method in d.methods and "" not in d.versions]
    if not owners:
        return None
    unversioned = " or ".join(d.label for d in DIALECTS if "" in d.versions)
    return VersionNotSupported(
        f"a request without A2A-Version means A2A {unversioned}, which has no method {storable.brief(method)}; "
        f"send the header A2A-Version: {owners[0]}"
    )


def default() -> WireDialect:
    return DIALECTS[0]


def card_for(version: str) -> WireDialect:
    """The dialect whose card a card request gets: the one its A2A-Version names, else the
    default. Not "no header means 0.3" as for a request: a card fetched without one stays the
    default's (the 1.0 suite fetches it so, and checks it strictly; docs/dialects.md)."""
    if version:
        for dialect in DIALECTS:
            if version in dialect.versions:
                return dialect
    return default()
