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
