"""One index for every card format: what the registry stores in columns, filters on and
searches. Total: reads only what has the expected type, so it cannot raise for any
dictionary (and gives the full index for one `validate` passed)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .types import CardIndex, Endpoint, Skill, Version

BINDINGS = {"JSONRPC": "JSONRPC", "GRPC": "GRPC", "HTTP+JSON": "HTTP+JSON", "HTTP_JSON": "HTTP+JSON", "AMQP": "AMQP"}
# A2A 1.0 wraps each scheme in a member naming its kind.
SCHEME_WRAPPERS = {
    "apiKeySecurityScheme": "apiKey",
    "httpAuthSecurityScheme": "http",
    "oauth2SecurityScheme": "oauth2",
    "openIdConnectSecurityScheme": "openIdConnect",
    "mtlsSecurityScheme": "mutualTLS",
}
SCHEME_TYPES = {
    "apikey": "apiKey",
    "http": "http",
    "oauth2": "oauth2",
    "openidconnect": "openIdConnect",
    "mutualtls": "mutualTLS",
}
# A2A 0.1 lists scheme names as free text ("Bearer", "Basic", "OAuth"...): the usual ones map
# onto the types; any other is kept, lower-cased.
LEGACY_SCHEMES = {
    "bearer": "http",
    "basic": "http",
    "digest": "http",
    "http": "http",
    "apikey": "apiKey",
    "api_key": "apiKey",
    "api-key": "apiKey",
    "api key": "apiKey",
    "oauth": "oauth2",
    "oauth2": "oauth2",
    "openidconnect": "openIdConnect",
    "openid": "openIdConnect",
    "oidc": "openIdConnect",
    "mtls": "mutualTLS",
    "mutualtls": "mutualTLS",
}
V01_PROTOCOL = "0.1.0"
V03_DEFAULT_PROTOCOL = "0.3.0"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _unique(values: Iterable[str], *, lower: bool = False) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for value in values:
        if isinstance(value, str) and value.strip():
            value = value.strip().lower() if lower else value.strip()
            seen.setdefault(value, None)
    return tuple(seen)


def _strings(value: Any) -> list[str]:
    return [item for item in _list(value) if isinstance(item, str)]


def binding(name: Any) -> str:
    text = _text(name).strip().upper()
    return BINDINGS.get(text, text)


def _skill(raw: Any) -> Skill | None:
    skill = _dict(raw)
    if not isinstance(skill.get("id"), str):
        return None
    return Skill(
        id=skill["id"],
        name=_text(skill.get("name")),
        description=_text(skill.get("description")),
        tags=_unique(_strings(skill.get("tags")), lower=True),
        examples=_unique(_strings(skill.get("examples"))),
        input_modes=_unique(_strings(skill.get("inputModes")), lower=True),
        output_modes=_unique(_strings(skill.get("outputModes")), lower=True),
    )


def _endpoints(document: dict[str, Any], version: Version) -> list[Endpoint]:
    found: list[Endpoint] = []
    if version == "1.0":
        for raw in _list(document.get("supportedInterfaces")):
            interface = _dict(raw)
            found.append(
                Endpoint(
                    url=_text(interface.get("url")),
                    binding=binding(interface.get("protocolBinding")),
                    protocol_version=_text(interface.get("protocolVersion")),
                    tenant=_text(interface.get("tenant")),
                )
            )
    elif version == "0.3":
        protocol = _text(document.get("protocolVersion")) or V03_DEFAULT_PROTOCOL
        found.append(
            Endpoint(_text(document.get("url")), binding(document.get("preferredTransport") or "JSONRPC"), protocol)
        )
        for raw in _list(document.get("additionalInterfaces")):
            interface = _dict(raw)
            found.append(Endpoint(_text(interface.get("url")), binding(interface.get("transport")), protocol))
    elif version == "0.1":
        found.append(Endpoint(_text(document.get("url")), "JSONRPC", V01_PROTOCOL))
    else:
        protocol = _text(document.get("protocolVersion"))
        for raw in _list(document.get("endPoints")):
            endpoint = _dict(raw)
            found.append(Endpoint(_text(endpoint.get("url")), binding(endpoint.get("transport")), protocol))
    unique: dict[tuple[str, str, str], Endpoint] = {}
    for each in found:
        if each.url:
            unique.setdefault((each.url, each.binding, each.tenant), each)
    return list(unique.values())


def _capabilities(document: dict[str, Any], version: Version) -> tuple[str, ...]:
    declared = _dict(document.get("capabilities"))
    names = {
        "streaming": "streaming",
        "pushNotifications": "push_notifications",
        "stateTransitionHistory": "state_transition_history",
        "extendedAgentCard": "extended_card",
        "notification": "push_notifications",  # ACS
    }
    found = [name for member, name in names.items() if declared.get(member) is True]
    if version == "0.3" and document.get("supportsAuthenticatedExtendedCard") is True:
        found.append("extended_card")
    order = ("streaming", "push_notifications", "extended_card", "state_transition_history")
    return tuple(name for name in order if name in found)


def _scheme_types(document: dict[str, Any], version: Version) -> tuple[str, ...]:
    found: list[str] = []
    if version == "0.1":
        for name in _strings(_dict(document.get("authentication")).get("schemes")):
            key = name.strip().lower()
            found.append(LEGACY_SCHEMES.get(key, key))
        return _unique(found)
    for raw in _dict(document.get("securitySchemes")).values():
        scheme = _dict(raw)
        if version == "1.0":
            found.extend(SCHEME_WRAPPERS[member] for member in scheme if member in SCHEME_WRAPPERS)
        else:
            kind = _text(scheme.get("type"))
            found.append(SCHEME_TYPES.get(kind.lower(), kind))
    return _unique(found)


def normalise(document: dict[str, Any], version: Version) -> CardIndex:
    """The index of a card `validate(document, version)` found no problem with."""
    document = _dict(document)
    provider = _dict(document.get("provider"))
    skills = tuple(skill for skill in map(_skill, _list(document.get("skills"))) if skill is not None)
    endpoints = tuple(_endpoints(document, version))
    extensions = [_dict(e).get("uri") for e in _list(_dict(document.get("capabilities")).get("extensions"))]
    return CardIndex(
        dialect=version,
        name=_text(document.get("name")),
        description=_text(document.get("description")),
        card_version=_text(document.get("version")),
        provider_organization=_text(provider.get("organization")),
        provider_url=_text(provider.get("url")),
        documentation_url=_text(document.get("documentationUrl")),
        icon_url=_text(document.get("iconUrl")),
        url=endpoints[0].url if endpoints else "",
        endpoints=endpoints,
        bindings=_unique(endpoint.binding for endpoint in endpoints),
        protocol_versions=_unique(endpoint.protocol_version for endpoint in endpoints)
        or _unique([_text(document.get("protocolVersion"))]),
        capabilities=_capabilities(document, version),
        extensions=_unique(uri for uri in extensions if isinstance(uri, str)),
        input_modes=_unique(
            [*_strings(document.get("defaultInputModes")), *(m for s in skills for m in s.input_modes)], lower=True
        ),
        output_modes=_unique(
            [*_strings(document.get("defaultOutputModes")), *(m for s in skills for m in s.output_modes)], lower=True
        ),
        security_schemes=_scheme_types(document, version),
        skills=skills,
        tags=_unique((tag for skill in skills for tag in skill.tags), lower=True),
        signed=version != "acs" and bool(_list(document.get("signatures"))),
    )


def search_text(index: CardIndex) -> dict[str, str]:
    """Text blocks by weight for Postgres full-text search: A the name; B skill names, tags and
    the provider; C the descriptions; D the examples."""
    return {
        "A": index.name,
        "B": "\n".join([*(s.name for s in index.skills), " ".join(index.tags), index.provider_organization]).strip(),
        "C": "\n".join([index.description, *(s.description for s in index.skills)]).strip(),
        "D": "\n".join(example for s in index.skills for example in s.examples),
    }
