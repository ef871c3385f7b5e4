"""The hot path's statements (tasks_app/sql.py) leave exactly the rows their ORM twins leave:
the same exchange is run once through each path and every row of both tasks compared,
field by field, with only what must differ (keys, times, generated ids) set aside."""

from __future__ import annotations

import itertools
import json
import re
import uuid
from typing import Any

import pytest
from django.forms.models import model_to_dict

from accounts.selectors import Principal
from tasks_app import services, sql
from tasks_app.domain import NewArtifact, NewMessage
from tasks_app.models import Artifact, Message, StatusChange, Task, TaskEvent

pytestmark = pytest.mark.django_db
ALICE = Principal(name="alice", api_key_id=1)
# Differ between any two runs by nature: keys, times, and the agent messages' generated ids.
VARYING = {
    "id",
    "task",
    "created_at",
    "updated_at",
    "timestamp",
    "status_timestamp",
    "run_requested_at",
    "run_claimed_at",
    "run_token",
    "status_message",
    "message",
}
GENERATED = r"00000000-0000-0000-0000-[0-9a-f]{12}"


def _run_one_exchange(agent, monkeypatch, *, through_sql: bool, task_id: uuid.UUID) -> Task:
    monkeypatch.setattr(sql, "available", lambda: through_sql)
    counter = itertools.count()
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=next(counter)))  # the same generated ids on both paths
    message = NewMessage(
        message_id="m-1",
        role="user",
        context_id="ctx",
        parts=[{"type": "text", "text": "hi"}],
        metadata={"k": [1, "two"]},
        extensions=["urn:x"],
        reference_task_ids=["t-0"],
    )
    task, _ = services.message_receive(
        agent=agent,
        principal=ALICE,
        message=message,
        accepted_output_modes=["text/plain"],
        metadata={"m": 1},
        new_task_id=task_id,
    )
    token = Task.objects.get(pk=task_id).run_token
    assert services.run_start(task_id=task_id, run_token=token) is not None
    services.task_transition(
        task_id=task_id, state="working", parts=[{"type": "text", "text": "on it"}], run_token=token
    )
    artifact = services.artifact_append(
        task_id=task_id, parts=[{"type": "text", "text": "a"}], name="out", metadata={"n": 1}, run_token=token
    )
    services.artifact_append(
        task_id=task_id,
        parts=[{"type": "text", "text": "b"}],
        artifact_id=artifact,
        append=True,
        last_chunk=True,
        run_token=token,
    )
    services.task_transition(
        task_id=task_id,
        state="completed",
        run_token=token,
        artifact=NewArtifact(artifact_id="final-1", parts=[{"type": "data", "data": {"x": 1}}], name="final"),
    )
    return Task.objects.get(pk=task_id)


def _rows(task: Task) -> dict[str, Any]:
    """Every row of the task, with the ids the test's uuid4 made numbered by first appearance
    (the two paths may draw a different count of them: a difference of no row)."""

    def plain(instance) -> dict[str, Any]:
        return {k: v for k, v in model_to_dict(instance).items() if k not in VARYING}

    rows = {
        "task": plain(task),
        "messages": [plain(m) for m in Message.objects.filter(task=task).order_by("pk")],
        "status changes": [
            (plain(s), s.message_id is not None) for s in StatusChange.objects.filter(task=task).order_by("pk")
        ],
        "artifacts": [plain(a) for a in Artifact.objects.filter(task=task).order_by("pk")],
        "events": [_without_times(plain(e)) for e in TaskEvent.objects.filter(task=task).order_by("seq")],
    }
    seen: dict[str, str] = {}
    text = re.sub(GENERATED, lambda m: seen.setdefault(m[0], f"<id {len(seen)}>"), json.dumps(rows, default=str))
    return json.loads(text)


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in ("timestamp",)}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def test_a_whole_exchange_leaves_the_same_rows_through_the_statements_as_through_the_orm(echo_agent, monkeypatch):
    through_sql = _run_one_exchange(echo_agent, monkeypatch, through_sql=True, task_id=uuid.UUID(int=10**6))
    through_orm = _run_one_exchange(echo_agent, monkeypatch, through_sql=False, task_id=uuid.UUID(int=10**6 + 1))
    assert _rows(through_sql) == _rows(through_orm)
    assert _rows(through_sql)["task"]["client_task_id"] is None  # written, not left to a default


def test_every_field_of_every_row_a_new_task_makes_is_in_the_statement():
    for model in (Task, Message, StatusChange, TaskEvent):
        for field in model._meta.concrete_fields:
            if field.column != "id" or model is Task:
                assert f" {field.column}" in sql.NEW_TASK or f"({field.column}" in sql.NEW_TASK, (model, field.column)


def test_a_statement_that_does_not_name_every_column_of_its_model_stops_the_import():
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="reason"):
        sql._every_column(StatusChange, {"task_id": "id", "state": "state", "message_id": "NULL", "timestamp": "now()"})


def test_a_stream_reads_the_same_events_through_its_statement_as_through_the_orm(echo_agent, monkeypatch):
    from tasks_app import selectors

    task = _run_one_exchange(echo_agent, monkeypatch, through_sql=True, task_id=uuid.uuid4())
    read = {}
    for through_sql in (True, False):
        monkeypatch.setattr(sql, "available", lambda through_sql=through_sql: through_sql)
        read[through_sql] = [
            selectors.events_after(task.pk, seq, limit=limit) for seq, limit in [(0, 500), (1, 2), (task.last_seq, 5)]
        ]
    assert read[True] == read[False]
    assert [event.seq for event in read[True][0]] == list(range(1, task.last_seq + 1))
    assert [event.seq for event in read[True][1]] == [2, 3] and read[True][2] == []


def _hot_updates_of_tasks_in_this_transaction() -> tuple[int, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'tasks_app_task'")
        updates, hot = cursor.fetchone()
    return updates, hot


def test_the_claim_of_a_run_is_a_hot_update_that_writes_no_index_entry(echo_agent):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("Postgres's statistics")
    message = NewMessage(message_id="m-1", role="user", context_id="ctx", parts=[{"type": "text", "text": "hi"}])
    task, _ = services.message_receive(agent=echo_agent, principal=ALICE, message=message)
    updates, hot = _hot_updates_of_tasks_in_this_transaction()
    assert services.run_start(task_id=task.pk, run_token=Task.objects.get(pk=task.pk).run_token) is not None
    assert _hot_updates_of_tasks_in_this_transaction() == (updates + 1, hot + 1)
