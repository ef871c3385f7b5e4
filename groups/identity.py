"""Who an agent is in a group."""

from __future__ import annotations

from accounts.models import Agent


def member_aic(agent: Agent) -> str:
    """The agent's AIC, its `senderId` in every group (and what `mentions` name): the AIC its
    operator set, else `<tenant>/<agent>`, unique on this server (an agent without a
    registered AIC is still addressable by a Leader who knows the server's names)."""
    aic = str(getattr(agent, "aic", "") or "")
    return aic or f"{agent.tenant.slug}/{agent.slug}"
