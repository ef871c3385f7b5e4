"""ACPs AIP v01.00 (seed 004), as a Partner: the wire shapes (`codec`), the commands' state
table over the shared store (`flow`), its methods (`methods`) and its binding (`binding`: one
path per method below `/agents/<tenant>/<agent>/aip/`). Its tasks live in the same store as
A2A's; A2A readers see them with AIP's states mapped (docs/aip.md)."""

from tasks_app.encoders import PushHeaders
from tasks_app.lifecycle import Dialect

from ..base import WireDialect
from . import codec, methods

DIALECT = WireDialect(
    name=Dialect.AIP_1_0,
    label="AIP 1.0",
    versions=frozenset(),  # never an A2A-Version's: its own binding names it
    methods=methods.METHODS,
    encode_event=codec.encode_event,
    encode_task=codec.encode_task,
    card=None,
    error=codec.encode_error,
    encode_push=methods.push_notification,
    push_headers=PushHeaders(content_type="application/json", token_header="X-ACPS-AIP-Notification-Token"),
    extension_headers=(),
)
