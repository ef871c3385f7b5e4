"""Objects as the API answers them: plain dicts, rendered through tenant_api.serializers."""

from __future__ import annotations

from typing import Any

from accounts.models import Agent, AgentHost, ApiKey, Membership, MembershipInvitation, OidcIssuer, Tenant
from groups.models import SHOWN_FIELDS, GroupMembership, GroupTask
from push.models import PushConfig, PushDelivery
from tasks_app.lifecycle import EventKind
from tasks_app.models import Task
from tasks_app.selectors import FailureShown, Timeline


def tenant(found: Tenant, role: str) -> dict[str, Any]:
    return {
        "slug": found.slug,
        "name": found.name,
        "created_at": found.created_at,
        "updated_at": found.updated_at,
        "your_role": role,
        "allowed_executors": list(found.allowed_executors or []),
    }


def member(found: Membership) -> dict[str, Any]:
    return {"username": found.user.username, "role": found.role, "created_at": found.created_at}


def key(found: ApiKey) -> dict[str, Any]:
    return {
        "prefix": found.prefix,
        "name": found.name,
        "principal": found.principal,
        "management_role": found.management_role,
        "agents": sorted(a.slug for a in found.agents.all()),
        "created_at": found.created_at,
        "expires_at": found.expires_at,
        "revoked_at": found.revoked_at,
        "last_used_at": found.last_used_at,
        "made_by": found.made_by,
    }


def issuer(found: OidcIssuer) -> dict[str, Any]:
    return {
        "issuer": found.issuer,
        "audience": found.audience,
        "jwks_url": found.jwks_url,
        "role_claim": found.role_claim,
        "is_active": found.is_active,
        "created_at": found.created_at,
        "updated_at": found.updated_at,
    }


AGENT_FIELDS = (
    "name",
    "description",
    "version",
    "aic",
    "executor",
    "settings",
    "provider_organization",
    "provider_url",
    "icon_url",
    "documentation_url",
    "skills",
    "input_modes",
    "output_modes",
    "extensions",
    "has_extended_card",
    "extended_card",
    "streaming",
    "push_notifications",
    "is_public",
    "shared_sandbox",
    "is_active",
)


def agent(found: Agent) -> dict[str, Any]:
    shown = {field: getattr(found, field) for field in AGENT_FIELDS}
    return {
        "slug": found.slug,
        "url": found.path,
        **shown,
        "has_secret": bool(found.secret_sealed),  # the secret itself never leaves the server
        "created_at": found.created_at,
        "updated_at": found.updated_at,
    }


def task(found: Task) -> dict[str, Any]:
    return {
        "id": found.pk,
        "agent": found.agent.slug,
        "owner": found.owner,
        "state": found.state,
        "dialect": found.dialect,
        "context_id": found.context_id,
        "client_task_id": found.client_task_id,
        "failure": found.failure,
        "created_at": found.created_at,
        "status_timestamp": found.status_timestamp,
        "message_count": found.message_count,
        "artifact_count": found.artifact_count,
    }


def failure(found: FailureShown | None, *, reasons: bool) -> dict[str, Any]:
    """A failure's kind, status code and the client's text for everyone; the server's reason,
    which quotes the endpoint's answer, only with `reasons` (operators and up)."""
    if found is None:
        return {"failure_status_code": None, "failure_message": "", "failure_reason": ""}
    return {
        "failure_status_code": found.status_code,
        "failure_message": found.message,
        "failure_reason": found.reason if reasons else "",
    }


def _reason_unseen_by_client(payload: Any) -> bool:
    # A status with a message gives its client the message, the reason only without one (an
    # operator's cancel: AIP shows it), as protocols' codecs do; a viewer reads what a client does.
    if not isinstance(payload, dict) or "reason" not in payload:
        return False
    message = payload.get("message")
    return isinstance(message, dict) and bool(message.get("parts"))


def timeline(found: Timeline, *, reasons: bool) -> list[dict[str, Any]]:
    """The page's events and the user messages that came with them, in the order they happened
    (as the admin's task page shows them); a status event's `reason` (the server's, which may quote an
    endpoint) only with `reasons`, unless the task's client reads it too."""
    entries: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for m in found.messages:
        payload = {
            "role": m.role,
            "message_id": m.message_id,
            "parts": m.parts,
            "metadata": m.metadata,
            "reference_task_ids": m.reference_task_ids or [],
            "command": m.command,
        }
        entries.append(
            ((m.created_at, 0, m.pk), {"kind": "message", "seq": None, "at": m.created_at, "payload": payload})
        )
    for e in found.events:
        payload = e.payload
        if not reasons and e.kind == EventKind.STATUS and _reason_unseen_by_client(payload):
            payload = {k: v for k, v in payload.items() if k != "reason"}
        entries.append(
            ((e.created_at, 1, e.seq), {"kind": e.kind, "seq": e.seq, "at": e.created_at, "payload": payload})
        )
    entries.sort(key=lambda pair: pair[0])
    return [entry for _, entry in entries]


def push_config(found: PushConfig) -> dict[str, Any]:
    return {
        "id": found.pk,
        "config_id": found.config_id,
        "task": found.task_id,
        "url": found.url,
        "auth_scheme": found.auth_scheme,
        "has_credentials": bool(found.credentials_sealed),
        "has_token": bool(found.token_sealed),
        "status": found.status,
        "delivered_seq": found.delivered_seq,
        "next_attempt_at": found.next_attempt_at,
        "created_at": found.created_at,
        "updated_at": found.updated_at,
    }


def delivery(found: PushDelivery) -> dict[str, Any]:
    return {
        "id": found.pk,
        "event_id": found.event_id_text,
        "task": found.config.task_id,
        "config": found.config_id,
        "config_id": found.config.config_id,
        "seq": found.seq,
        "state": found.state,
        "attempts": found.attempts,
        "last_status_code": found.last_status_code,
        "last_error": found.last_error,
        "created_at": found.created_at,
        "delivered_at": found.delivered_at,
    }


def host(found: AgentHost, instructions: dict[str, str]) -> dict[str, Any]:
    return {
        "host": found.host,
        "card_version": found.card_version,
        "state": "bound" if found.proven_at is not None else "pending",
        "proof": found.proof,
        "proven_at": found.proven_at,
        "created_at": found.created_at,
        "instructions": instructions,
    }


# A membership's related objects, as the API names them.
_MEMBERSHIP_RELATED = {
    "agent": lambda m, _: m.agent.slug,
    "api_key": lambda m, _: m.api_key.prefix if m.api_key is not None else None,
    "oidc_issuer": lambda m, _: m.oidc_issuer.issuer if m.oidc_issuer is not None else None,
}


def group_membership(found: GroupMembership) -> dict[str, Any]:
    """What the admin shows of it (groups.models.SHOWN_FIELDS): never its access token."""
    shown = {field: _MEMBERSHIP_RELATED.get(field, getattr)(found, field) for field in SHOWN_FIELDS}
    return {"id": found.pk, **shown}


def group_task(found: GroupTask) -> dict[str, Any]:
    return {
        "task": found.task_id,
        "published_seq": found.published_seq,
        "done": found.done,
        "created_at": found.created_at,
    }


def invitation(found: MembershipInvitation) -> dict[str, Any]:
    return {
        "id": found.pk,
        "username": found.username,
        "role": found.role,
        "invited_by": found.invited_as,
        "created_at": found.created_at,
        "expires_at": found.expires_at,
    }
