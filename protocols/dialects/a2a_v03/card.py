"""The A2A 0.3 agent card of a hosted agent: the same agent as the 1.0 card (`protocols.cards`)
in 0.3's shape. One URL and transport (`url`, `preferredTransport`), `protocolVersion`,
`supportsAuthenticatedExtendedCard`, and the security schemes in 0.3's OpenAPI-like form.

Only the JSON-RPC interface is listed: the HTTP+JSON routes below the agent's path are A2A
1.0's (§11), while a 0.3 REST client would call 0.3's `/v1/...` routes, which are not served.
How a client gets this card rather than the 1.0 one: docs/dialects.md."""

from __future__ import annotations

from typing import Any

from accounts.models import Agent
from tasks_app import media

from ... import cards

PROTOCOL_VERSION = "0.3.0"
TRANSPORT = "JSONRPC"
# 1.0 wraps each scheme in a member named for its type; 0.3 names the type in `type`.
_SCHEME_TYPES = {
    "apiKeySecurityScheme": "apiKey",
    "httpAuthSecurityScheme": "http",
    "oauth2SecurityScheme": "oauth2",
    "openIdConnectSecurityScheme": "openIdConnect",
    "mtlsSecurityScheme": "mutualTLS",
}


def _schemes(agent: Agent) -> tuple[dict[str, Any], list[dict[str, list[str]]]]:
    """The schemes protocols.auth enforces (the 1.0 card's), as 0.3 writes them."""
    schemes, requirements = cards.security(agent)
    out: dict[str, Any] = {}
    for name, wrapped in schemes.items():
        ((member, scheme),) = wrapped.items()
        converted = {"type": _SCHEME_TYPES[member], **scheme}
        if "location" in converted:  # 1.0's `location` is 0.3's (and OpenAPI's) `in`
            converted["in"] = converted.pop("location")
        out[name] = converted
    security = [{name: entry["list"] for name, entry in r["schemes"].items()} for r in requirements]
    return out, security


def agent_card(agent: Agent, *, base_url: str, url: str = "") -> dict[str, Any]:
    url = cards.agent_url(agent, base_url=base_url, url=url)
    schemes, security = _schemes(agent)
    card: dict[str, Any] = {
        "protocolVersion": PROTOCOL_VERSION,
        "name": agent.name,
        "description": f"{agent.description.rstrip()}\n\n{cards.visibility(agent)}",
        "url": url,
        "preferredTransport": TRANSPORT,
        "additionalInterfaces": [{"url": url, "transport": TRANSPORT}],
        "provider": {
            "organization": agent.provider_organization or agent.tenant.name,
            "url": agent.provider_url or base_url,
        },
        "version": agent.version,
        **({"iconUrl": agent.icon_url} if agent.icon_url else {}),
        **({"documentationUrl": agent.documentation_url} if agent.documentation_url else {}),
        "capabilities": {
            "streaming": agent.streaming,
            "pushNotifications": agent.push_notifications,
            # Every status change is stored, but 0.3 has no method that returns the list.
            "stateTransitionHistory": False,
            **({"extensions": agent.extensions} if agent.extensions else {}),
        },
        "securitySchemes": schemes,
        "supportsAuthenticatedExtendedCard": agent.has_extended_card,
        "defaultInputModes": media.declared(agent.input_modes),
        "defaultOutputModes": media.declared(agent.output_modes),
        "skills": cards.skills(agent),
    }
    if security:
        card["security"] = security
    return card


def extended_agent_card(agent: Agent, *, base_url: str, url: str = "") -> dict[str, Any]:
    return cards.extended(agent_card(agent, base_url=base_url, url=url), agent)
