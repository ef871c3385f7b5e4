"""Writes for tenants, members, agents, API keys and issuers.

Every change a request's authentication depends on is announced (`changes.announce`) once it
commits, so that cached lookups in every web process are dropped before the next request.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from outbound import ssrf

from . import changes, sealing
from .models import PRINCIPAL_NAMESPACE_SEPARATOR, Agent, ApiKey, Membership, OidcIssuer, Role, Tenant

KEY_PREFIX = "ask"
KEY_ID_HEX_LENGTH = 12  # the key's public id: 6 random bytes in hex
KEY_PRINCIPAL_NAMESPACE = "key"  # a key made without a principal is "key:<prefix>"
OIDC_PRINCIPAL_NAMESPACE = "oidc"  # a bearer token's subject is "oidc:<sub>"
# Names the server gives principals itself (accounts.selectors.Principal): a key naming one would
# be that caller, e.g. list every anonymous caller's tasks on a public agent. Compared casefolded,
# so that no look-alike by case reads as one in the admin or a log.
ANONYMOUS_PRINCIPAL = "anonymous"  # callers without a credential, on a public agent
SHARED_PRINCIPAL = "shared"  # every caller of a shared sandbox
RESERVED_PRINCIPALS = frozenset({ANONYMOUS_PRINCIPAL, SHARED_PRINCIPAL})
# last_used_at moves at most this often per key and process: never one write per request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


class AccountError(ValueError):
    """A change that cannot be made as asked (the message says why)."""


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def principal_reserved(principal: str) -> bool:
    """Whether `principal` is (but for case and surrounding space) a name the server gives."""
    return principal.strip().casefold() in RESERVED_PRINCIPALS


def principal_check(principal: str) -> str:
    """A principal a tenant names itself: not blank, not a name the server gives a principal,
    and outside the server's namespaces."""
    principal = principal.strip()
    if not principal:
        raise AccountError("a principal must not be blank")
    if principal_reserved(principal):
        raise AccountError(
            f"a principal must not be {principal!r}: {', '.join(sorted(RESERVED_PRINCIPALS))} are the server's "
            "(callers without a key, a shared sandbox's callers)"
        )
    if PRINCIPAL_NAMESPACE_SEPARATOR in principal:
        raise AccountError(
            f"a principal must not contain {PRINCIPAL_NAMESPACE_SEPARATOR!r}: names with it are the server's "
            "(key:<prefix>, oidc:<subject>)"
        )
    if len(principal) > ApiKey._meta.get_field("principal").max_length:  # type: ignore[operator]
        raise AccountError("a principal must be at most 150 characters")
    return principal


def api_key_check(
    *, tenant: Tenant, principal: str | None = None, agents: Iterable[Agent] = (), expires_at: datetime | None = None
) -> str | None:
    """The terms of a new key, checked (AccountError says what is wrong); the principal as
    it will be stored, or None for a key that is its own principal. Forms call this too."""
    foreign = [str(a) for a in agents if a.tenant_id != tenant.pk]
    if foreign:
        raise AccountError(f"a key of {tenant.slug} cannot call another tenant's agents: {', '.join(foreign)}")
    if expires_at is not None and expires_at <= timezone.now():
        raise AccountError("the expiry is in the past")
    return principal_check(principal) if principal else None


