"""Reads for tenants, agents and API keys."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from .models import Agent, ApiKey
from .services import KEY_PREFIX, hash_secret


@dataclass(frozen=True)
class Principal:
    """Who is calling: tasks are owned by, and visible to, one principal of one tenant."""

    name: str
    api_key_id: int | None = None

    ANONYMOUS: "Principal" = None  # type: ignore[assignment]

    @property
    def is_anonymous(self) -> bool:
        return self.api_key_id is None


Principal.ANONYMOUS = Principal(name="anonymous")


def agent_get(*, tenant_slug: str, agent_slug: str) -> Agent | None:
    return (
        Agent.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, slug=agent_slug, is_active=True)
        .first()
    )


def api_key_authenticate(*, agent: Agent, presented: str) -> Principal | None:
    """The principal behind a presented key, if the key is valid for the agent's tenant."""
    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX:
        return None
    key = ApiKey.objects.active().filter(prefix=parts[1], tenant_id=agent.tenant_id).only(
        "id", "principal", "key_hash"
    ).first()
    if key is None or not hmac.compare_digest(key.key_hash, hash_secret(presented)):
        return None
    return Principal(name=key.principal, api_key_id=key.id)
