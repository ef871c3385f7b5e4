"""A2A 0.1 over JSON-RPC: the first public draft's wire shapes (`codec`), its seven methods
(`methods`) and its card (`card`). Requests without A2A-Version whose method is 0.1's alone are
0.1's; a method 0.1 shares with another header-less dialect is answered in 0.1 for a task 0.1
created (`claims`; docs/dialects.md)."""

from tasks_app.lifecycle import Dialect

from ..base import WireDialect
from . import card, codec, methods

DIALECT = WireDialect(
    name=Dialect.A2A_0_1,
    label="0.1",
    versions=frozenset({"", "0.1", "0.1.0"}),
    methods=methods.METHODS,
    encode_event=codec.encode_event,
    encode_task=codec.encode_task,
    card=card.agent_card,
    error=codec.encode_error,
    claims=frozenset({Dialect.A2A_0_1}),
)
