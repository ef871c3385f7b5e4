"""The errors group mode answers, beside the task domain's (`GroupNotSupported`, AIP's
-32007, is the AIP dialect's).

`GroupConnectionFailed` is the seed's "cannot join" answer (7.3 (1)): JSON-RPC -32603
"Internal error" with `data: {errorType: "CONNECTION_FAILED", details: {host, port, reason}}`.
It is `verbatim`: the AIP error writer sends its `code`, `message` and `data` as they are.
"""

from __future__ import annotations

from tasks_app.errors import DomainError, GroupNotSupported

__all__ = ["AccessTokenInvalid", "GroupConnectionFailed", "GroupNotSupported"]


class GroupConnectionFailed(DomainError):
    """The broker the invitation names could not be joined: not reached, refused the login,
    timed out, or its name did not resolve. Never raised for bad params (InvalidParams)."""

    code, reason, default_message = -32603, "CONNECTION_FAILED", "Internal error"
    verbatim = True  # the error object is the seed's, whole: code, message and data as they are

    def __init__(self, *, host: str, port: int, reason: str) -> None:
        super().__init__(
            "Internal error",
            data={"errorType": "CONNECTION_FAILED", "details": {"host": host, "port": port, "reason": reason}},
        )


class AccessTokenInvalid(DomainError):
    """The broker refused the invitation's accessToken (AIP's -32010, "Invalid access token":
    invalid, expired or malformed)."""

    code, reason, default_message = -32010, "ACCESS_TOKEN_INVALID", "Invalid access token"
