"""Hostile requests, built from the wire schema, and what every answer to them must be.

The schema is the official one: the A2A 1.0 protobuf descriptors the a2a-sdk ships
(`a2a.types.a2a_pb2`); A2A 0.3's methods (`V03_METHODS`) draw their params from 0.3's JSON
schema as the SDK's `a2a.compat.v0_3.types` write it. `requests()` draws a whole request for
one JSON-RPC method: params in ProtoJSON (or 0.3's JSON) that follow the schema (plausible
enough that many succeed, so success paths are walked too), then, most of the time, hostile
changes: a value of the wrong type at any path, an oversize or odd string, deep nesting, a
number out of range, a member given twice or under both its names, a broken envelope, a
broken body, odd headers. `verdict()` checks an answer against the invariants and names its
outcome for counting. Used by tests/test_hostile.py and, through it, bench/hostile.py.

Network safety: push URLs come only from `Pools.urls`. For the live stack (which resolves
push URLs for real) those are loopback literals outside the allow-list, and `foreign_url`
rejects any body in which some other host could be read as a URL's.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from a2a.types import a2a_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import assume
from hypothesis import strategies as st

# JSON-RPC method -> the message its params are (a2a.proto; the JSON-RPC binding's table).
METHODS: dict[str, Descriptor] = {
    "SendMessage": a2a_pb2.SendMessageRequest.DESCRIPTOR,
    "SendStreamingMessage": a2a_pb2.SendMessageRequest.DESCRIPTOR,
    "GetTask": a2a_pb2.GetTaskRequest.DESCRIPTOR,
    "ListTasks": a2a_pb2.ListTasksRequest.DESCRIPTOR,
    "CancelTask": a2a_pb2.CancelTaskRequest.DESCRIPTOR,
    "SubscribeToTask": a2a_pb2.SubscribeToTaskRequest.DESCRIPTOR,
    "CreateTaskPushNotificationConfig": a2a_pb2.TaskPushNotificationConfig.DESCRIPTOR,
    "GetTaskPushNotificationConfig": a2a_pb2.GetTaskPushNotificationConfigRequest.DESCRIPTOR,
    "ListTaskPushNotificationConfigs": a2a_pb2.ListTaskPushNotificationConfigsRequest.DESCRIPTOR,
    "DeleteTaskPushNotificationConfig": a2a_pb2.DeleteTaskPushNotificationConfigRequest.DESCRIPTOR,
    "GetExtendedAgentCard": a2a_pb2.GetExtendedAgentCardRequest.DESCRIPTOR,
}
# A2A 0.3's JSON-RPC methods (sent without A2A-Version, as 0.3 clients do) and their params'
# type in 0.3's JSON schema; `v03_params` draws them.
V03_METHODS = {
    "message/send": "MessageSendParams",
    "message/stream": "MessageSendParams",
    "tasks/get": "TaskQueryParams",
    "tasks/cancel": "TaskIdParams",
    "tasks/resubscribe": "TaskIdParams",
    "tasks/pushNotificationConfig/set": "TaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfigParams",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigParams",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfigParams",
    "agent/getAuthenticatedExtendedCard": "",
}
STREAMING = frozenset({"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"})

# The codes a caller's request may be answered with (JSON-RPC's own, and A2A's -32001..-32009).
# -32029 and -32030: a rate limit or a tenant's cap (docs/limits.md), clear errors too.
ALLOWED_CODES = frozenset({-32700, -32600, -32601, -32602, *range(-32009, -32000), -32029, -32030})
INTERNAL_ERROR = -32603

# Loopback literals outside every allow-list the live stack has: the SSRF guard refuses
# them without a DNS query, and nothing listens there.
LIVE_URLS = (
    "http://127.0.0.2:9/hook",
    "https://[::ffff:127.0.0.3]/hook",
    "http://127.0.0.2/",
    "https://127.0.0.2:8443/a?b=c",
)
# Strings for URL fields that are no URL at all: no scheme, nothing a resolver could be asked.
NOT_URLS = ("", " ", "hook", "not a url", "127.0.0.2", "[::ffff:127.0.0.3]", "x" * 2049, "\x00", "\ud800")


# --- JSON text Python's json will not write ------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """JSON text spliced in as is: `1e400`, `NaN`, `-0.0`, ten thousand brackets."""

    text: str


@dataclass(frozen=True)
class Twice:
    """An object that names `key` twice: first with `first`, then with the value it holds."""

    members: dict
    key: str
    first: Any


def encode(value: Any, *, ascii_only: bool = True) -> str:
    """JSON text of `value`. With `ascii_only` every non-ASCII character is a \\u escape (so a
    lone surrogate is written as one); without, characters are written raw (and a lone
    surrogate then makes bytes that are not UTF-8)."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Twice):
        members = [(value.key, value.first), *value.members.items()]
        return (
            "{"
            + ",".join(
                f"{json.dumps(k, ensure_ascii=ascii_only)}:{encode(v, ascii_only=ascii_only)}" for k, v in members
            )
            + "}"
        )
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(
                f"{json.dumps(k, ensure_ascii=ascii_only)}:{encode(v, ascii_only=ascii_only)}" for k, v in value.items()
            )
            + "}"
        )
    if isinstance(value, list):
        return "[" + ",".join(encode(v, ascii_only=ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


# --- ProtoJSON that follows the schema ----------------------------------------------------------


@dataclass
class Pools:
    """Values a request should often carry to get past the first checks: real task ids (all
    of them terminal: a stream on them ends at once), their context ids, and the URLs push
    may be given in this run."""

    task_ids: list[str]
    context_ids: list[str] = field(default_factory=list)
    urls: tuple[str, ...] = LIVE_URLS
    # Strategies built for these pools, once: building them anew per draw cost ~40 ms a request.
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    def cached(self, key: Any, build) -> st.SearchStrategy:
        if key not in self.cache:
            self.cache[key] = build()
        return self.cache[key]


def json_values(max_leaves: int = 8) -> st.SearchStrategy:
    """Any JSON value (google.protobuf.Value, a Struct's members)."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**53), 2**53)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
        max_leaves=max_leaves,
    )


_TIMESTAMPS = st.one_of(
    st.datetimes(
        min_value=datetime.datetime(1970, 1, 1),
        max_value=datetime.datetime(2100, 1, 1),
        timezones=st.just(datetime.UTC),
    ).map(lambda d: d.isoformat().replace("+00:00", "Z")),
    st.sampled_from(
        [
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00.123456789Z",
            "2026-01-01T01:00:00+01:00",
            "1970-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
            "0001-01-01T00:00:00Z",
        ]
    ),
)
_INT_TYPES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
MEDIA_TYPES = ["text/plain", "text/*", "*/*", "application/json", "image/png", "", "text/plain; charset=utf-8"]


def _ids(pools: Pools) -> st.SearchStrategy:
    return pools.cached("ids", lambda: _build_ids(pools))


def _build_ids(pools: Pools) -> st.SearchStrategy:
    real = [st.sampled_from(pools.task_ids)] * 3 if pools.task_ids else []
    return st.one_of(*real, st.uuids().map(str), st.text(min_size=1, max_size=12))


def _string(f: FieldDescriptor, pools: Pools) -> st.SearchStrategy:
    name = f.json_name
    if name in ("id", "taskId") or name == "referenceTaskIds":
        return _ids(pools)
    if name == "contextId":
        real = [st.sampled_from(pools.context_ids)] if pools.context_ids else []
        return st.one_of(*real, st.uuids().map(str), st.text(min_size=1, max_size=12))
    if name == "url":
        return st.sampled_from(pools.urls) | st.sampled_from(NOT_URLS)
    if name in ("mediaType", "acceptedOutputModes"):
        return st.sampled_from(MEDIA_TYPES)
    if name == "messageId":
        return st.uuids().map(str) | st.text(min_size=1, max_size=40)
    if name == "scheme":
        return st.sampled_from(["Bearer", "Basic", "ApiKey", "x"])
    if name == "tenant":
        return st.sampled_from(["", "acme", "other"])
    return st.text(max_size=30)


def _scalar(f: FieldDescriptor, pools: Pools) -> st.SearchStrategy:
    if f.type == FieldDescriptor.TYPE_STRING:
        return _string(f, pools)
    if f.type == FieldDescriptor.TYPE_BYTES:  # ProtoJSON: standard or URL-safe base64
        return st.binary(max_size=30).map(lambda b: base64.b64encode(b).decode()) | st.binary(max_size=30).map(
            lambda b: base64.urlsafe_b64encode(b).decode()
        )
    if f.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if f.type in _INT_TYPES:
        low, high = _INT_TYPES[f.type]
        small = st.integers(0, 120) if f.json_name in ("historyLength", "pageSize") else st.integers(0, 1000)
        values = small | st.integers(low, high)
        return values | values.map(str)  # ProtoJSON: a number or a decimal string
    if f.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(["NaN", "Infinity", "-Infinity"])
    if f.type == FieldDescriptor.TYPE_ENUM:
        values = f.enum_type.values
        if f.json_name == "role":
            return st.sampled_from(["ROLE_USER"] * 8 + ["ROLE_AGENT", "ROLE_UNSPECIFIED", 1, 2, 0])
        return st.sampled_from([v.name for v in values] + [v.number for v in values])
    raise AssertionError(f"no strategy for {f.full_name}")


_WELL_KNOWN = {
    "google.protobuf.Struct": lambda: st.dictionaries(st.text(max_size=8), json_values(), max_size=3),
    "google.protobuf.Value": json_values,
    "google.protobuf.ListValue": lambda: st.lists(json_values(4), max_size=3),
    "google.protobuf.Timestamp": lambda: _TIMESTAMPS,
    "google.protobuf.Duration": lambda: st.sampled_from(["1s", "1.5s", "-0.000000001s", "315576000000s"]),
    "google.protobuf.FieldMask": lambda: st.sampled_from(["", "id", "status.state,history"]),
    "google.protobuf.Empty": lambda: st.just({}),
}


def _field(f: FieldDescriptor, pools: Pools, depth: int) -> st.SearchStrategy:
    return pools.cached(("field", f.full_name, depth), lambda: _build_field(f, pools, depth))


def _build_field(f: FieldDescriptor, pools: Pools, depth: int) -> st.SearchStrategy:
    message = f.message_type
    if message is not None and message.GetOptions().map_entry:  # a map: a JSON object
        key, value = message.fields_by_name["key"], message.fields_by_name["value"]
        return st.dictionaries(_scalar(key, pools).map(str), _field(value, pools, depth + 1), max_size=3)
    if message is None:
        one = _scalar(f, pools)
    elif message.full_name in _WELL_KNOWN:
        one = _WELL_KNOWN[message.full_name]()
    elif message.full_name.startswith("google.protobuf.") and message.full_name.endswith("Value"):
        one = _scalar(message.fields_by_name["value"], pools)  # wrappers: the bare scalar
    else:
        one = message_of(message, pools, depth + 1)
    if f.is_repeated:
        return st.lists(one, min_size=1 if f.json_name == "parts" else 0, max_size=3)
    return one


# Members a request needs to get anywhere: present far more often than not.
_USUALLY = {"message", "messageId", "role", "parts", "id", "taskId", "url"}
# Members that, present, mostly make a request fail early: rarer, so that many succeed.
_RARELY = {"taskId", "tenant", "referenceTaskIds", "extensions"}
MAX_DEPTH = 5  # schema recursion bound (a2a.proto has no cycles in requests, but keep it safe)


def message_of(descriptor: Descriptor, pools: Pools, depth: int = 0) -> st.SearchStrategy[dict]:
    """A ProtoJSON object of `descriptor`: camelCase members, one member of each oneof."""
    return pools.cached(("message", descriptor.full_name, depth), lambda: _build_message(descriptor, pools, depth))


def _build_message(descriptor: Descriptor, pools: Pools, depth: int) -> st.SearchStrategy[dict]:
    if depth > MAX_DEPTH:
        return st.just({})
    members = [(f, _field(f, pools, depth)) for f in descriptor.fields]

    @st.composite
    def build(draw) -> dict[str, Any]:
        out: dict[str, Any] = {}
        # A oneof chooses one member; "_x" oneofs are proto3 `optional`, not a choice.
        chosen = {
            o.name: draw(st.sampled_from(list(o.fields))).name for o in descriptor.oneofs if not o.name.startswith("_")
        }
        for f, strategy in members:
            oneof = f.containing_oneof
            if oneof is not None and not oneof.name.startswith("_"):
                present = chosen[oneof.name] == f.name
            elif f.json_name in _USUALLY and not (f.json_name == "taskId" and descriptor.name == "Message"):
                present = draw(st.integers(0, 19)) > 0
            else:
                present = draw(st.integers(0, 9)) < (1 if f.json_name in _RARELY else 3)
            if present:
                out[f.json_name] = draw(strategy)
        return out

    return build()


# --- A2A 0.1 ------------------------------------------------------------------------------------
# Its params follow the 0.1 document's TaskSendParams, TaskQueryParams, TaskIdParams and
# TaskPushNotificationConfig (it has no schema the SDK ships): the shapes below, then mutated
# like any other. Its clients send no A2A-Version (or 0.1), and choose their tasks' ids.

V01_METHODS = (
    "tasks/send",
    "tasks/sendSubscribe",
    "tasks/get",
    "tasks/cancel",
    "tasks/pushNotification/set",
    "tasks/pushNotification/get",
    "tasks/resubscribe",
)
V01_STREAMING = frozenset({"tasks/sendSubscribe", "tasks/resubscribe"})
# The members each 0.1 method reads.
V01_MEMBERS = {
    "tasks/send": {
        "id",
        "sessionId",
        "message",
        "historyLength",
        "pushNotification",
        "metadata",
        "acceptedOutputModes",
    },
    "tasks/get": {"id", "historyLength", "metadata"},
    "tasks/cancel": {"id", "metadata"},
    "tasks/pushNotification/set": {"id", "pushNotificationConfig"},
    "tasks/pushNotification/get": {"id", "metadata"},  # TaskIdParams, as cancel's
    "tasks/resubscribe": {"id", "historyLength", "metadata"},
}
V01_MEMBERS["tasks/sendSubscribe"] = V01_MEMBERS["tasks/send"]
# Every method: 1.0's, then 0.3's, then the ones only 0.1 has.
ALL_METHODS = [*sorted(METHODS), *sorted(V03_METHODS), *(m for m in V01_METHODS if m not in V03_METHODS)]


def _v01_ids(pools: Pools) -> st.SearchStrategy:
    # The pools' tasks (made in 1.0: reachable by their ids), ids a client might choose (a
    # UUID's hex, long enough for an anonymous caller; short ones, which are not).
    return _ids(pools) | st.uuids().map(lambda u: u.hex)


def _v01_push(pools: Pools) -> st.SearchStrategy:
    return st.fixed_dictionaries(
        {"url": st.sampled_from(pools.urls)},
        optional={
            "token": st.text(max_size=12),
            "authentication": st.fixed_dictionaries(
                {"schemes": st.lists(st.sampled_from(["Bearer", "jwt", "Basic"]), min_size=0, max_size=2)},
                optional={"credentials": st.text(max_size=12)},
            ),
        },
    )


def _v01_part(pools: Pools) -> st.SearchStrategy:
    metadata = {"metadata": st.dictionaries(st.text(max_size=6), json_values(3), max_size=2)}
    file = st.fixed_dictionaries(
        {},
        optional={
            "bytes": st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode()),
            "uri": st.sampled_from(pools.urls),
            "mimeType": st.sampled_from(MEDIA_TYPES),
            "name": st.text(max_size=8),
        },
    )
    return st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20)}, optional=metadata),
        st.fixed_dictionaries({"type": st.just("file"), "file": file}, optional=metadata),
        st.fixed_dictionaries(
            {"type": st.just("data"), "data": st.dictionaries(st.text(max_size=6), json_values(3), max_size=3)},
            optional=metadata,
        ),
    )


def _v01_params(method: str, pools: Pools) -> st.SearchStrategy[dict]:
    ids = _v01_ids(pools)
    history = st.integers(-2, 20) | st.sampled_from(["3", 1.5, None])
    metadata = st.dictionaries(st.text(max_size=6), json_values(3), max_size=2)
    if method in ("tasks/send", "tasks/sendSubscribe"):
        message = st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user"] * 5 + ["agent"]),
                "parts": st.lists(_v01_part(pools), min_size=1, max_size=3),
            },
            optional={"metadata": metadata},
        )
        return st.fixed_dictionaries(
            {"id": ids, "message": message},
            optional={
                "sessionId": st.sampled_from(pools.context_ids) if pools.context_ids else st.text(max_size=8),
                "historyLength": history,
                "pushNotification": _v01_push(pools),
                "metadata": metadata,
                "acceptedOutputModes": st.lists(st.sampled_from(MEDIA_TYPES), max_size=2),
            },
        )
    if method == "tasks/pushNotification/set":
        return st.fixed_dictionaries({"id": ids, "pushNotificationConfig": _v01_push(pools)})
    optional: dict[str, st.SearchStrategy] = {"metadata": metadata}
    if method in ("tasks/get", "tasks/resubscribe"):
        optional["historyLength"] = history
    return st.fixed_dictionaries({"id": ids}, optional=optional)


def params_for(method: str, pools: Pools) -> st.SearchStrategy[dict]:
    """Schema-following params of `method`, with the one member the server reads beyond the
    schema: SubscribeToTask's (and 0.3's tasks/resubscribe's) `lastEventId` (the SSE resume
    point, also a header). A method 0.1 and 0.3 share gets 0.3's (the same members)."""
    if method in V01_MEMBERS and method not in V03_METHODS:
        return pools.cached(("v01", method), lambda: _v01_params(method, pools))
    base = v03_params(method, pools) if method in V03_METHODS else message_of(METHODS[method], pools)
    if method not in ("SubscribeToTask", "tasks/resubscribe"):
        return base
    resume = st.sampled_from([0, 1, 2, "1", "", -1, "x", 2**40, 1.0])
    return pools.cached(
        ("subscribe", method),
        lambda: st.tuples(base, st.none() | resume).map(
            lambda p: p[0] if p[1] is None else {**p[0], "lastEventId": p[1]}
        ),
    )


def known_members(method: str) -> set[str]:
    """The members a method's unmutated params may have."""
    if method in V03_METHODS:
        return set(_V03_MEMBERS[V03_METHODS[method]]) | {"lastEventId"}
    if method in V01_MEMBERS:
        return V01_MEMBERS[method]
    return {f.json_name for f in METHODS[method].fields} | {"lastEventId"}


_V03_MEMBERS = {
    "MessageSendParams": ("message", "configuration", "metadata"),
    "TaskQueryParams": ("id", "historyLength", "metadata"),
    "TaskIdParams": ("id", "metadata"),
    "TaskPushNotificationConfig": ("taskId", "pushNotificationConfig"),
    "GetTaskPushNotificationConfigParams": ("id", "pushNotificationConfigId", "metadata"),
    "ListTaskPushNotificationConfigParams": ("id", "metadata"),
    "DeleteTaskPushNotificationConfigParams": ("id", "pushNotificationConfigId", "metadata"),
    "": (),
}


def _struct() -> st.SearchStrategy:
    return st.dictionaries(st.text(max_size=8), json_values(), max_size=3)


@st.composite
def _members(draw, required: dict[str, st.SearchStrategy], optional: dict[str, st.SearchStrategy]) -> dict:
    """An object: each required member most of the time, each optional one a third of the time."""
    out = {k: draw(v) for k, v in required.items() if draw(st.integers(0, 19)) > 0}
    out.update({k: draw(v) for k, v in optional.items() if draw(st.integers(0, 2)) == 0})
    return out


def _v03_push_config(pools: Pools) -> st.SearchStrategy[dict]:
    auth = _members(
        {"schemes": st.lists(st.sampled_from(["Bearer", "Basic", "ApiKey", "x", ""]), max_size=2)},
        {"credentials": st.text(max_size=20)},
    )
    return _members(
        {"url": st.sampled_from(pools.urls) | st.sampled_from(NOT_URLS)},
        {"id": st.text(min_size=1, max_size=12), "token": st.text(max_size=20), "authentication": auth},
    )


def _v03_part(pools: Pools) -> st.SearchStrategy[dict]:
    extras = {"metadata": _struct()}
    b64 = st.binary(max_size=30).map(lambda b: base64.b64encode(b).decode())
    file_extras = {"mimeType": st.sampled_from(MEDIA_TYPES), "name": st.text(max_size=12)}
    files = _members({"bytes": b64}, file_extras) | _members(
        {"uri": st.sampled_from(pools.urls) | st.sampled_from(NOT_URLS)}, file_extras
    )
    text = _members({"kind": st.just("text"), "text": st.text(max_size=30)}, extras)
    return st.one_of(
        text,
        text,
        _members({"kind": st.just("file"), "file": files}, extras),
        _members({"kind": st.just("data"), "data": _struct()}, extras),
    )


def _v03_message(pools: Pools) -> st.SearchStrategy[dict]:
    return _members(
        {
            "kind": st.just("message"),
            "messageId": st.uuids().map(str) | st.text(min_size=1, max_size=40),
            "role": st.sampled_from(["user"] * 18 + ["agent", "ROLE_USER"]),
            "parts": st.lists(_v03_part(pools), min_size=1, max_size=3),
        },
        {
            "contextId": st.sampled_from(pools.context_ids or ["c"]) | st.uuids().map(str),
            "referenceTaskIds": st.lists(_ids(pools), max_size=2),
            "extensions": st.lists(st.text(max_size=10), max_size=2),
            "metadata": _struct(),
        },
    ).flatmap(
        # A follow-up now and then (the pools' tasks are finished: mostly an error).
        lambda m: st.sampled_from([m] * 9 + [{**m, "taskId": pools.task_ids[0] if pools.task_ids else "t"}])
    )


def _build_v03(kind: str, pools: Pools) -> st.SearchStrategy[dict]:
    history = st.integers(0, 120) | st.integers(-(2**31), 2**31 - 1)
    meta = {"metadata": _struct()}
    config_id = st.text(min_size=1, max_size=12) | _ids(pools)
    if kind == "MessageSendParams":
        configuration = _members(
            {},
            {
                "acceptedOutputModes": st.lists(st.sampled_from(MEDIA_TYPES), max_size=2),
                "blocking": st.booleans(),
                "historyLength": history,
                "pushNotificationConfig": _v03_push_config(pools),
            },
        )
        return _members({"message": _v03_message(pools)}, {"configuration": configuration, **meta})
    if kind == "TaskQueryParams":
        return _members({"id": _ids(pools)}, {"historyLength": history, **meta})
    if kind in ("TaskIdParams", "ListTaskPushNotificationConfigParams"):
        return _members({"id": _ids(pools)}, meta)
    if kind == "TaskPushNotificationConfig":
        return _members({"taskId": _ids(pools), "pushNotificationConfig": _v03_push_config(pools)}, {})
    if kind == "GetTaskPushNotificationConfigParams":
        return _members({"id": _ids(pools)}, {"pushNotificationConfigId": config_id, **meta})
    if kind == "DeleteTaskPushNotificationConfigParams":
        return _members({"id": _ids(pools), "pushNotificationConfigId": config_id}, meta)
    return st.just({})


def v03_params(method: str, pools: Pools) -> st.SearchStrategy[dict]:
    """0.3 params of `method`, following 0.3's JSON schema: `kind` on messages and parts,
    nested file parts, 0.3's push config with its list of schemes."""
    kind = V03_METHODS[method]
    return pools.cached(("v03", kind), lambda: _build_v03(kind, pools))


# --- hostile values and where they go -----------------------------------------------------------


def nested(levels: int, kind: str = "array") -> Raw:
    if kind == "array":
        return Raw("[" * levels + "0" + "]" * levels)
    return Raw('{"a":' * levels + "0" + "}" * levels)


HOSTILE_VALUES = st.one_of(
    # wrong types
    st.sampled_from([[], {}, 0, -1, 1.5, True, False, None, "", "x", [1, "a"], {"a": 1}, [[[]]], [None]]),
    # oversize strings: past each column (200 ids, 300 names, 2048 URLs) and far past
    st.sampled_from([201, 301, 2049, 100_000]).map(lambda n: "x" * n),
    st.sampled_from(["é" * 60_000, "\U0001f600" * 30_000, "\u202e" * 5000]),
    # deep nesting: under, at and past the store's limit (64), and past any parser's own
    st.sampled_from([30, 62, 63, 64, 65, 70, 300, 1100, 5000]).map(nested),
    st.sampled_from([30, 64, 70, 300, 1100]).map(lambda n: nested(n, "object")),
    # odd strings: U+0000, control characters, lone surrogates, non-BMP, RTL, BOM, separators
    st.sampled_from(
        [
            "\x00",
            "a\x00b",
            "\x01\x1f\x7f",
            "\u202eevil\u202c",
            "\u200f",
            "\U0001f600",
            "\ud800",
            "x\udfff",
            "\udfff\ud800",
            "\ufeff",
            "\uffff",
            "\u2028\u2029",
            "\\",
            '"',
            "%00",
            "../../etc",
            "\t\r\n",
            " ",
            "null",
            "0",
            "-1",
            "1e400",
            "NaN",
            "ROLE_USER",
            "TASK_STATE_WORKING",
        ]
    ),
    st.text(min_size=1, max_size=50),
    # numbers out of range, written as JSON text
    st.sampled_from(
        [
            "1" + "0" * 30,
            "-1",
            "2147483648",
            "-2147483649",
            "9223372036854775808",
            "-9223372036854775809",
            "18446744073709551616",
            "1e400",
            "-1e400",
            "1e-400",
            "1.5",
            "-0.0",
            "-0",
            "1E2",
            "1" * 5000,
            "NaN",
            "Infinity",
            "-Infinity",
        ]
    ).map(Raw),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)


def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_paths(item, (*path, index)))
    return found


