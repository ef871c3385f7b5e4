"""The database itself refuses impossible states."""

import uuid

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from tasks_app.models import Artifact, Task, TaskEvent


@pytest.fixture
def task(echo_agent):
    return Task.objects.create(
        tenant=echo_agent.tenant,
        agent=echo_agent,
        owner="alice",
        context_id="c",
        dialect="a2a/1.0",
        status_timestamp=timezone.now(),
    )


def _refused(**changes):
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.filter(pk=changes.pop("pk")).update(**changes)


def test_an_unknown_state_is_refused(task):
    _refused(pk=task.pk, state="sleeping")


def test_an_unknown_dialect_is_refused(task):
    _refused(pk=task.pk, dialect="a2a/9.9")


def test_an_unknown_failure_reason_is_refused(task):
    _refused(pk=task.pk, failure="gremlins", state="failed")


def test_a_task_cannot_belong_to_another_tenant_than_its_agent(task):
    from accounts.models import Tenant

    other = Tenant.objects.create(slug="other", name="Other")
    _refused(pk=task.pk, tenant_id=other.pk)
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.create(
            tenant=other,
            agent=task.agent,
            owner="alice",
            context_id="c",
            dialect="a2a/1.0",
            status_timestamp=timezone.now(),
        )


def test_an_agent_moved_to_another_tenant_takes_its_tasks_along(task):
    from accounts.models import Agent, Tenant

    other = Tenant.objects.create(slug="other", name="Other")
    Agent.objects.filter(pk=task.agent_id).update(tenant=other)
    task.refresh_from_db()
    assert task.tenant_id == other.pk


def test_a_reply_only_exchange_must_be_completed(task):
    _refused(pk=task.pk, reply_only=True, state="working")


def test_a_server_failure_reason_needs_the_failed_state(task):
    _refused(pk=task.pk, failure="time-limit", state="completed")


def test_a_claim_needs_a_run(task):
    _refused(pk=task.pk, run_token=None, run_claimed_at=timezone.now())


def test_an_unknown_role_event_kind_or_status_change_state_is_refused(task):
    from tasks_app.models import Message, StatusChange

    now = timezone.now()
    for make in (
        lambda: Message.objects.create(task=task, message_id="m", context_id="c", role="system", parts=[]),
        lambda: TaskEvent.objects.create(task=task, seq=1, kind="gossip", payload={}),
        lambda: StatusChange.objects.create(task=task, state="sleeping", timestamp=now),
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            make()


def _choice_domain_fields():
    from django.apps import apps

    from accounts.domains import ChoiceDomainField

    return [
        (model, field)
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if isinstance(field, ChoiceDomainField)
    ]


def test_each_choice_column_s_domain_admits_exactly_the_field_s_choices(db):
    """A choice added in code must reach its domain by a migration (SetChoiceDomainWords), or
    the database would refuse it; one dropped would still be admitted."""
    import re

    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("reads Postgres's catalog")
    fields = _choice_domain_fields()
    assert {f.domain for _, f in fields} >= {"tasks_state", "tasks_dialect", "tasks_failure", "tasks_role"}
    with connection.cursor() as cursor:
        for model, field in fields:
            cursor.execute(
                """SELECT format_type(t.typbasetype, t.typtypmod), pg_get_constraintdef(c.oid)
                   FROM pg_type t JOIN pg_constraint c ON c.contypid = t.oid WHERE t.typname = %s""",
                [field.domain],
            )
            [(base, check)] = cursor.fetchall()
            words = re.fullmatch(r"CHECK \(\(\(VALUE\)::text = ANY \('\{(.*)\}'::text\[\]\)\)\)", check)[1]
            admitted = {w.strip('"') for w in words.split(",")}
            assert admitted == {value for value, _ in field.flatchoices}, f"{model.__name__}.{field.name}"
            assert base == f"character varying({field.max_length})", f"{model.__name__}.{field.name}"
            cursor.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                " WHERE attrelid = %s::regclass AND attname = %s",
                [model._meta.db_table, field.column],
            )
            assert cursor.fetchone() == (field.domain,), f"{model.__name__}.{field.name} is not of its domain"


