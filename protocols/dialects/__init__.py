"""The dialect registry: every wire dialect the agent endpoint speaks, and which one a request
speaks. A dialect is one package here that declares a `WireDialect` (`base.py`); adding one is
that package and one line in `DIALECTS`. The flow every dialect shares is `protocols.exchange`.

Which dialect a request speaks (docs/dialects.md): its `A2A-Version` (header or query
parameter) picks the dialects of that version; of those, the ones that have its method. A
request without a version may be A2A 0.1's or 0.3's: a method only one of them has decides;
a method both have (tasks/get) leaves candidates, which the endpoint decides between by the
dialect of the task the request names (`by_task`)."""

from __future__ import annotations

from accounts import storable
from tasks_app.errors import VersionNotSupported

from .a2a_v01 import DIALECT as A2A_V01
from .a2a_v03 import DIALECT as A2A_V03
from .a2a_v1 import DIALECT as A2A_V1
from .aip import DIALECT as AIP
from .base import Handler, WireDialect

__all__ = [
    "DIALECTS",
    "Handler",
    "WireDialect",
    "by_task",
    "card_for",
    "default",
    "for_binding",
    "for_request",
    "named",
    "version_missing",
]

# The first is the default: its card is the one at the well-known path.
DIALECTS: list[WireDialect] = [A2A_V1, A2A_V03, A2A_V01, AIP]


def for_request(version: str, method: str) -> list[WireDialect]:
    """The dialects a request may speak, by its A2A-Version and its method: one, or several
    when more than one dialect of that version has the method (`by_task` decides between them);
    none if a dialect of that version exists but none has the method (`version_missing` may
    say which header to send). VersionNotSupported if none answers the version."""
    speaking = [d for d in DIALECTS if version in d.versions]
    if not speaking:
        raise _unsupported(version)
    return [d for d in speaking if method in d.methods]


def for_binding(name: str, method: str) -> list[WireDialect]:
    """The dialect a binding of its own speaks (AIP's paths), if it has the method."""
    return [d for d in DIALECTS if d.name == name and method in d.methods]


def by_task(candidates: list[WireDialect], task_dialect: str | None) -> WireDialect:
    """Of the dialects that have a request's method, the one for the task it names: the one
    that claims the task's creating dialect, else (another dialect's task, or none found) the
    first that claims none."""
    if task_dialect is not None:
        for dialect in candidates:
            if task_dialect in dialect.claims:
                return dialect
    return next((d for d in candidates if not d.claims), candidates[0])


def named(name: str) -> WireDialect:
    """The dialect that stores `name` (tasks_app.lifecycle.Dialect) on its tasks."""
    return next(d for d in DIALECTS if d.name == name)


def _unsupported(version: str) -> VersionNotSupported:
    spoken = ", ".join(d.label for d in DIALECTS if d.versions)
    return VersionNotSupported(f"A2A version {storable.brief(version)} is not supported; this endpoint speaks {spoken}")


def version_missing(version: str, method: str) -> VersionNotSupported | None:
    """For a request without A2A-Version whose method no dialect without one has (for_request
    found none) but a versioned one does: the error that says which header to send. It is
    most likely a client of that version that forgot the header (HTTP+JSON's routes, all 1.0's,
    come here too: 0.3's REST routes were others)."""
    if version:
        return None
    owners = [d.label for d in DIALECTS if method in d.methods and d.versions and "" not in d.versions]
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
