"""Whatever the store accepts, every reader gives back: GetTask, ListTasks, a SubscribeToTask
replay, A2A 0.3's tasks/get, push delivery and the admin, exactly as it was sent (accounts.storable decides what
is accepted; tests/test_hostile.py shows that what is refused is refused cleanly)."""

import uuid
from decimal import Decimal

import orjson
import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.storable import ID_LENGTH, MAX_DEPTH
from protocols.dialects.a2a_v03 import codec as codec_v03
from protocols.dialects.a2a_v1 import codec as codec_v1
from tasks_app.models import TaskEvent
from tests.conftest import drain_push_jobs

pytestmark = pytest.mark.django_db(transaction=True)
ECHO = "/agents/acme/echo/"
# A data part's value sits at level 5 of a SendMessage body (body, params, message, parts, part).
DATA_DEPTH = MAX_DEPTH - 5

# Any character the store holds: everything but U+0000 and lone surrogates.
characters = st.characters(codec="utf-8", exclude_characters="\x00")
text = st.text(characters, max_size=40)
ids = st.text(characters, min_size=1, max_size=ID_LENGTH)
numbers = st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | numbers | text


def nested(levels: int, leaf):
    for level in range(levels):
        leaf = [leaf] if level % 2 else {"k": leaf}
    return leaf


json_values = st.one_of(
    st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=12
    ),
    st.builds(nested, st.just(DATA_DEPTH - 1), scalars),  # as deep as a data part may go
)
parts = st.lists(
    st.one_of(
        st.builds(lambda t: {"text": t}, text),
        st.builds(lambda d: {"data": d}, json_values),
        st.builds(lambda url, name: {"url": url, "filename": name, "mediaType": "text/plain"}, ids, ids),
    ),
    min_size=1,
    max_size=3,
)
messages = st.fixed_dictionaries(
    {"messageId": ids, "role": st.just("ROLE_USER"), "parts": parts},
    optional={"metadata": st.dictionaries(text, json_values, max_size=3)},
)


@pytest.fixture
def operator(client):
    user = get_user_model().objects.create_superuser("op", "op@example.com", "pw-for-tests-only")
    client.force_login(user)
    return client


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(message=messages, context_id=ids)
def test_what_the_store_accepts_every_reader_gives_back_as_sent(
    rpc, operator, echo_agent, alice_key, receiver, push_jobs, message, context_id
):
    context_id = f"{uuid.uuid4()}-{context_id}"[:ID_LENGTH]  # each example's own, so ListTasks finds it alone
    sent = {**message, "contextId": context_id}
    push = {"taskPushNotificationConfig": {"url": receiver.url()}}
    task = rpc("/agents/acme/echo/", "SendMessage", {"message": sent, "configuration": push}, key=alice_key).result[
        "task"
    ]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    events = TaskEvent.objects.filter(task_id=task["id"]).count()

    got = rpc(ECHO, "GetTask", {"id": task["id"]}, key=alice_key).result
    [stored] = got["history"]
    assert stored["messageId"] == sent["messageId"] and stored["contextId"] == context_id
    assert as_json(stored["parts"]) == as_json(sent["parts"])
    assert as_json(stored.get("metadata", {})) == as_json(sent.get("metadata", {}))

    listed = rpc(ECHO, "ListTasks", {"contextId": context_id, "includeArtifacts": True}, key=alice_key).result
    assert listed["tasks"] == [got]

    # A2A 0.3 reads it too, and what it writes reads back as the very parts (nothing lost in 0.3's form).
    in_03 = rpc.client.post(
        ECHO,
        data=_body("tasks/get", {"id": task["id"]}),
        content_type="application/json",
        headers={"X-API-Key": alice_key},
    ).json()["result"]
    [stored_03] = in_03["history"]
    assert in_03["kind"] == "task" and stored_03["kind"] == "message"
    back = [codec_v1.encode_part(codec_v03.decode_part(p, "part")) for p in stored_03["parts"]]
    assert as_json(back) == as_json(stored["parts"])

    replay = rpc.client.post(
        ECHO,
        data=_body("SubscribeToTask", {"id": task["id"], "lastEventId": "0"}),
        content_type="application/json",
        headers={"A2A-Version": "1.0", "X-API-Key": alice_key},
    )
    lines = (
        async_to_sync(_collect)(replay.streaming_content).decode().split("\n")
    )  # (JSON may hold U+2028: not splitlines)
    assert [line for line in lines if line.startswith("id: ")] == [f"id: {seq}" for seq in range(1, events + 1)]
    assert all('"result"' in line for line in lines if line.startswith("data: "))

    assert set(drain_push_jobs(push_jobs)) <= {"idle", "delivered", "skipped"}
    assert len([r for r in receiver.requests if r.event_id.startswith(task["id"])]) == events

    page = operator.get(f"/admin/tasks_app/task/{task['id']}/change/")
    assert page.status_code == 200


def as_json(value):
    """`value` as JSON means it: a number is its decimal value, whether written 5e16 or
    50000000000000000 (Postgres keeps the decimal, and gives an integral one back as such)."""
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_json(item) for item in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    return value


async def _collect(chunks) -> bytes:
    return b"".join([chunk async for chunk in chunks])


def _body(method: str, params: dict) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
