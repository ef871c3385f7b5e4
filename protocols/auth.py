"""Who is calling a hosted agent, decided from the request's headers alone, before its body
is read as anything: an API key (X-API-Key), a bearer token from the tenant's OpenID Connect
issuer (Authorization: Bearer), or nobody (public agents only).

Missing or bad credentials answer 401 with a `WWW-Authenticate` challenge for each scheme
the agent's card declares; a valid credential that may not call this agent answers 403; a
bearer token whose issuer's keys cannot be fetched just now answers 503 with Retry-After. On
an agent that is a shared sandbox every caller acts as one principal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from django.utils import timezone

from accounts import selectors, services
from accounts.models import Agent
from accounts.selectors import KeyGrant, Principal
from tasks_app import dbcalls

from . import oidc
from .cards import API_KEY_HEADER


@dataclass(frozen=True)
class Refusal:
    status: int  # 401, 403, or 503 (a bearer token's issuer cannot be reached just now)
    message: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Caller:
    agent: Agent
    principal: Principal
    # What a rate limit counts this caller as: the key, the bearer subject, or the address.
    identity: str


def _challenge(agent: Agent, issuer_known: bool, *, error: str = "") -> dict[str, str]:
    challenges = [f'ApiKey header="{API_KEY_HEADER}"']
    if issuer_known:
        bearer = f'Bearer realm="{agent.tenant.slug}"'
        if error:
            bearer += f', error="invalid_token", error_description="{error}"'
        challenges.append(bearer)
    return {"WWW-Authenticate": ", ".join(challenges)}


def _seconds(delay: float) -> str:
    return str(max(1, math.ceil(delay)))


def _bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _agent_and_credentials(tenant: str, agent: str, key: str | None) -> tuple[Agent | None, KeyGrant | None]:
    """The database half: the agent (with its tenant's issuer) and the key's grant, in one
    thread hop."""
    found = selectors.agent_get(tenant_slug=tenant, agent_slug=agent)
    if found is None:
        return None, None
    grant = selectors.key_grant(key) if key else None
    if grant is not None and selectors.key_touch_due(grant.key_id):
        services.api_key_touch(key_id=grant.key_id)
        selectors.key_touched(grant.key_id)
    return found, grant


def _cached(tenant: str, agent: str, key: str | None) -> tuple[Agent | None, KeyGrant | None] | None:
    """The same from this process's caches, or None when any part is not there (or a use is
    due to be recorded): the common request needs no thread hop at all."""
    found = selectors.agent_cached(tenant_slug=tenant, agent_slug=agent)
    if found is None:
        return None
    grant = None
    if key:
        grant = selectors.key_grant_cached(key)
        if grant is None or selectors.key_touch_due(grant.key_id):
            return None
    return found, grant


async def authenticate(*, tenant: str, agent: str, headers: Mapping[str, str], client: str) -> Caller | Refusal | None:
    """The caller, or why it is refused; None when there is no such agent."""
    key = headers.get(API_KEY_HEADER.lower())
    token = None if key else _bearer(headers)
    looked_up = _cached(tenant, agent, key)
    if looked_up is None:
        looked_up = await dbcalls.run(_agent_and_credentials, tenant, agent, key)
    found, grant = looked_up
    if found is None:
        return None
    issuer = selectors.oidc_issuer_of(found)
    if key:
        if grant is None or (grant.expires_at is not None and grant.expires_at <= timezone.now()):
            return Refusal(
                401, "the API key is not valid (unknown, revoked or expired)", _challenge(found, bool(issuer))
            )
        if not grant.allows(found):
            return Refusal(403, "this API key may not call this agent")
        identity = f"key:{grant.key_id}"
        principal = Principal(
            name=grant.principal, api_key_id=grant.key_id, expires_at=grant.expires_at, identity=identity
        )
    elif token:
        if issuer is None:
            return Refusal(
                401,
                f"this agent accepts no bearer tokens; send an API key in the {API_KEY_HEADER} header",
                _challenge(found, False),
            )
        try:
            subject, expires_at = await oidc.verify_until(token, issuer)
        except oidc.BearerRefused as exc:
            return Refusal(401, f"the bearer token is not valid: {exc}", _challenge(found, True, error=str(exc)))
        except oidc.IssuerUnavailable as exc:
            # Not the caller's fault, and not a verdict on its token: it may send it again.
            return Refusal(
                503, f"the bearer token cannot be checked: {exc}", {"Retry-After": _seconds(exc.retry_after)}
            )
        identity = f"oidc:{found.tenant_id}:{subject}"
        principal = Principal(
            name=f"{services.OIDC_PRINCIPAL_NAMESPACE}:{subject}", expires_at=expires_at, identity=identity
        )
    elif found.is_public:
        identity = f"addr:{client}"
        principal = replace(Principal.ANONYMOUS, identity=identity)
    else:
        schemes = f"an API key in the {API_KEY_HEADER} header" + (" or a bearer token" if issuer else "")
        return Refusal(401, f"this agent needs {schemes}", _challenge(found, bool(issuer)))
    if found.shared_sandbox:
        principal = principal.shared()
    return Caller(found, principal, identity)
