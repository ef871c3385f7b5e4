"""The dialect registry: every wire dialect the agent endpoint speaks, and which one a request
speaks. A dialect is one package here that declares a `WireDialect` (`base.py`); adding one is
that package and one line in `DIALECTS`. The flow every dialect shares is `protocols.exchange`.

Which dialect a request speaks (docs/dialects.md): its `A2A-Version` (header or query
parameter) picks the dialects of that version; of those, the ones that have its method. A
request without a version may be A2A 0.1's or 0.3's: a method only one of them has decides;
a method both have (tasks/get) leaves candidates, which the endpoint decides between by the
dialect of the task the request names (`by_task`)."""

from __future__ import annotations

from tasks_app import storable
from tasks_app.errors import VersionNotSupported

from .a2a_v01 import DIALECT as A2A_V01
from .a2a_v1 import DIALECT as A2A_V1
from .base import Handler, WireDialect

__all__ = ["DIALECTS", "Handler", "WireDialect", "by_task", "default", "for_request", "named"]

# The first is the default: its card is the one at the well-known path.
DIALECTS: list[WireDialect] = [A2A_V1, A2A_V01]

# What a request without A2A-Version means unless its method is another header-less
# dialect's (A2A 1.0 §3.6.2).
_HEADERLESS_DEFAULT = "0.3"


def for_request(version: str, method: str) -> list[WireDialect]:
    """The dialects a request may speak, by its A2A-Version and its method: one, or several
    when more than one dialect of that version has the method (`by_task` decides between them);
    none if a dialect of that version exists but none has the method. VersionNotSupported if
    none answers the version, or if a request without one has a method of no header-less
    dialect while A2A 0.3, which such a request then means, is not spoken."""
    speaking = [d for d in DIALECTS if version in d.versions]
    if not speaking:
        raise _unsupported(version)
    having = [d for d in speaking if method in d.methods]
    if not having and version == "" and not any(_HEADERLESS_DEFAULT in d.versions for d in DIALECTS):
        raise _unsupported(version)
    return having


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
    if version in ("", "0.3", "0.3.0"):
        return VersionNotSupported(
            "a request without A2A-Version means A2A 0.3, which this server does not speak yet; "
            f"send the header A2A-Version: {default().label}"
            + (" (or A2A-Version: 0.1 for A2A 0.1's methods)" if version else "")
        )
    spoken = ", ".join(d.label for d in DIALECTS)
    return VersionNotSupported(f"A2A version {storable.brief(version)} is not supported; this endpoint speaks {spoken}")


def default() -> WireDialect:
    return DIALECTS[0]
