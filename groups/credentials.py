"""What ties a membership to the credential that made it, and when that credential no longer
lets the Leader act (docs/groups.md, "Credentials of the Leader").

A membership acts for its Leader long after the invitation's request: every Leader message is
checked again against the credential as it is now (`lapse_reason`), and so is every active
membership on each of the runner's looks, so a bearer token's membership ends by its exp even
when the group is quiet. The rule is the one `protocols.auth` applies to a request: what would
refuse the Leader's next HTTP call ends its membership.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from django.conf import settings

from accounts import services as account_services
from accounts.models import Agent, OidcIssuer
from accounts.selectors import SHARED_PRINCIPAL, Principal

from .errors import GroupNotSupported
from .models import Credential, GroupMembership


@dataclass(frozen=True)
class Binding:
    """The credential of an invitation, as the membership records it."""

    credential: str
    api_key_id: int | None = None
    oidc_issuer_id: int | None = None
    expires_at: datetime | None = None
    rate_identity: str = ""


def binding_of(agent: Agent, principal: Principal) -> Binding:
    """The credential the caller of `group` presented (GroupNotSupported for a caller that
    presented none a membership can be tied to: only the server's own code makes those)."""
    if principal.is_anonymous:
        if not agent.is_public:
            raise GroupNotSupported("Group communication is not supported: this agent needs an API key")
        return Binding(Credential.ANONYMOUS, rate_identity=principal.identity or f"addr:group:{agent.pk}")
    if principal.api_key_id is not None:
        identity = principal.identity or f"key:{principal.api_key_id}"  # protocols.auth's form
        return Binding(Credential.KEY, api_key_id=principal.api_key_id, rate_identity=identity)
    if principal.identity.startswith("oidc:") and principal.expires_at is not None:
        issuer = _issuer_of(agent)
        if issuer is not None:
            return Binding(
                Credential.BEARER,
                oidc_issuer_id=issuer.pk,
                expires_at=principal.expires_at,
                rate_identity=principal.identity,
            )
    raise GroupNotSupported("Group communication is not supported for this caller's credentials")


def _issuer_of(agent: Agent) -> OidcIssuer | None:
    try:
        issuer = agent.tenant.oidc_issuer
    except OidcIssuer.DoesNotExist:
        return None
    return issuer if issuer.is_active else None


def _bearer_subject(rate_identity: str) -> str:
    """The subject in `oidc:<tenant>:<subject>` (protocols.auth's identity of a bearer caller)."""
    return rate_identity.split(":", 2)[2] if rate_identity.count(":") >= 2 else ""


def principal_of(membership: GroupMembership) -> Principal:
    """Who the member acts as: the Leader as the credential made it, anonymous rules and all
    (an anonymous Leader's task ids must be unguessable, as over HTTP)."""
    if membership.credential == Credential.ANONYMOUS:
        anonymous = replace(Principal.ANONYMOUS, identity=membership.rate_identity)
        return anonymous.shared() if membership.owner == SHARED_PRINCIPAL else anonymous
    return Principal(
        name=membership.owner,
        api_key_id=membership.api_key_id,
        expires_at=membership.credential_expires_at,
        identity=membership.rate_identity,
    )


def lapse_reason(membership: GroupMembership, *, now: datetime, key_agent_ids: frozenset[int] | None) -> str | None:
    """Why the membership may no longer act for its Leader, or None while it may.
    `key_agent_ids`: the agents its API key is limited to (None: all of the tenant's)."""
    agent = membership.agent
    if not settings.AIP_GROUPS_ENABLED:
        return "group mode was switched off on this server"
    if not agent.is_active:
        return "the agent was switched off"
    if membership.credential == Credential.KEY:
        key = membership.api_key
        if key is None:
            return "the API key that made it was deleted"
        if key.revoked_at is not None:
            return "the API key that made it was revoked"
        if key.expires_at is not None and key.expires_at <= now:
            return "the API key that made it expired"
        if key.tenant_id != agent.tenant_id or (key_agent_ids is not None and agent.pk not in key_agent_ids):
            return "the API key that made it may no longer call this agent"
        expected = key.principal
    elif membership.credential == Credential.BEARER:
        issuer = _issuer_of(agent)
        if issuer is None or issuer.pk != membership.oidc_issuer_id:
            return "the OpenID Connect issuer whose token made it no longer signs for this tenant"
        if membership.credential_expires_at is None or membership.credential_expires_at <= now:
            return "the bearer token that made it expired"
        expected = f"{account_services.OIDC_PRINCIPAL_NAMESPACE}:{_bearer_subject(membership.rate_identity)}"
    elif membership.credential == Credential.ANONYMOUS:
        if not agent.is_public:
            return "the agent is no longer public"
        expected = Principal.ANONYMOUS.name
    else:
        return "it was made before memberships were tied to the Leader's credential"
    if agent.shared_sandbox:
        expected = SHARED_PRINCIPAL
    if expected != membership.owner:
        return "the principal its credential names has changed"
    return None
