"""Who an agent is in a group."""

from __future__ import annotations

from accounts.models import Agent


def member_aic(agent: Agent) -> str:
    """The agent's `senderId` in every group, and what `mentions` must name to reach it: its
    AIC, else `<tenant>/<agent>` (the rule is the model's, `Agent.aip_id`, which direct mode
    shows too)."""
    return agent.aip_id