def _at(value: Any, path: tuple) -> Any:
    for key in path:
        value = value.members[key] if isinstance(value, Twice) else value[key]
    return value


def _replaced(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replaced(copy[head], rest, new)
    return copy


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()


@st.composite
def mutated(draw, params: Any) -> Any:
    """`params` with one hostile change at a random path."""
    paths = _paths(params)
    path = draw(st.sampled_from(paths))
    how = draw(st.sampled_from(["replace"] * 6 + ["drop", "add", "twice", "alias"]))
    objects = [p for p in paths if isinstance(_at(params, p), dict)]
    if how == "drop" and path:
        parent = _at(params, path[:-1])
        if isinstance(parent, dict):
            return _replaced(params, path[:-1], {k: v for k, v in parent.items() if k != path[-1]})
        return _replaced(params, path[:-1], [v for i, v in enumerate(parent) if i != path[-1]])
    if how == "add" and objects:
        target = draw(st.sampled_from(objects))
        key = draw(
            st.sampled_from(
                [
                    "extra",
                    "x-ext",
                    "message_id",
                    "history_length",
                    "\u0000",
                    "\ud800",
                    "",
                    "a" * 300,
                    "__proto__",
                    "@type",
                ]
            )
        )
        return _replaced(params, target, {**_at(params, target), key: draw(HOSTILE_VALUES)})
    filled = [p for p in objects if _at(params, p)]
    if how == "twice" and filled:  # a member given twice, at the text level
        target = draw(st.sampled_from(filled))
        obj = _at(params, target)
        key = draw(st.sampled_from(sorted(obj)))
        first = draw(HOSTILE_VALUES | st.just(obj[key]))
        return _replaced(params, target, Twice(obj, key, first))
    if how == "alias" and filled:  # ProtoJSON parsers take the proto name too: give both, or only it
        target = draw(st.sampled_from(filled))
        obj = _at(params, target)
        key = draw(st.sampled_from(sorted(obj)))
        if _snake(key) != key:
            both = draw(st.booleans())
            alias = {(_snake(key) if k == key else k): v for k, v in obj.items()}
            if both:
                alias = {**obj, _snake(key): draw(HOSTILE_VALUES | st.just(obj[key]))}
            return _replaced(params, target, alias)
    return _replaced(params, path, draw(HOSTILE_VALUES))


def _multipart(body: bytes, boundary: bytes) -> bytes:
    return (
        b"--" + boundary + b'\r\nContent-Disposition: form-data; name="request"\r\n'
        b"Content-Type: application/json\r\n\r\n" + body + b"\r\n--" + boundary + b"--\r\n"
    )


# Changes to the whole body, as bytes: what json.dumps would never write.
BODY_BREAKERS = st.sampled_from(
    [
        ("empty", lambda b: b""),
        ("whitespace", lambda b: b" \r\n\t "),
        ("truncated", lambda b: b[: len(b) // 2]),
        ("one byte short", lambda b: b[:-1]),
        ("trailing garbage", lambda b: b + b" trailing"),
        ("trailing object", lambda b: b + b"{}"),
        ("trailing newline", lambda b: b + b"\r\n"),
        ("trailing NUL", lambda b: b + b"\x00"),
        ("BOM", lambda b: b"\xef\xbb\xbf" + b),
        ("invalid UTF-8", lambda b: b.replace(b'"', b'"\xff', 1)),
        ("overlong UTF-8", lambda b: b.replace(b'"', b'"\xc0\xaf', 1)),
        ("encoded surrogate", lambda b: b.replace(b'"', b'"\xed\xa0\x80', 1)),
        ("invalid UTF-8 first", lambda b: b"\xc3\x28" + b),
        ("UTF-16", lambda b: b.decode("utf-8", "replace").encode("utf-16")),
        ("batch", lambda b: b"[" + b + b"]"),
        ("batch of two", lambda b: b"[" + b + b"," + b + b"]"),
        ("empty batch", lambda b: b"[]"),
        ("null", lambda b: b"null"),
        ("number", lambda b: b"42"),
        ("string", lambda b: b'"' + b.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'),
        ("empty object", lambda b: b"{}"),
        ("NaN member", lambda b: b.replace(b"{", b'{"n":NaN,', 1)),
        ("Infinity member", lambda b: b.replace(b"{", b'{"n":-Infinity,', 1)),
        ("single quotes", lambda b: b.replace(b'"', b"'")),
        ("comment", lambda b: b"/* c */" + b),
        ("unclosed", lambda b: b"{" * 100_000),
        ("deep body", lambda b: b"[" * 3000 + b + b"]" * 3000),
        ("raw control", lambda b: b.replace(b'":"', b'":"\x01', 1)),
        ("multipart", lambda b: _multipart(b, b"x")),
    ]
)


@st.composite
def envelope(draw, method: str, params: Any, *, broken: bool) -> Any:
    """The request object; when `broken`, often with one member broken."""
    request_id = draw(
        st.one_of(
            st.integers(-(2**53), 2**53),
            st.uuids().map(str),
            st.text(max_size=10),
            st.sampled_from([0, -1, 2**63 - 1, 2**64 - 1, -(2**63), 1.5, -0.0, 1e300, ""]),
        )
    )
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    if not broken:
        return obj
    change = draw(
        st.sampled_from(["none"] * 3 + ["jsonrpc", "id", "id", "method", "params", "drop", "twice", "extra", "order"])
    )
    if change == "jsonrpc":
        obj["jsonrpc"] = draw(st.sampled_from(["1.0", "2", "2.0 ", 2.0, 2, None, "", ["2.0"], {"v": "2.0"}]))
    elif change == "id":
        obj["id"] = draw(
            st.one_of(
                st.sampled_from(
                    [
                        {"a": 1},
                        {},
                        [1],
                        [],
                        True,
                        False,
                        None,
                        1.5,
                        -0.0,
                        "a\x00",
                        "\ud800",
                        "\x00",
                        "x" * 10_000,
                        2**64,
                        -(2**63) - 1,
                        10**30,
                    ]
                ),
                st.sampled_from(["1" + "0" * 25, "1e400", "-1e400", "1e-400", "9" * 5000, "NaN", "1E2", "-0"]).map(Raw),
            )
        )
    elif change == "method":
        obj["method"] = draw(
            st.sampled_from(
                [
                    "",
                    "sendMessage",
                    "message/send",
                    "tasks/get",
                    "SendMessage ",
                    " GetTask",
                    "GetTask\x00",
                    "\ud800",
                    7,
                    None,
                    True,
                    ["GetTask"],
                    {"name": "GetTask"},
                    "x" * 5000,
                    "rpc.discover",
                    "__init__",
                ]
                + ALL_METHODS
            )
        )
    elif change == "params":
        obj["params"] = draw(st.sampled_from([[], [params], "params", "", 0, 1.5, None, True, Raw("NaN")]))
    elif change == "drop":
        del obj[draw(st.sampled_from(["jsonrpc", "id", "method", "params"]))]
    elif change == "twice":
        key = draw(st.sampled_from(sorted(obj)))
        return Twice(obj, key, draw(st.sampled_from([1, "1", "2.0", "GetTask", "SendMessage", {}, None, []])))
    elif change == "extra":
        obj[draw(st.sampled_from(["extra", "result", "error", "", "\u0000", "ID", "Method"]))] = draw(HOSTILE_VALUES)
    elif change == "order":
        obj = dict(reversed(list(obj.items())))
    return obj


# --- headers -------------------------------------------------------------------------------------

# Header values an HTTP client can send: visible ASCII and bytes 0x80-0xff, with spaces and
# tabs only inside (h11 refuses CR, LF, NUL, other controls, and whitespace at either end).
_VISIBLE = [c for c in range(0x21, 0x100) if c != 0x7F]
HEADER_JUNK = st.lists(st.sampled_from(_VISIBLE + [0x20, 0x09]), max_size=40).map(lambda cs: bytes(cs).strip(b" \t"))
# Bytes RFC 9110 allows in a field value that daphne refuses with its own HTML 400 before any
# application sees the request (Python's str.splitlines breaks lines at them): the live runs
# leave them out, the in-process runs send them to the endpoint.
DAPHNE_REFUSES = frozenset(b"\x0b\x0c\x1c\x1d\x1e\x85")
# Twisted answers a request line and headers past this many bytes itself (400, and the
# connection closed) before daphne sees the request; httpx refuses URLs past 65,536 characters.
DAPHNE_MAX_HEAD = 16384
CONTENT_TYPES = st.one_of(
    st.sampled_from(
        [
            b"application/a2a+json",
            b"application/json; charset=utf-8",
            b"Application/JSON",
            b"application/json;",
            b"application/json; charset=latin-1",
            b"application/json ;charset=utf-8",
            None,
            b"",
            b"multipart/form-data",
            b"multipart/form-data; boundary=x",
            b"multipart/form-data; boundary=",
            b"application/x-www-form-urlencoded",
            b"text/plain",
            b"application/json-patch+json",
            b"*/*",
            b"application/jsonx",
            b"json",
        ]
    ),
    HEADER_JUNK,
)


@dataclass
class HostileRequest:
    agent: str  # "keyed" (needs X-API-Key) or "public"
    method: str  # the JSON-RPC method the params were built for
    path_query: str  # appended to the agent's path: "" or "?…"
    headers: dict[str, bytes]
    body: bytes
    expected_id: Any  # the id the answer must carry, None when the body has no usable id
    allowed_ids: tuple  # every id the answer may carry (expected_id alone, when it is usable)
    valid_key: bool  # X-API-Key holds the test's real key
    key_presented: bool  # X-API-Key is there and not empty
    streams: bool  # a streaming method: text/event-stream is a possible answer

    def describe(self) -> str:
        headers = {k: v[:80] for k, v in self.headers.items()}
        body = self.body if len(self.body) <= 600 else self.body[:300] + b"..." + self.body[-200:]
        return (
            f"{self.agent} agent, method {self.method}{self.path_query}, headers {headers}, "
            f"{len(self.body)} bytes: {body!r}"
        )


# --- the id an answer must carry ---------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_NAME = re.compile(_STRING)
_SCALAR = re.compile(_STRING + r"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")


class NotJson(ValueError):
    pass


def _member_name(text: str, i: int) -> tuple[int, str]:
    m = _NAME.match(text, i)
    if not m:
        raise NotJson(f"a member name expected at {i}")
    i = _WS.match(text, m.end()).end()
    if text[i : i + 1] != ":":
        raise NotJson(f"':' expected at {i}")
    return _WS.match(text, i + 1).end(), json.loads(m.group())


def top_level_members(text: str) -> list[tuple[str, str]] | None:
    """The members (name, the value's JSON text) of `text` if it is one JSON object per RFC
    8259; None if it is JSON but not an object; NotJson if it is not JSON. Iterative, so any
    depth is read; written apart from the server's parser, on purpose."""
    stack: list[str] = []  # the closer each open container waits for
    members: list[tuple[str, str]] = []
    top_is_object: bool | None = None
    name, start = "", 0
    i = _WS.match(text, 0).end()
    while True:
        if stack == ["}"]:
            start = i  # a top-level member's value starts here
        c = text[i : i + 1]
        if c in ("{", "[") and c:
            top_is_object = c == "{" if top_is_object is None else top_is_object
            stack.append("}" if c == "{" else "]")
            i = _WS.match(text, i + 1).end()
            if text[i : i + 1] == stack[-1]:
                stack.pop()
                i += 1
            else:
                if stack[-1] == "}":
                    i, key = _member_name(text, i)
                    if len(stack) == 1:
                        name = key
                continue
        else:
            m = _SCALAR.match(text, i)
            if not m:
                raise NotJson(f"a value expected at {i}")
            top_is_object = False if top_is_object is None else top_is_object
            i = m.end()
        while True:  # a value ended at i
            if stack == ["}"]:
                members.append((name, text[start:i]))
            i = _WS.match(text, i).end()
            if not stack:
                if i != len(text):
                    raise NotJson(f"trailing text at {i}")
                return members if top_is_object else None
            c = text[i : i + 1]
            if c == ",":
                i = _WS.match(text, i + 1).end()
                if stack[-1] == "}":
                    i, key = _member_name(text, i)
                    if len(stack) == 1:
                        name = key
                break
            if c == stack[-1]:
                stack.pop()
                i += 1
                continue
            raise NotJson(f"',' or {stack[-1]!r} expected at {i}")


class BigInt(str):
    """An integer past 64 bits, kept as its digits (Python refuses to convert very long ones)."""


def _number(text: str) -> Any:
    if re.fullmatch(r"-?[0-9]+", text):
        value = int(text) if len(text) <= 24 else None
        if value is not None and -(2**63) <= value <= 2**64 - 1:
            return value
        return BigInt(text)
    return float(text)


def id_rule(body: bytes) -> tuple[Any, tuple]:
    """(expected_id, allowed_ids) for an answer to `body`. An id is usable when the body is one
    JSON object (UTF-8, RFC 8259) naming `id` once, as a string or as a number that can be
    echoed (an integer within 64 bits, a finite float): then the answer must carry exactly it.
    Otherwise the answer's id must be null (JSON-RPC 2.0 §5), or, for what could be echoed
    but the server refuses to hold (U+0000 or a lone surrogate, an integer past 64 bits, an
    id given twice), that value. A body after a BOM may be read or refused (RFC 8259 §8.1)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, (None,)
    bom = text.startswith("\ufeff")
    try:
        members = top_level_members(text[1:] if bom else text)
    except NotJson:
        shallow = _read_to_the_depth_limit(text)
        # A server may stop reading where the body passes the depth limit (RFC 8259 §9), so
        # what lies deeper cannot make the body "not JSON" to it: the id above may be echoed.
        return None, (None,) if shallow == text else (None, *id_rule(shallow.encode("utf-8", "surrogatepass"))[1])
    ids = [value for key, value in (members or []) if key == "id"]
    values = []
    for raw in ids:
        if raw.startswith('"'):
            values.append(json.loads(raw))
        elif raw[:1] in "-0123456789":
            values.append(_number(raw))
    if len(ids) != 1 or len(values) != 1:
        return None, (None, *values)
    value = values[0]
    unusable = (isinstance(value, str) and re.search("[\x00\ud800-\udfff]", value)) or isinstance(value, BigInt)
    if isinstance(value, float) and not math.isfinite(value):
        return None, (None,)
    if unusable:
        return None, (None, value)
    return (None, (None, value)) if bom else (value, (value,))


STORE_DEPTH = 64  # the server's documented nesting limit (docs/bindings.md, accounts/storable.py)


def _read_to_the_depth_limit(text: str) -> str:
    """`text` with each array or object that opens a level past STORE_DEPTH read as `[]`."""
    out: list[str] = []
    depth, in_string, escaped, skip_to = 0, False, False, None
    for c in text:
        if skip_to is None:
            out.append(c)
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth == STORE_DEPTH + 1 and skip_to is None:
                out[-1] = "[]"
                skip_to = depth
        elif c in "]}":
            if depth == skip_to:
                skip_to = None
            depth -= 1
    return "".join(out)


def same_id(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, BigInt) or isinstance(b, BigInt):
        return isinstance(a, BigInt) and isinstance(b, BigInt) and str(a) == str(b)
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) != isinstance(b, str):
        return False
    return a == b


def _answer_json(data: bytes) -> Any:
    return json.loads(data, parse_int=lambda s: _number(s))


# --- network safety ----------------------------------------------------------------------------

# A host can be read from a string only after "//" (urllib's urlsplit, which the server uses,
# drops tabs and newlines first): in JSON text a slash is "/", "\/" or "\u002f", and a tab or
# newline between two of them "\t", "\n", "\r" or "\u0009", "\u000a", "\u000d".
_SLASH = r"(?:/|\\/|\\u002[fF])"
_DOUBLE_SLASH = re.compile(_SLASH + r"(?:\\[tnr]|\\u000[9aAdD])*" + _SLASH)


def foreign_url(body: bytes, allowed: tuple[str, ...]) -> bool:
    """Whether `body` might name, anywhere, a URL with a host outside `allowed` (whole JSON
    strings); conservative: any other double slash counts."""
    text = body.decode("latin-1")
    for url in allowed:
        text = text.replace(json.dumps(url), '""')
    return _DOUBLE_SLASH.search(text) is not None


# --- whole requests -------------------------------------------------------------------------------


@st.composite
def headers_for(draw, method: str, key: str, *, odd_content_types: bool = False) -> tuple[dict[str, bytes], str]:
    """The headers of a request for `method` (Content-Type, A2A-Version, X-API-Key, extensions,
    Last-Event-ID, Accept), mostly the ones that get it through, and how its key was presented."""
    headers: dict[str, bytes] = {}
    content_type = b"application/json"
    if draw(st.integers(0, 99)) < (25 if odd_content_types else 8):
        content_type = draw(CONTENT_TYPES)
    if content_type is not None:
        headers["Content-Type"] = content_type
    # The method's own version most of the time (1.0's header; none for 0.3 and 0.1, as their
    # clients send, or theirs): that is what gets a request through to its params.
    if method in V01_MEMBERS and method not in V03_METHODS and draw(st.integers(0, 99)) >= 8:
        version = draw(st.sampled_from([None, None, None, b"0.1", b"0.1.0"]))
    elif draw(st.integers(0, 99)) < 8:
        version = draw(st.sampled_from([None, b"0.3", b"1", b"1.0.0", b"", b"2.0", b"1.0, 0.3"]) | HEADER_JUNK)
    elif method in V03_METHODS:
        version = draw(st.sampled_from([None] * 6 + [b"0.3", b"0.3.0"]))
    else:
        version = b"1.0"
    if version is not None:
        headers["A2A-Version"] = version
    presented = draw(st.sampled_from(["valid"] * 17 + ["none", "empty", "junk", "shaped"]))
    if presented == "valid":
        headers["X-API-Key"] = key.encode()
    elif presented == "empty":
        headers["X-API-Key"] = b""
    elif presented == "junk":
        headers["X-API-Key"] = draw(HEADER_JUNK | st.just(key.encode() + b"x"))
    elif presented == "shaped":
        headers["X-API-Key"] = b"ask_" + draw(HEADER_JUNK) + b"_" + draw(HEADER_JUNK)
    if draw(st.integers(0, 3)) == 0:
        headers["A2A-Extensions"] = draw(
            HEADER_JUNK | st.sampled_from([b"urn:x:ext, ,,", b",", b"urn:a:b;q=1", b"\xff\xfe"])
        )
    if draw(st.integers(0, 3)) == 0 if method == "SubscribeToTask" else draw(st.integers(0, 49)) == 0:
        headers["Last-Event-ID"] = draw(
            st.sampled_from([b"0", b"1", b"2", b"-1", b"99999999999999999999999", b"1.5", b"+1", b"0x1", b""])
            | HEADER_JUNK
        )
    if draw(st.integers(0, 49)) == 0:
        accepts = [b"text/event-stream", b"application/json", b"application/a2a+json", b"*/*"]
        headers["Accept"] = draw(st.sampled_from(accepts) | HEADER_JUNK)
    return headers, presented


def requests(
    method: str | None, pools: Pools, *, key: str, agents: tuple[str, ...] = ("keyed", "public"), live: bool = False
) -> st.SearchStrategy[HostileRequest]:
    """Requests for `method`, or with None ("envelope") for any method with the envelope, the
    body or the headers broken more often; for the keyed agent or the public one. `live`:
    every body is checked to name no URL but `pools.urls` (the live server resolves them)."""

    @st.composite
    def build(draw) -> HostileRequest:
        name = method or draw(st.sampled_from(ALL_METHODS))
        params: Any = draw(params_for(name, pools))
        if draw(st.integers(0, 9)) < 7:  # 70 %: hostile params, one to three changes
            for _ in range(draw(st.integers(1, 3))):
                params = draw(mutated(params))
        broken_envelope = method is None or draw(st.integers(0, 9)) == 0
        ascii_only = draw(st.integers(0, 3)) > 0
        body = encode(draw(envelope(name, params, broken=broken_envelope)), ascii_only=ascii_only).encode(
            "utf-8", "surrogatepass"
        )
        if draw(st.integers(0, 99)) < (35 if method is None else 4):
            _, breaker = draw(BODY_BREAKERS)
            body = breaker(body)
        if live:
            assume(not foreign_url(body, pools.urls))

        headers, presented = draw(headers_for(name, key, odd_content_types=method is None))
        path_query = ""
        if draw(st.integers(0, 99)) < 3:
            path_query = draw(
                st.sampled_from(
                    [
                        "?A2A-Version=1.0",
                        "?A2A-Version=0.3",
                        "?A2A-Version=0.1",
                        "?A2A-Version=%00",
                        "?A2A-Version=%FF%FE",
                        "?x=1&x=2",
                        "?%",
                    ]
                )
            )
        agent = draw(st.sampled_from(agents))

        if live:
            assume(not any(set(value) & DAPHNE_REFUSES for value in headers.values()))

        expected, allowed = id_rule(body)
        return HostileRequest(
            agent=agent,
            method=name,
            path_query=path_query,
            headers=headers,
            body=body,
            expected_id=expected,
            allowed_ids=allowed,
            valid_key=presented == "valid",
            key_presented=bool(headers.get("X-API-Key")),
            streams=name in STREAMING or name in V01_STREAMING,
        )

    return build()


# --- what every answer must be --------------------------------------------------------------------


class Broken(AssertionError):
    """An answer that breaks an invariant. The subclasses are raised from lines of their own,
    so hypothesis reports each kind as a bug of its own."""


class ServerError(Broken):
    """HTTP 5xx."""


class InternalError(Broken):
    """JSON-RPC -32603 for the caller's input."""


class NotJsonRpc(Broken):
    """An answer that is not a JSON-RPC response."""


class WrongId(Broken):
    """An answer whose id is not the request's."""


class WrongAuth(Broken):
    """401 where the key was good, or no 401 where the keyed agent got no good key."""


class UnknownCode(Broken):
    """An error code that is neither JSON-RPC's nor A2A's."""


class BadStream(Broken):
    """A stream where none may be, or an event that is not a JSON-RPC response."""


# Answers given before the body is read (unknown agent, not POST, no good key, too large):
# the server does not parse what it will not serve, so their id is null.
UNREAD = {401, 404, 405, 413}


def _check_response(obj: Any, request: HostileRequest, where: str, *, unread: bool = False) -> str:
    if not isinstance(obj, dict) or obj.get("jsonrpc") != "2.0" or "id" not in obj:
        raise NotJsonRpc(f"{where}: not a JSON-RPC response: {obj!r:.300}")
    if ("result" in obj) == ("error" in obj):
        raise NotJsonRpc(f"{where}: a response has exactly one of result and error: {obj!r:.300}")
    error = obj.get("error")
    if error is not None:
        if (
            not isinstance(error, dict)
            or type(error.get("code")) is not int
            or not isinstance(error.get("message"), str)
        ):
            raise NotJsonRpc(f"{where}: a malformed error object: {error!r:.300}")
        if error["code"] == INTERNAL_ERROR:
            raise InternalError(f"{where}: -32603 for the caller's input: {error['message']!r:.300}")
    allowed_ids = (*request.allowed_ids, None) if unread else request.allowed_ids
    if not any(same_id(obj["id"], allowed) for allowed in allowed_ids):
        raise WrongId(
            f"{where}: id {obj['id']!r:.80} where the request's id is {request.expected_id!r:.80} "
            f"(allowed: {request.allowed_ids!r:.160}); answer {obj!r:.300}"
        )
    if error is not None and error["code"] not in ALLOWED_CODES:
        raise UnknownCode(f"{where}: error code {error['code']} is not one a caller's request may get: {error!r:.300}")
    return "result" if error is None else str(error["code"])


def _sse_data(body: bytes, *, complete: bool) -> list[bytes]:
    lines = body.split(b"\n")  # never splitlines: a data line may hold U+2028 or U+0085
    if not complete:
        lines = lines[:-1]  # cut off mid-line by the reader's deadline
    data = []
    for line in lines:
        line = line.removesuffix(b"\r")
        if line.startswith(b"data:"):
            data.append(line[5:].removeprefix(b" "))
    return data


def verdict(
    request: HostileRequest, status: int, content_type: str, body: bytes, *, complete: bool = True
) -> tuple[int, str]:
    """The answer's outcome, (HTTP status, "result", the JSON-RPC error code or "stream…");
    a Broken subclass when it breaks an invariant. `complete`: whether the whole body was read
    (a live stream may be cut off by the reader)."""
    if status >= 500:
        raise ServerError(f"HTTP {status} ({content_type}): {body[:300]!r}")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "text/event-stream":
        if status != 200 or not request.streams:
            raise BadStream(f"a stream answers {request.method}, with HTTP {status}")
        outcomes = []
        for index, data in enumerate(_sse_data(body, complete=complete)):
            try:
                event = _answer_json(data)
            except ValueError:
                raise BadStream(f"event {index} of the stream is not JSON: {data[:300]!r}") from None
            outcomes.append(_check_response(event, request, f"event {index} of the stream"))
        if not request.valid_key and request.agent == "keyed":
            raise WrongAuth("the keyed agent streamed to a caller without a good key")
        errors = sorted({o for o in outcomes if o != "result"})
        return status, "stream" + (":" + ",".join(errors) if errors else "")
    if media_type not in ("application/json", "application/a2a+json"):
        raise NotJsonRpc(f"HTTP {status} with Content-Type {content_type!r}: {body[:300]!r}")
    try:
        obj = _answer_json(body)
    except ValueError:
        raise NotJsonRpc(f"HTTP {status} with a body that is not JSON: {body[:300]!r}") from None
    outcome = _check_response(obj, request, f"HTTP {status}", unread=status in UNREAD)
    if status == 401 and (request.valid_key or not request.key_presented and request.agent == "public"):
        raise WrongAuth(f"401 for a request with the good key, or for the public agent without one: {obj!r:.300}")
    if status == 401 and "error" not in obj:
        raise WrongAuth(f"401 with a result: {obj!r:.300}")
    if status != 401 and request.agent == "keyed" and not request.valid_key:
        raise WrongAuth(f"HTTP {status}, not 401, for the keyed agent without a good key: {obj!r:.300}")
    return status, outcome


# --- HTTP+JSON -------------------------------------------------------------------------------------
#
# The same params, travelling as an HTTP+JSON route has them: path segments, a query of strings,
# or a body that is the params object itself. Then the route's own hostility: other HTTP
# methods, odd or encoded segments, paths of no route, the `/{tenant}/` variants, a broken query.


@dataclass(frozen=True)
class RestRoute:
    method: str  # the JSON-RPC method it calls
    http_method: str
    template: str  # below the agent's path; `{name}` is the param `name`
    body: bool  # the params travel in the body (else in the query)


REST_ROUTES = {
    f"{route.http_method} {route.template}": route
    for route in (
        RestRoute("SendMessage", "POST", "message:send", True),
        RestRoute("SendStreamingMessage", "POST", "message:stream", True),
        RestRoute("GetTask", "GET", "tasks/{id}", False),
        RestRoute("ListTasks", "GET", "tasks", False),
        RestRoute("CancelTask", "POST", "tasks/{id}:cancel", True),
        RestRoute("SubscribeToTask", "GET", "tasks/{id}:subscribe", False),
        RestRoute("SubscribeToTask", "POST", "tasks/{id}:subscribe", True),
        RestRoute("CreateTaskPushNotificationConfig", "POST", "tasks/{taskId}/pushNotificationConfigs", True),
        RestRoute("GetTaskPushNotificationConfig", "GET", "tasks/{taskId}/pushNotificationConfigs/{id}", False),
        RestRoute("ListTaskPushNotificationConfigs", "GET", "tasks/{taskId}/pushNotificationConfigs", False),
        RestRoute("DeleteTaskPushNotificationConfig", "DELETE", "tasks/{taskId}/pushNotificationConfigs/{id}", False),
        RestRoute("GetExtendedAgentCard", "GET", "extendedAgentCard", False),
    )
}
HTTP_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
# Path segments as they go on the wire (already percent-encoded where they need to be).
ODD_SEGMENTS = [
    "",
    "%00",
    "a%00b",
    "%2F",
    "%2e%2e",
    "..",
    ".",
    "%FF%FE",
    "%ED%A0%80",
    "%F0%9F%98%80",
    "%E2%80%AE",
    "x" * 300,
    "%",
    "%zz",
    "a:cancel",
    "tasks",
    "%20",
    "+",
    "%3F",
    "%23",
    "urn:uuid:x",
]
ODD_PATHS = [  # (the agent's path itself is JSON-RPC's)
    "/",
    "nothing",
    "tasks/",
    "tasks//x",
    "message:send/x",
    "v1/message:send",
    "message:SEND",
    "message%3Asend",
    "tasks/x/pushNotificationConfigs/y/z",
    ".well-known/agent.json",
    "a/b/c/d/e/f",
    "extendedAgentCard/x",
    "%00/tasks",
]
# Query text as it goes on the wire.
ODD_QUERIES = ["%", "%zz", "=", "&&", "a=1&a=2", "%00=%00", "x=%FF", "A2A-Version=0.3", "A2A-Version=1.0", "a" * 3000]


def _quoted(text: str) -> str:
    """Percent-encoded, a lone surrogate as the bytes of its UTF-8 form (not UTF-8 at all)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _segment(value: Any) -> str:
    return _quoted(value if isinstance(value, str) else encode(value))


def _query_value(value: Any, ascii_only: bool) -> str:
    """A params member as §11.5 writes it in a query: strings as they are, bools in lower case,
    numbers in decimal; anything else (which no query can hold) as its JSON text."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, int | float):
        text = json.dumps(value)
    else:
        text = encode(value, ascii_only=ascii_only)
    return _quoted(text)


@dataclass
class RestHostileRequest:
    agent: str  # "keyed" or "public"
    case: str  # the REST_ROUTES key it was built for, or "paths"
    http_method: str
    path: str  # below the agent's path, as sent (percent-encoded)
    query: str  # "" or "?…", as sent
    headers: dict[str, bytes]
    body: bytes
    valid_key: bool
    key_presented: bool
    streams: bool  # a streaming route with its own HTTP method: text/event-stream may answer

    def describe(self) -> str:
        headers = {k: v[:80] for k, v in self.headers.items()}
        body = self.body if len(self.body) <= 600 else self.body[:300] + b"..." + self.body[-200:]
        return (
            f"{self.agent} agent, {self.http_method} {self.path[:300]}{self.query[:300]} ({self.case}), "
            f"headers {headers}, {len(self.body)} bytes: {body!r}"
        )


def rest_requests(
    case: str, pools: Pools, *, key: str, agents: tuple[str, ...] = ("keyed", "public"), live: bool = False
) -> st.SearchStrategy[RestHostileRequest]:
    """HTTP+JSON requests for one route of REST_ROUTES, or ("paths") for any route with its
    HTTP method and path broken far more often."""

    @st.composite
    def build(draw) -> RestHostileRequest:
        route = REST_ROUTES[case] if case != "paths" else REST_ROUTES[draw(st.sampled_from(sorted(REST_ROUTES)))]
        params: Any = draw(params_for(route.method, pools))
        if draw(st.integers(0, 9)) < 6:
            for _ in range(draw(st.integers(1, 3))):
                params = draw(mutated(params))
        if not isinstance(params, dict):
            params = {"id": params}
        # The path's params, from the params drawn (or anything at all, now and then).
        segments = {}
        for name in re.findall(r"\{(\w+)\}", route.template):
            value = params.pop(name, None) if isinstance(params, dict) else None
            if value is None or draw(st.integers(0, 9)) == 0:
                segments[name] = draw(st.sampled_from(ODD_SEGMENTS) | st.sampled_from(pools.task_ids or ["x"]))
            else:
                segments[name] = _segment(value)
        path = re.sub(r"\{(\w+)\}", lambda m: segments[m.group(1)], route.template)
        odd = case == "paths"
        if draw(st.integers(0, 99)) < (40 if odd else 5):
            path = draw(st.sampled_from(["acme/", "other/", "%00/", "x" * 200 + "/", "/"])) + path
        if odd and draw(st.integers(0, 2)) == 0:
            path = draw(st.sampled_from(ODD_PATHS))
        http_method = route.http_method
        if draw(st.integers(0, 99)) < (50 if odd else 5):
            http_method = draw(st.sampled_from(HTTP_METHODS))

        ascii_only = draw(st.integers(0, 3)) > 0
        body, query = b"", ""
        if route.body:
            if draw(st.integers(0, 19)) > 0:
                body = encode(params, ascii_only=ascii_only).encode("utf-8", "surrogatepass")
            if draw(st.integers(0, 99)) < (30 if odd else 6):
                _, breaker = draw(BODY_BREAKERS)
                body = breaker(body)
        elif isinstance(params, dict):
            pairs = [f"{_quoted(str(name))}={_query_value(value, ascii_only)}" for name, value in params.items()]
            query = "&".join(pairs)
        if draw(st.integers(0, 99)) < (30 if odd else 8):
            query = "&".join(filter(None, [query, draw(st.sampled_from(ODD_QUERIES))]))
        if live:
            assume(not foreign_url(body, pools.urls))

        headers, presented = draw(headers_for(route.method, key, odd_content_types=odd))
        if not route.body and draw(st.integers(0, 1)) == 0:
            headers.pop("Content-Type", None)  # what a client sends with a GET
        if live:
            assume(not any(set(value) & DAPHNE_REFUSES for value in headers.values()))
            head = len(path) + len(query) + sum(len(name) + len(value) + 4 for name, value in headers.items())
            assume(head < DAPHNE_MAX_HEAD - 1000)  # room for the agent's path, Host, and the rest
        return RestHostileRequest(
            agent=draw(st.sampled_from(agents)),
            case=case,
            http_method=http_method,
            path=path,
            query=f"?{query}" if query else "",
            headers=headers,
            body=body,
            valid_key=presented == "valid",
            key_presented=bool(headers.get("X-API-Key")),
            streams=route.method in STREAMING and http_method in ("GET", "POST"),
        )

    return build()


class NotStatus(Broken):
    """An HTTP+JSON error that is not a google.rpc.Status with an ErrorInfo, or a success that
    is not a JSON object."""


# The ErrorInfo reasons an HTTP+JSON answer may carry: A2A's, those the a2a-sdk adds in A2A's
# domain, and the server's own (docs/bindings.md).
A2A_REASONS = frozenset(
    {
        "TASK_NOT_FOUND",
        "TASK_NOT_CANCELABLE",
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
        "UNSUPPORTED_OPERATION",
        "CONTENT_TYPE_NOT_SUPPORTED",
        "INVALID_AGENT_RESPONSE",
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        "EXTENSION_SUPPORT_REQUIRED",
        "VERSION_NOT_SUPPORTED",
        "INVALID_PARAMS",
        "INVALID_REQUEST",
        "METHOD_NOT_FOUND",
    }
)
SERVER_REASONS = frozenset(
    {
        "UNAUTHENTICATED",
        "PERMISSION_DENIED",
        "AGENT_NOT_FOUND",
        "REQUEST_TOO_LARGE",
        "RATE_LIMITED",
        "TOO_MANY_ACTIVE_TASKS",
        "STORAGE_QUOTA_EXCEEDED",
    }
)
STREAM_RESPONSES = frozenset({"task", "message", "statusUpdate", "artifactUpdate"})


def _status_reason(obj: Any, status: int, where: str) -> str:
    """The reason of a google.rpc.Status answer with HTTP `status`, checked for its form."""
    error = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(error, dict) or set(obj) != {"error"}:
        raise NotStatus(f"{where}: not a google.rpc.Status: {obj!r:.300}")
    if error.get("code") != status or not isinstance(error.get("status"), str):
        raise NotStatus(f"{where}: code {error.get('code')!r} / status {error.get('status')!r} for HTTP {status}")
    if not isinstance(error.get("message"), str) or "Traceback" in error["message"]:
        raise NotStatus(f"{where}: a bad message: {error!r:.300}")
    details = error.get("details")
    infos = [d for d in details or [] if isinstance(d, dict) and d.get("@type") == ERROR_INFO]
    if not isinstance(details, list) or len(infos) != 1:
        raise NotStatus(f"{where}: details need exactly one google.rpc.ErrorInfo: {error!r:.300}")
    reason, domain = infos[0].get("reason"), infos[0].get("domain")
    if reason == "INTERNAL_ERROR":
        raise InternalError(f"{where}: an internal error for the caller's input: {error['message']!r:.300}")
    if not (reason in A2A_REASONS and domain == "a2a-protocol.org") and not (
        reason in SERVER_REASONS and domain == "agentserver"
    ):
        raise UnknownCode(f"{where}: ErrorInfo {infos[0]!r:.200} is not one a caller's request may get")
    return reason


ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def rest_verdict(
    request: RestHostileRequest, status: int, content_type: str, body: bytes, *, complete: bool = True
) -> tuple[int, str]:
    """The answer's outcome, (HTTP status, "result", the ErrorInfo reason or "stream…"); a
    Broken subclass when it breaks an invariant."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if status >= 500 and not (status == 502 and b"INVALID_AGENT_RESPONSE" in body):
        raise ServerError(f"HTTP {status} ({content_type}): {body[:300]!r}")
    if media_type == "text/event-stream":
        if status != 200 or not request.streams:
            raise BadStream(f"a stream answers {request.http_method} {request.path[:100]}, with HTTP {status}")
        if not request.valid_key and request.agent == "keyed":
            raise WrongAuth("the keyed agent streamed to a caller without a good key")
        outcomes = set()
        lines = body.split(b"\n")
        if not complete:
            lines = lines[:-1]
        event = None
        for line in lines:
            line = line.removesuffix(b"\r")
            if line.startswith(b"event:"):
                event = line[6:].strip()
            elif line.startswith(b"data:"):
                try:
                    data = _answer_json(line[5:].strip())
                except ValueError:
                    raise BadStream(f"an event of the stream is not JSON: {line[:300]!r}") from None
                if event == b"error":
                    code = data.get("error", {}).get("code") if isinstance(data, dict) else None
                    outcomes.add(_status_reason(data, code if isinstance(code, int) else -1, "an error event"))
                elif not isinstance(data, dict) or len(data) != 1 or not set(data) <= STREAM_RESPONSES:
                    raise BadStream(f"an event is not a StreamResponse: {data!r:.300}")
                event = None
        return status, "stream" + (":" + ",".join(sorted(outcomes)) if outcomes else "")
    if media_type not in ("application/json", "application/a2a+json"):
        raise NotStatus(f"HTTP {status} with Content-Type {content_type!r}: {body[:300]!r}")
    try:
        obj = _answer_json(body)
    except ValueError:
        raise NotStatus(f"HTTP {status} with a body that is not JSON: {body[:300]!r}") from None
    if status < 400:
        if not isinstance(obj, dict) or "error" in obj or "jsonrpc" in obj:
            raise NotStatus(f"HTTP {status} with a body that is no result: {obj!r:.300}")
        outcome = "result"
    else:
        outcome = _status_reason(obj, status, f"HTTP {status}")
    if status == 401 and (request.valid_key or not request.key_presented and request.agent == "public"):
        raise WrongAuth(f"401 for a request with the good key, or for the public agent without one: {obj!r:.300}")
    # Only the route (no such path, another HTTP method) is answered before the caller is known;
    # and an agent's card, which is public (A2A: discovery needs no credentials).
    public_card = request.http_method in ("GET", "HEAD") and request.path.startswith(".well-known/") and status == 200
    before_auth = status in (404, 405) and outcome == "METHOD_NOT_FOUND" or public_card
    if status != 401 and request.agent == "keyed" and not request.valid_key and not before_auth:
        raise WrongAuth(f"HTTP {status}, not 401, for the keyed agent without a good key: {obj!r:.300}")
    return status, outcome


# --- what a tenant may write into an extended card (accounts.card_content) --------------------

# Card members that say where an agent answers, who provides it and how to call it (1.0 and 0.3).
CARD_SERVER_MEMBERS = [
    "url",
    "supportedInterfaces",
    "additionalInterfaces",
    "preferredTransport",
    "provider",
    "securitySchemes",
    "securityRequirements",
    "security",
    "signatures",
    "name",
    "capabilities",
]
CARD_ADDRESSES = [
    "https://attacker.invalid/a2a",
    "https://attacker.example/",
    "http://127.0.0.1:9/",
    "grpc.attacker.example:443",
]


def tenant_card_objects() -> st.SearchStrategy[dict]:
    """JSON objects a tenant might give as an extended card: the server's members (with
    addresses and interfaces of someone else's), the ones it may add, others, nested."""
    url = st.sampled_from(CARD_ADDRESSES)
    interface = st.fixed_dictionaries(
        {"url": url},
        optional={"protocolBinding": st.sampled_from(["JSONRPC", "GRPC"]), "transport": st.just("JSONRPC")},
    )
    leaf = st.one_of(url, st.lists(interface, max_size=2), json_values(max_leaves=4))
    member = st.sampled_from([*CARD_SERVER_MEMBERS, "skills", "description", "documentationUrl", "iconUrl", "x-other"])
    value = st.recursive(leaf, lambda inner: st.dictionaries(member, inner, max_size=3), max_leaves=6)
    return st.dictionaries(member, value, max_size=6)
