"""Media types: whether an agent takes what a message carries, and can give what a client
accepts (A2A's ContentTypeNotSupportedError, -32005, for both).

The agent's modes are its card's: `defaultInputModes`/`defaultOutputModes` and every skill's
own `inputModes`/`outputModes` (a message does not say which skill it is for, so a mode any
skill declares is one the agent takes). Only what a part states is checked: a file part's
media type. A text or data part names none, and none is assumed for it.
"""

from __future__ import annotations

from collections.abc import Iterable

from accounts.models import Agent

from .errors import ContentTypeNotSupported
from .parts import Part

DEFAULT_MODES = ("text/plain",)


def essence(media_type: str) -> str:
    """`Text/Plain; charset=utf-8` → `text/plain`: types compare without case or parameters."""
    return media_type.split(";", 1)[0].strip().lower()


def _range(media_type: str) -> str:
    # Early A2A samples name modes by their top-level type alone ("text"): read it as "text/*".
    media_type = essence(media_type)
    return media_type if "/" in media_type else f"{media_type}/*"


def matches(one: str, other: str) -> bool:
    """Either side may be a wildcard: `*/*`, or `type/*` (or a bare `type`)."""
    one, other = _range(one), _range(other)
    if one == other or "*/*" in (one, other):
        return True
    one_type, _, one_sub = one.partition("/")
    other_type, _, other_sub = other.partition("/")
    return one_type == other_type and "*" in (one_sub, other_sub)


def declared(modes: list[str]) -> list[str]:
    """An agent's default input or output modes as its card declares them."""
    return list(modes or DEFAULT_MODES)


def _modes(agent: Agent, key: str, defaults: list[str]) -> list[str]:
    modes = declared(defaults)
    for skill in agent.skills or []:
        if isinstance(skill, dict):
            modes.extend(m for m in skill.get(key) or [] if isinstance(m, str))
    return modes


def input_modes(agent: Agent) -> list[str]:
    return _modes(agent, "inputModes", agent.input_modes)


def output_modes(agent: Agent) -> list[str]:
    return _modes(agent, "outputModes", agent.output_modes)


def accepts_any(accepted: Iterable[str], offered: Iterable[str]) -> bool:
    offered = list(offered)
    return any(matches(a, o) for a in accepted for o in offered)


def check_message(*, agent: Agent, parts: list[Part], accepted_output_modes: list[str] | None) -> None:
    """Refuse a message the agent cannot take, or a client whose accepted output modes the
    agent can never produce, before anything is stored."""
    taken = None
    for index, part in enumerate(parts):
        media_type = part.get("media_type")
        if part.get("type") != "file" or not media_type:
            continue
        taken = taken or input_modes(agent)
        if not accepts_any([media_type], taken):
            raise ContentTypeNotSupported(
                f"message.parts[{index}] has media type {media_type!r}, which this agent does not accept; "
                f"it accepts {', '.join(dict.fromkeys(taken))}"
            )
    if accepted_output_modes:
        produced = output_modes(agent)
        if not accepts_any(accepted_output_modes, produced):
            raise ContentTypeNotSupported(
                f"configuration.acceptedOutputModes ({', '.join(accepted_output_modes)}) includes nothing this "
                f"agent produces; it produces {', '.join(dict.fromkeys(produced))}"
            )
