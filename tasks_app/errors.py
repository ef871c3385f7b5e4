"""Errors of the task domain. Each dialect maps them to its own codes and shapes;
the A2A code and ErrorInfo reason are kept here because A2A 1.0 is the reference."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import InterfaceError, OperationalError

# The task store could not be reached (a restart, a failover, the network, a pool with no
# connection to give): the server's trouble of the moment, never the caller's or the agent's.
STORE_ERRORS = (OperationalError, InterfaceError)
STORE_RETRY_AFTER = 5  # seconds a caller is asked to wait: about what a Postgres restart takes


class DomainError(Exception):
    code: int = -32603
    reason: str | None = None
    domain: str | None = None  # the ErrorInfo's domain when the reason is not A2A's
    default_message = "internal error"
    # The error object is its own, whole: a dialect that can sends its code, message and data
    # as they are (AIP group mode's CONNECTION_FAILED, as the seed writes it).
    verbatim: ClassVar[bool] = False

    def __init__(self, message: str | None = None, *, data: dict[str, Any] | None = None) -> None:
        self.message = message or self.default_message
        # Facts a dialect whose errors carry them may show (AIP's data: {"taskId": …}).
        self.data = data or {}
        super().__init__(self.message)


class TaskNotFound(DomainError):
    code, reason, default_message = -32001, "TASK_NOT_FOUND", "task not found"


class TaskNotCancelable(DomainError):
    code, reason, default_message = -32002, "TASK_NOT_CANCELABLE", "task cannot be canceled in its current state"


class PushNotificationNotSupported(DomainError):
    code, reason, default_message = (
        -32003,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
        "push notifications are not supported by this agent",
    )


class UnsupportedOperation(DomainError):
    code, reason, default_message = -32004, "UNSUPPORTED_OPERATION", "operation not supported"


class ContentTypeNotSupported(DomainError):
    code, reason, default_message = -32005, "CONTENT_TYPE_NOT_SUPPORTED", "content type not supported"


class InvalidAgentResponse(DomainError):
    code, reason, default_message = -32006, "INVALID_AGENT_RESPONSE", "the agent gave an invalid response"


class ExtendedAgentCardNotConfigured(DomainError):
    code, reason, default_message = (
        -32007,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        "no extended agent card is configured",
    )


class ExtensionSupportRequired(DomainError):
    code, reason, default_message = -32008, "EXTENSION_SUPPORT_REQUIRED", "a required extension was not requested"


class VersionNotSupported(DomainError):
    code, reason, default_message = -32009, "VERSION_NOT_SUPPORTED", "protocol version not supported"


# The server's own errors, outside A2A's codes (protocols.jsonrpc names the same numbers).
AGENTSERVER_ERROR_DOMAIN = "agentserver"


class RetryLater(DomainError):
    """A cap that frees up by itself: try again in `retry_after` seconds (the endpoint answers
    HTTP 429 with Retry-After, the code of a rate limit). Nothing of the refused call is stored."""

    code, domain = -32029, AGENTSERVER_ERROR_DOMAIN

    def __init__(self, message: str | None = None, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = max(1, retry_after)


class TooManyActiveTasks(RetryLater):
    """The tenant has as many tasks queued or running as it may: try again once some finish."""

    reason, default_message = "TOO_MANY_ACTIVE_TASKS", "too many active tasks"


class StorageQuotaExceeded(DomainError):
    """The tenant has stored as many bytes as it may: no new work is taken until tasks are
    deleted or the quota is raised, so this is not a retry-later error."""

    code, reason, domain, default_message = (
        -32030,
        "STORAGE_QUOTA_EXCEEDED",
        AGENTSERVER_ERROR_DOMAIN,
        "the tenant's storage quota is used up",
    )


class TooManyStreams(RetryLater):
    """The caller has as many SSE streams open as it may: try again once one ends."""

    reason, default_message = "TOO_MANY_STREAMS", "too many open streams"


class TooManyPushConfigs(DomainError):
    """The task (or, ahead of tasks, the caller) has as many push configs as it may: waiting
    does not help; delete one first. The code of the storage quota: a limit on what is kept."""

    code, reason, domain, default_message = (
        -32030,
        "TOO_MANY_PUSH_CONFIGS",
        AGENTSERVER_ERROR_DOMAIN,
        "too many push notification configs",
    )


class GroupNotSupported(DomainError):
    """The agent does not take part in AIP group mode (AIP's -32007; A2A has no group mode)."""

    code, reason, default_message = -32004, "GROUP_NOT_SUPPORTED", "group communication is not supported"


class InvalidParams(DomainError):
    code, default_message = -32602, "invalid params"


class TaskClosed(Exception):
    """Raised into an executor whose task reached a terminal state (canceled, timed out)
    behind its back: the executor should stop; nothing it would write is kept."""


class InvalidTransition(Exception):
    """An executor asked for a state change the state machine does not allow."""
