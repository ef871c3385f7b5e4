"""The A2A 1.0 agent card of a hosted agent. It declares only what works: one JSON-RPC
interface, capabilities as implemented, and the API-key scheme the server enforces."""

from __future__ import annotations

from typing import Any

from accounts.models import Agent
from tasks_app import media

API_KEY_HEADER = "X-API-Key"
API_KEY_SCHEME = "apiKey"


def agent_card(agent: Agent, *, base_url: str) -> dict[str, Any]:
    url = f"{base_url}{agent.path}"
    skills = [
        {
            "id": s.get("id", ""),
            "name": s.get("name", s.get("id", "")),
            "description": s.get("description", ""),
            "tags": s.get("tags", []),
            **({"examples": s["examples"]} if s.get("examples") else {}),
            **({"inputModes": s["inputModes"]} if s.get("inputModes") else {}),
            **({"outputModes": s["outputModes"]} if s.get("outputModes") else {}),
        }
        for s in agent.skills
    ]
    card: dict[str, Any] = {
        "name": agent.name,
        "description": agent.description,
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "provider": {"organization": agent.tenant.name, "url": base_url},
        "version": agent.version,
        "capabilities": {
            "streaming": agent.streaming,
            "pushNotifications": agent.push_notifications,
            "extendedAgentCard": agent.has_extended_card,
            **({"extensions": agent.extensions} if agent.extensions else {}),
        },
        "securitySchemes": {
            API_KEY_SCHEME: {
                "apiKeySecurityScheme": {
                    "location": "header",
                    "name": API_KEY_HEADER,
                    "description": "A tenant API key. "
                    + (
                        "Optional here: without one you act as the shared anonymous caller."
                        if agent.is_public
                        else "Required."
                    ),
                }
            }
        },
        "defaultInputModes": media.declared(agent.input_modes),
        "defaultOutputModes": media.declared(agent.output_modes),
        "skills": skills,
    }
    if not agent.is_public:
        card["securityRequirements"] = [{"schemes": {API_KEY_SCHEME: {"list": []}}}]
    return card


def extended_agent_card(agent: Agent, *, base_url: str) -> dict[str, Any]:
    """The card plus what the agent shows only to authenticated callers (lists are extended)."""
    card = agent_card(agent, base_url=base_url)
    for key, value in (agent.extended_card or {}).items():
        if isinstance(value, list) and isinstance(card.get(key), list):
            card[key] = [*card[key], *value]
        else:
            card[key] = value
    return card


def required_extensions(agent: Agent) -> list[str]:
    return [e["uri"] for e in agent.extensions if e.get("required") and e.get("uri")]
