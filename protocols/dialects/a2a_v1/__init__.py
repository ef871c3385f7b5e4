"""A2A 1.0 over JSON-RPC: ProtoJSON params and results (`codec`), the eleven methods (`methods`)."""

from tasks_app.lifecycle import Dialect

from ...cards import agent_card
from ..base import WireDialect
from . import codec, methods

DIALECT = WireDialect(
    name=Dialect.A2A_1_0,
    label="1.0",
    versions=frozenset({"1.0", "1", "1.0.0", "1.0.1"}),
    methods=methods.METHODS,
    encode_event=codec.encode_event,
    encode_task=codec.encode_task,
    card=agent_card,
)