def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    principal: str | None = None,
    agents: Iterable[Agent] = (),
    expires_at: datetime | None = None,
) -> tuple[ApiKey, str]:
    """Create a key; return it with the plaintext, which is shown once and never stored.
    Without `principal` the key is its own principal; with `agents` it calls only those."""
    agents = list(agents)
    principal = api_key_check(tenant=tenant, principal=principal, agents=agents, expires_at=expires_at)
    prefix = secrets.token_hex(KEY_ID_HEX_LENGTH // 2)
    plaintext = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        key = ApiKey.objects.create(
            tenant=tenant,
            name=name,
            principal=principal or f"{KEY_PRINCIPAL_NAMESPACE}{PRINCIPAL_NAMESPACE_SEPARATOR}{prefix}",
            prefix=prefix,
            key_hash=hash_secret(plaintext),
            expires_at=expires_at,
        )
        if agents:
            key.agents.set(agents)
    return key, plaintext


def api_key_revoke(*, key: ApiKey) -> bool:
    """Revoke the key from the next request on, in every process; False if it already was."""
    with transaction.atomic():
        revoked = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        changes.announce_on_commit()
    key.refresh_from_db(fields=["revoked_at"])
    return bool(revoked)


def api_key_touch(*, key_id: int, at: datetime | None = None) -> None:
    """Record that the key was used (callers throttle this: see `LAST_USED_RESOLUTION`)."""
    at = at or timezone.now()
    ApiKey.objects.filter(pk=key_id).exclude(last_used_at__gt=at - LAST_USED_RESOLUTION).update(last_used_at=at)


def tenant_ensure(*, slug: str, name: str) -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
    return tenant


def member_add(*, tenant: Tenant, user: User, role: str) -> Membership:
    """Make `user` a member of `tenant` with `role`, or change the role they have (idempotent)."""
    if role not in Role.values:
        raise AccountError(f"no role {role!r}; roles are {', '.join(Role.values)}")
    membership, _ = Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    if not user.is_staff:
        # Members work in the admin, which lets in staff only; what they see there is scoped.
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return membership


def agent_ensure(*, tenant: Tenant, slug: str, defaults: dict[str, Any]) -> Agent:
    """Create the agent, or bring an existing one's fields up to `defaults` (idempotent)."""
    agent, created = Agent.objects.get_or_create(tenant=tenant, slug=slug, defaults=defaults)
    if not created:
        changed = [field for field, value in defaults.items() if getattr(agent, field) != value]
        for field in changed:
            setattr(agent, field, defaults[field])
        if changed:
            agent.save(update_fields=[*changed, "updated_at"])
    return agent


# Standard Webhooks' secret form: "whsec_" and the base64 of the key's bytes (24 to 64 of them).
SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
MAX_SECRET_LENGTH = 1000


def agent_secret_generate() -> str:
    """A new secret in Standard Webhooks' form, for an agent's signing key."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def agent_secret_check(secret: str) -> str:
    """The secret, if it can be sent in a header as typed; else AccountError saying why."""
    if len(secret) > MAX_SECRET_LENGTH:
        raise AccountError(f"the secret is longer than {MAX_SECRET_LENGTH} characters")
    if secret != secret.strip() or any(ord(c) < 32 or ord(c) >= 127 for c in secret):
        raise AccountError("the secret must be printable ASCII without spaces at its ends")
    return secret


def agent_secret_set(*, agent: Agent, secret: str, save: bool = True) -> None:
    """Seal and store the agent's secret ("" removes it); with save=False only seal it onto
    `agent`, for a caller saving the agent anyway. Its executor reads it at each run."""
    agent_secret_check(secret)
    agent.secret_sealed = sealing.seal(secret)
    if save:
        agent.save(update_fields=["secret_sealed", "updated_at"])


def oidc_issuer_set(*, tenant: Tenant, issuer: str, audience: str, jwks_url: str) -> OidcIssuer:
    """Accept bearer tokens from `issuer` for `tenant`'s agents (replacing any issuer it had).
    The JWKS URL must pass the outbound guard now, not first on a caller's request."""
    try:
        ssrf.check(jwks_url, unresolvable_ok=True)
    except ssrf.Refused as exc:
        raise AccountError(f"jwks_url refused: {exc}") from None
    found, _ = OidcIssuer.objects.update_or_create(
        tenant=tenant, defaults={"issuer": issuer, "audience": audience, "jwks_url": jwks_url, "is_active": True}
    )
    return found