def test_the_claim_of_a_run_checks_no_choice_column(task):
    """What the domains are for: a write that leaves the choice columns alone does not check them,
    so even a state the domain no longer admitted would not stop it (shown on a disabled word)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("Postgres domains")
    Task.objects.filter(pk=task.pk).update(run_token=uuid.uuid4())
    with connection.cursor() as cursor:
        cursor.execute("ALTER DOMAIN tasks_state DROP CONSTRAINT tasks_state_valid")
        cursor.execute(
            "ALTER DOMAIN tasks_state ADD CONSTRAINT tasks_state_valid CHECK (VALUE <> 'submitted') NOT VALID"
        )
    Task.objects.filter(pk=task.pk).update(run_claimed_at=timezone.now())  # not refused: state untouched
    _refused(pk=task.pk, state="submitted")


def test_deleting_a_task_through_the_orm_deletes_its_rows(task):
    from tasks_app.models import Message, StatusChange

    message = Message.objects.create(task=task, message_id="m", context_id="c", role="user", parts=[])
    StatusChange.objects.create(task=task, state="submitted", message=message, timestamp=timezone.now())
    TaskEvent.objects.create(task=task, seq=1, kind="status", payload={})
    Artifact.objects.create(task=task, artifact_id="a", parts=[])
    Task.objects.filter(pk=task.pk).update(status_message=message)
    Task.objects.filter(pk=task.pk).delete()
    for model in (Message, StatusChange, TaskEvent, Artifact):
        assert not model.objects.filter(task_id=task.pk).exists(), model.__name__


def test_event_seq_is_unique_per_task_and_positive(task):
    TaskEvent.objects.create(task=task, seq=1, kind="status", payload={})
    with pytest.raises(IntegrityError), transaction.atomic():
        TaskEvent.objects.create(task=task, seq=1, kind="status", payload={})
    with pytest.raises(IntegrityError), transaction.atomic():
        TaskEvent.objects.create(task=task, seq=0, kind="status", payload={})


def test_artifact_ids_are_unique_within_a_task(task):
    Artifact.objects.create(task=task, artifact_id="a", parts=[])
    with pytest.raises(IntegrityError), transaction.atomic():
        Artifact.objects.create(task=task, artifact_id="a", parts=[])


def test_client_chosen_task_ids_are_unique_per_agent_and_owner(task, echo_agent):
    Task.objects.filter(pk=task.pk).update(client_task_id="t-1")
    fields = dict(
        tenant=echo_agent.tenant,
        agent=echo_agent,
        context_id="c",
        dialect="a2a/0.1",
        status_timestamp=timezone.now(),
        client_task_id="t-1",
    )
    Task.objects.create(id=uuid.uuid4(), owner="bob", **fields)  # another owner may use the same id
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.create(id=uuid.uuid4(), owner="alice", **fields)


# Every row a send and a run write (the task, its messages, status changes, events and artifacts)
# pays for each index of its table; an index whose columns begin another's gives nothing the
# longer one does not.
_REDUNDANT_INDEXES = """
WITH ix AS (
    SELECT c.relname AS tbl, i.relname AS idx, x.indisunique AS uniq, x.indpred IS NOT NULL AS partial,
           x.indexprs IS NOT NULL AS expression, x.indnkeyatts AS n,
           x.indkey::int2[] AS cols, x.indclass::oid[] AS ops, am.amname AS method
    FROM pg_index x
    JOIN pg_class c ON c.oid = x.indrelid
    JOIN pg_class i ON i.oid = x.indexrelid
    JOIN pg_am am ON am.oid = i.relam
    WHERE c.relname = ANY(%s)
)
SELECT a.idx, b.idx FROM ix a JOIN ix b ON a.tbl = b.tbl AND a.idx <> b.idx
WHERE NOT a.uniq AND NOT a.partial AND NOT b.partial AND NOT a.expression AND NOT b.expression
  AND a.method = 'btree' AND b.method = 'btree' AND a.n <= b.n AND array_length(a.cols, 1) = a.n
  AND a.cols[0:a.n - 1] = b.cols[0:a.n - 1] AND a.ops[0:a.n - 1] = b.ops[0:a.n - 1]
"""


def test_no_index_of_the_task_tables_is_the_beginning_of_another(db):
    from django.db import connection

    from tasks_app.models import Message, StatusChange

    if connection.vendor != "postgresql":
        pytest.skip("reads Postgres's catalog")

    tables = [m._meta.db_table for m in (Task, Message, StatusChange, TaskEvent, Artifact)]
    with connection.cursor() as cursor:
        cursor.execute(_REDUNDANT_INDEXES, [tables])
        assert cursor.fetchall() == []


# The columns an index of the task table holds, in its keys, its included columns, its
# expressions or its condition (pg_get_indexdef writes them all).
_TASK_INDEXES = (
    "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s::regclass"
)


def test_no_index_of_the_task_table_holds_the_claim_s_column_so_a_claim_writes_no_index_entry(db):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("reads Postgres's catalog")
    with connection.cursor() as cursor:
        cursor.execute(_TASK_INDEXES, [Task._meta.db_table])
        definitions = dict(cursor.fetchall())
    assert "tasks_task_runs" in definitions
    assert [name for name, text in definitions.items() if "run_claimed_at" in text] == []
