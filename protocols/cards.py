"""The A2A 1.0 agent card of a hosted agent. It declares only what works: an interface per
binding (JSON-RPC first, the one clients should prefer; HTTP+JSON's routes below the same
URL; gRPC's address last, when it is served), capabilities as implemented, and exactly the
schemes the server enforces (an API key; bearer tokens when the tenant has an OpenID Connect
issuer), required unless the agent is public. Its description ends with who sees which tasks (docs/tenancy.md)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from accounts.card_content import SERVERS, extended_content
from accounts.models import Agent
from accounts.selectors import oidc_issuer_of
from tasks_app import media

from .bindings import BINDINGS

API_KEY_HEADER = "X-API-Key"
API_KEY_SCHEME = "apiKey"
OIDC_SCHEME = "oidc"

VISIBILITY = {
    "keyed": "Each caller sees only the tasks it created.",
    "public": "Callers without a key are welcome: each of their tasks is reachable only by its id, and "
    "ListTasks shows them none. Callers with a key see only the tasks they created.",
    "sandbox": "This agent is a shared sandbox: every caller acts as one principal and sees every task of "
    "this agent, other callers' messages included.",
}


def visibility(agent: Agent) -> str:
    """Who sees which tasks of this agent, in one sentence."""
    return VISIBILITY["sandbox" if agent.shared_sandbox else "public" if agent.is_public else "keyed"]


def security(agent: Agent) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The card's securitySchemes and securityRequirements: what protocols.auth enforces."""
    schemes: dict[str, Any] = {
        API_KEY_SCHEME: {
            "apiKeySecurityScheme": {
                "location": "header",
                "name": API_KEY_HEADER,
                "description": "An API key of the agent's tenant. "
                + ("Optional here." if agent.is_public else "Required, unless a bearer token is sent."),
            }
        }
    }
    issuer = oidc_issuer_of(agent)
    if issuer is not None:
        schemes[OIDC_SCHEME] = {
            "openIdConnectSecurityScheme": {
                "openIdConnectUrl": issuer.issuer.rstrip("/") + "/.well-known/openid-configuration",
                "description": f"An access token from {issuer.issuer} for the audience {issuer.audience}, "
                "in Authorization: Bearer.",
            }
        }
    # Any one scheme is enough (requirements are alternatives); none, for a public agent.
    requirements: list[dict[str, Any]] = (
        [] if agent.is_public else [{"schemes": {name: {"list": []}}} for name in schemes]
    )
    return schemes, requirements


def skills(agent: Agent) -> list[dict[str, Any]]:
    """The agent's skills as A2A writes them (the same shape from 0.1 to 1.0)."""
    return _skill_list(agent.skills)


def _skill_list(given: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": s.get("id", ""),
            "name": s.get("name", s.get("id", "")),
            "description": s.get("description", ""),
            "tags": s.get("tags", []),
            **({"examples": s["examples"]} if s.get("examples") else {}),
            **({"inputModes": s["inputModes"]} if s.get("inputModes") else {}),
            **({"outputModes": s["outputModes"]} if s.get("outputModes") else {}),
        }
        for s in given or []
        if isinstance(s, dict)  # checked when saved (accounts.card_content); rows from before may not be
    ]


def provider(agent: Agent, *, base_url: str) -> dict[str, str]:
    return {"organization": agent.provider_organization or agent.tenant.name, "url": agent.provider_url or base_url}


def agent_url(agent: Agent, *, base_url: str, url: str = "") -> str:
    """Where the agent answers: `url` when the request came by a bound host name's root,
    else its path below `base_url`."""
    return url or f"{base_url}{agent.path}"


def grpc_interface(agent: Agent, *, base_url: str, url: str = "") -> dict[str, Any] | None:
    """The gRPC interface (protocols/grpc_server.py), when the server runs one. Its `url` is a
    bare `host:port`, as gRPC clients take it; `tenant` is the agent, which a client sends in each
    request's `tenant` field (protocols.grpc_server). An agent reached by a bound address (`url`) is the one that
    address serves, and needs no naming."""
    public, port = settings.GRPC_PUBLIC_URL, settings.GRPC_PORT
    if not public and not port:
        return None
    if url and not public:
        host = urlsplit(url).hostname or ""
        return {"url": f"{_bracketed(host)}:{port}", "protocolBinding": "GRPC", "protocolVersion": "1.0"}
    address = public or f"{_bracketed(urlsplit(base_url).hostname or 'localhost')}:{port}"
    tenant = f"{agent.tenant.slug}/{agent.slug}"
    return {"url": address, "protocolBinding": "GRPC", "tenant": tenant, "protocolVersion": "1.0"}


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def agent_card(agent: Agent, *, base_url: str, url: str = "") -> dict[str, Any]:
    grpc = grpc_interface(agent, base_url=base_url, url=url)
    url = agent_url(agent, base_url=base_url, url=url)
    schemes, requirements = security(agent)
    card: dict[str, Any] = {
        "name": agent.name,
        "description": f"{agent.description.rstrip()}\n\n{visibility(agent)}",
        "supportedInterfaces": [
            *({"url": url, "protocolBinding": binding.name, "protocolVersion": "1.0"} for binding in BINDINGS),
            *([grpc] if grpc else []),
        ],
        "provider": provider(agent, base_url=base_url),
        "version": agent.version,
        **({"iconUrl": agent.icon_url} if agent.icon_url else {}),
        **({"documentationUrl": agent.documentation_url} if agent.documentation_url else {}),
        "capabilities": {
            "streaming": agent.streaming,
            "pushNotifications": agent.push_notifications,
            "extendedAgentCard": agent.has_extended_card,
            **({"extensions": agent.extensions} if agent.extensions else {}),
        },
        "securitySchemes": schemes,
        "defaultInputModes": media.declared(agent.input_modes),
        "defaultOutputModes": media.declared(agent.output_modes),
        "skills": skills(agent),
    }
    if requirements:
        card["securityRequirements"] = requirements
    return card


def extended_agent_card(agent: Agent, *, base_url: str, url: str = "") -> dict[str, Any]:
    """The card plus what the agent shows only to authenticated callers (accounts.card_content)."""
    return extended(agent_card(agent, base_url=base_url, url=url), agent)


def extended(card: dict[str, Any], agent: Agent) -> dict[str, Any]:
    """`card` plus the agent's extended content: its skills after the card's (one of an id the
    card has already is left out: ids are unique on a card), its description, documentation
    and icon links in place of the card's. Only what accounts.card_content lets an extended card
    carry is read, so a row stored before that check cannot put its url or provider here."""
    merged = dict(card)
    for name, value in extended_content(agent.extended_card).items():
        if name == "skills":
            skills_now = list(card.get("skills", []))
            taken = {s["id"] for s in skills_now}
            for skill in _skill_list(value):
                if skill["id"] not in taken:
                    taken.add(skill["id"])
                    skills_now.append(skill)
            merged["skills"] = skills_now
        elif name == "description":
            merged["description"] = f"{value.rstrip()}\n\n{visibility(agent)}"
        else:
            merged[name] = value
    # The server's members (1.0's and 0.3's) as it made them, whatever the tenant stored: never
    # otherwise while the merge reads only card_content's members, and the signature relies on it.
    changed = sorted(name for name in SERVERS if merged.get(name) != card.get(name))
    if changed:
        raise ValueError(f"an extended card may not change the card's {', '.join(changed)}")
    return merged
