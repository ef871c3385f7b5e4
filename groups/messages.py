"""What goes over a group's exchange (seed 7.3): reading what arrives, deciding whether it is
for this member, and the messages a member sends. Pure: no I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

MENTION_ALL = "all"


def decode(body: bytes) -> dict[str, Any] | None:
    """A group message: a JSON object, or None for anything else."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def addressed(message: dict[str, Any], aic: str) -> bool | None:
    """True if `mentions` names this member (or "all"), False if it names only others, None
    if the message mentions nobody (each member decides for itself)."""
    mentions = message.get("mentions")
    if mentions is None or mentions == []:
        return None
    if isinstance(mentions, str):  # v02 allows "all" alone
        mentions = [mentions]
    if not isinstance(mentions, list):
        return False
    return aic in mentions or MENTION_ALL in mentions


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def member_status(*, aic: str, group_id: str, connected: bool, muted: bool) -> dict[str, Any]:
    """A member's status (seed 7.3 (9)): the answer to a status query, and its last word on leaving."""
    return {
        "type": "group-mgmt-message",
        "id": f"mgmt-{uuid.uuid4()}",
        "sentAt": now(),
        "senderRole": "partner",
        "senderId": aic,
        "groupId": group_id,
        "groupMemberStatus": {"connected": connected, "muted": muted},
    }


def task_update(task: dict[str, Any], *, aic: str, group_id: str) -> dict[str, Any]:
    """An AIP Task as the member publishes it to the group: with its senderId and groupId."""
    return {**task, "senderId": aic, "groupId": group_id}


def encode(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message)
