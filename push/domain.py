"""Plain values that cross from the dialects into push and back."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PushConfigInput:
    """A config as a client gives it (any dialect)."""

    url: str
    config_id: str = ""  # empty: the server chooses one
    token: str = ""
    auth_scheme: str = ""
    auth_credentials: str = ""


# What a config's owner reads back instead of the credentials it gave: they are stored sealed
# and sent only to its receiver.
REDACTED = "[redacted]"


@dataclass(frozen=True)
class PushConfigView:
    """A config as its owner reads it back (credentials redacted)."""

    config_id: str
    task_id: str
    url: str
    token: str
    auth_scheme: str
    auth_credentials: str
