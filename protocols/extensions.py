"""Extension activation (A2A's extensions document, seed 002): a client asks for extensions in
the `A2A-Extensions` request header (0.3 clients write `X-A2A-Extensions`), a comma-separated
list of URIs; the agent activates the ones its card declares and ignores the rest; the answer
names the activated ones in the same header; a request that leaves out an extension the card
marks `required` is refused (ExtensionSupportRequired, in each dialect's own form).

What was activated travels with the request (`exchange.Call.extensions`) and is stored with
the client's message, so the agent's run sees it (`AgentContext.extensions`, `.extension()`).
docs/extensions.md says how to write one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from accounts.models import Agent
from tasks_app.errors import ExtensionSupportRequired

HEADER = "A2A-Extensions"
LEGACY_HEADER = "X-A2A-Extensions"  # A2A 0.3 and its SDKs


@dataclass(frozen=True)
class Activation:
    uris: tuple[str, ...]  # in the order of the agent's card
    legacy: bool  # the client wrote X-A2A-Extensions: it reads the answer's header by that name

    def echo(self, names: tuple[str, ...] = (HEADER,)) -> dict[str, str]:
        """The answer's headers naming what was activated (none when nothing was): under the
        names the dialect's peers read, and the one the client wrote."""
        if not self.uris:
            return {}
        value = ", ".join(self.uris)
        return dict.fromkeys((*names, *((LEGACY_HEADER,) if self.legacy else ())), value)


def _listed(value: str) -> set[str]:
    return {uri.strip() for uri in value.split(",") if uri.strip()}


def activate(headers: Mapping[str, str], agent: Agent) -> Activation:
    """The extensions the client asked for (either header; lower-case names) that this agent's
    card declares. Unknown URIs are ignored, as the extensions document says."""
    legacy = _listed(headers.get(LEGACY_HEADER.lower(), ""))
    requested = _listed(headers.get(HEADER.lower(), "")) | legacy
    uris = tuple(e["uri"] for e in agent.extensions if isinstance(e, dict) and e.get("uri") in requested)
    return Activation(uris=uris, legacy=bool(legacy))


def required(agent: Agent) -> list[str]:
    """The URIs the agent's card marks required."""
    return [e["uri"] for e in agent.extensions if isinstance(e, dict) and e.get("required") and e.get("uri")]


def check_required(agent: Agent, activation: Activation) -> None:
    missing = [uri for uri in required(agent) if uri not in activation.uris]
    if missing:
        raise ExtensionSupportRequired(
            f"this agent requires the extension(s) {', '.join(missing)}; activate them with the {HEADER} header"
        )
