"""The A2A 0.1 agent card of a hosted agent, at `…/.well-known/agent.json`: the 0.1 document's
AgentCard. Its `url` is the agent's JSON-RPC path with `?A2A-Version=0.1`, so a client that
follows it is answered in 0.1 whatever method it calls (docs/dialects.md); `authentication`
names exactly the schemes the server enforces (none on a public agent)."""

from __future__ import annotations

from typing import Any

from accounts.models import Agent
from accounts.selectors import oidc_issuer_of
from tasks_app import media

from ...cards import agent_url, provider, skills, visibility

# The names of the 401 challenge (`WWW-Authenticate`): an API key in X-API-Key, a bearer token.
API_KEY_SCHEME = "ApiKey"
BEARER_SCHEME = "Bearer"


def schemes(agent: Agent) -> list[str]:
    if agent.is_public:
        return []
    return [API_KEY_SCHEME, *([BEARER_SCHEME] if oidc_issuer_of(agent) is not None else [])]


def agent_card(agent: Agent, *, base_url: str, url: str = "") -> dict[str, Any]:
    return {
        "name": agent.name,
        "description": f"{agent.description.rstrip()}\n\n{visibility(agent)}",
        "url": f"{agent_url(agent, base_url=base_url, url=url)}?A2A-Version=0.1",
        "provider": provider(agent, base_url=base_url),
        "version": agent.version,
        **({"documentationUrl": agent.documentation_url} if agent.documentation_url else {}),
        "capabilities": {
            "streaming": agent.streaming,
            "pushNotifications": agent.push_notifications,
            # Status changes are recorded, but 0.1 has no method that returns them.
            "stateTransitionHistory": False,
        },
        "authentication": {"schemes": schemes(agent)},
        "defaultInputModes": media.declared(agent.input_modes),
        "defaultOutputModes": media.declared(agent.output_modes),
        "skills": skills(agent),
    }
