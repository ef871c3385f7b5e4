"""A2A 0.3 over JSON-RPC: plain-JSON params and results with `kind` discriminators (`codec`),
the ten slash-named methods and 0.3's error objects (`methods`), its agent card (`card`).
A request without A2A-Version speaks it (A2A 1.0 §3.6.2)."""

from tasks_app.lifecycle import Dialect

from ..base import WireDialect
from . import card, codec, methods

DIALECT = WireDialect(
    name=Dialect.A2A_0_3,
    label="0.3",
    versions=frozenset({"", "0.3", "0.3.0"}),
    methods=methods.METHODS,
    encode_event=codec.encode_event,
    encode_task=codec.encode_task,
    card=card.agent_card,
    error=methods.error,
    encode_push=methods.push_notification,
    # 0.3 named the header X-A2A-Extensions; peers of either name read the echo.
    extension_headers=("A2A-Extensions", "X-A2A-Extensions"),
)
