"""The errors group mode answers, beside the task domain's.

`GroupNotSupported` (-32007) is the AIP core's (`tasks_app.errors`); `GroupConnectionFailed`
is the seed's "cannot join" answer (7.3 (1)): JSON-RPC -32603 "Internal error" with
`data: {errorType: "CONNECTION_FAILED", details: {host, port, reason}}`. The AIP error
writer renders any DomainError that carries a `data` dict with that `code`, that `message`
and that `data`, as they are.
"""

from __future__ import annotations

from typing import Any

from tasks_app.errors import DomainError

try:
    from tasks_app.errors import GroupNotSupported  # type: ignore[attr-defined,unused-ignore]
except ImportError:  # until the AIP core lands: the same class, its code and message

    class GroupNotSupported(DomainError):  # type: ignore[no-redef]
        code, reason, default_message = -32007, "GROUP_NOT_SUPPORTED", "Group communication is not supported"


__all__ = ["GroupConnectionFailed", "GroupNotSupported"]


class GroupConnectionFailed(DomainError):
    """The broker the invitation names could not be joined: not reached, refused the login,
    timed out. Never raised for bad params (those are InvalidParams)."""

    code, reason, default_message = -32603, "CONNECTION_FAILED", "Internal error"

    def __init__(self, *, host: str, port: int, reason: str) -> None:
        super().__init__("Internal error")
        self.data: dict[str, Any] = {
            "errorType": "CONNECTION_FAILED",
            "details": {"host": host, "port": port, "reason": reason},
        }
