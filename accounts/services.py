"""Writes for tenants, agents and API keys."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from .models import Agent, ApiKey, Tenant

KEY_PREFIX = "ask"
KEY_ID_HEX_LENGTH = 12  # the key's public id: 6 random bytes in hex


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def api_key_create(*, tenant: Tenant, name: str, principal: str | None = None) -> tuple[ApiKey, str]:
    """Create a key; return it with the plaintext, which is shown once and never stored."""
    prefix = secrets.token_hex(KEY_ID_HEX_LENGTH // 2)
    secret = secrets.token_urlsafe(32)
    plaintext = f"{KEY_PREFIX}_{prefix}_{secret}"
    key = ApiKey.objects.create(
        tenant=tenant,
        name=name,
        principal=principal or name,
        prefix=prefix,
        key_hash=hash_secret(plaintext),
    )
    return key, plaintext


def tenant_ensure(*, slug: str, name: str) -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
    return tenant


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
