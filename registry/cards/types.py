"""The values this package hands out: problems with a card, the fetched card, its index and
the outcome of each signature check. Plain frozen dataclasses, no Django."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# Which card format a document is in: A2A 1.0, A2A 0.3 (0.2.x cards read as 0.3: the same
# members and methods), A2A 0.1, or an ACPs Agent Capability Specification.
Version = Literal["1.0", "0.3", "0.1", "acs"]
VERSIONS: tuple[Version, ...] = ("1.0", "0.3", "0.1", "acs")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a card: where (a JSON pointer, "" for the whole document) and what,
    in a sentence for a human."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '(the card)'}: {self.message}"


class CardRejected(Exception):
    """The card cannot be read as any known format, or breaks its format's rules."""

    SHOWN = 3

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        head = "; ".join(str(p) for p in self.problems[: self.SHOWN])
        more = f" (and {count - self.SHOWN} more)" if count > self.SHOWN else ""
        super().__init__(f"the card has {count} problem{'s' if count != 1 else ''}: {head}{more}")


class FetchFailed(Exception):
    """No card could be read from the URL; the message says why, in one sentence."""


@dataclass(frozen=True)
class Fetched:
    url: str  # where the card was read from
    document: dict[str, Any]  # the parsed card
    body: bytes  # exactly the bytes served
    etag: str | None
    status: int
    latency_ms: int


@dataclass(frozen=True)
class Endpoint:
    url: str
    binding: str  # "JSONRPC", "HTTP+JSON", "GRPC" or "AMQP"
    protocol_version: str  # as the card says it ("1.0", "0.3.0", "02.02"...)
    tenant: str = ""  # A2A 1.0: what a client must send as `tenant` on this interface


@dataclass(frozen=True)
class Skill:
    id: str
    name: str
    description: str
    tags: tuple[str, ...]  # lower-cased, deduplicated
    examples: tuple[str, ...]
    input_modes: tuple[str, ...]  # the skill's own (lower-cased); empty: the card's defaults
    output_modes: tuple[str, ...]


@dataclass(frozen=True)
class CardIndex:
    """What the registry indexes, filters and shows of a card, the same for every format."""

    dialect: Version  # which format the card is in
    name: str
    description: str
    card_version: str  # the card's own `version`
    provider_organization: str
    provider_url: str
    documentation_url: str
    icon_url: str
    url: str  # the primary endpoint ("" for an ACS document with no endpoint)
    endpoints: tuple[Endpoint, ...]
    bindings: tuple[str, ...]
    protocol_versions: tuple[str, ...]
    capabilities: tuple[str, ...]  # of "streaming", "push_notifications", "extended_card", "state_transition_history"
    extensions: tuple[str, ...]  # URIs
    input_modes: tuple[str, ...]  # the defaults, then every skill's
    output_modes: tuple[str, ...]
    security_schemes: tuple[str, ...]  # "apiKey", "http", "oauth2", "openIdConnect", "mutualTLS"
    skills: tuple[Skill, ...]
    tags: tuple[str, ...]  # every skill's
    signed: bool


@dataclass(frozen=True)
class SignatureCheck:
    """The outcome of one entry of a card's `signatures`."""

    kid: str  # the key id the signature names ("" if none)
    alg: str  # the algorithm its protected header names ("" if none)
    jku: str  # where the keys were looked up: the header's jku, else the default key set URL
    valid: bool
    reason: str  # why it is valid (which key) or why not
