"""A tenant's count of active tasks (tasks_app.models.ActiveTaskCount), kept by a trigger in the
transaction of every write of a task: it always equals the tasks counted one by one."""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from accounts.services import ANONYMOUS_PRINCIPAL
from tasks_app.lifecycle import TaskState
from tasks_app.models import ACTIVE_STATES, ActiveTaskCount, Task
from tests.conftest import migrated_back

pytestmark = pytest.mark.django_db


def new_task(
    agent, *, state: str = TaskState.SUBMITTED, owner: str = "alice", task_id: uuid.UUID | None = None
) -> Task:
    return Task.objects.create(
        id=task_id or uuid.uuid4(),
        tenant_id=agent.tenant_id,
        agent=agent,
        owner=owner,
        context_id="ctx",
        dialect="a2a/1.0",
        state=state,
        status_timestamp=timezone.now(),
    )


def counted(tenant) -> tuple[int, int]:
    sums = ActiveTaskCount.objects.filter(tenant=tenant).aggregate(active=Sum("active"), anonymous=Sum("anonymous"))
    return sums["active"] or 0, sums["anonymous"] or 0


def recounted(tenant) -> tuple[int, int]:
    active = Task.objects.filter(tenant=tenant, state__in=ACTIVE_STATES)
    return active.count(), active.filter(owner=ANONYMOUS_PRINCIPAL).count()


def test_a_task_counts_while_its_state_is_active_and_in_no_other_state(tenant, echo_agent):
    # The trigger names the states as the migration wrote them; they must be ACTIVE_STATES.
    for state in TaskState.values:
        task = new_task(echo_agent, state=state)
        assert counted(tenant) == ((1, 0) if state in ACTIVE_STATES else (0, 0)), state
        task.delete()
        assert counted(tenant) == (0, 0)


def test_a_task_leaves_the_count_when_it_ends_and_comes_back_when_it_is_reopened(tenant, echo_agent):
    task = new_task(echo_agent, owner=ANONYMOUS_PRINCIPAL)
    assert counted(tenant) == (1, 1)
    Task.objects.filter(pk=task.pk).update(state=TaskState.WORKING)
    assert counted(tenant) == (1, 1)
    Task.objects.filter(pk=task.pk).update(state=TaskState.INPUT_REQUIRED)
    assert counted(tenant) == (0, 0)
    Task.objects.filter(pk=task.pk).update(state=TaskState.SUBMITTED)  # a follow-up
    assert counted(tenant) == (1, 1)
    Task.objects.filter(pk=task.pk).update(state=TaskState.COMPLETED)
    assert counted(tenant) == (0, 0)


def test_a_write_that_is_rolled_back_leaves_the_count_as_it_was(tenant, echo_agent):
    with pytest.raises(RuntimeError), transaction.atomic():
        new_task(echo_agent)
        assert counted(tenant) == (1, 0)
        raise RuntimeError("rolled back")
    assert counted(tenant) == (0, 0)


def test_a_tenant_s_tasks_spread_over_its_slots(tenant, echo_agent):
    for last_byte in range(40):
        new_task(echo_agent, task_id=uuid.UUID(int=last_byte))
    slots = dict(ActiveTaskCount.objects.filter(tenant=tenant).values_list("slot", "active"))
    assert set(slots) == set(range(ActiveTaskCount.SLOTS))
    assert sum(slots.values()) == 40 and max(slots.values()) == 3


STEPS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=5),  # which task
        st.sampled_from([*TaskState.values, "delete"]),
        st.booleans(),  # an anonymous caller's (when it is made)
    ),
    max_size=25,
)


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_the_count_equals_the_active_tasks_counted_one_by_one_after_any_writes(tenant, echo_agent, steps):
    tasks: dict[int, Task] = {}
    for which, state, anonymous in steps:
        task = tasks.get(which)
        if state == "delete":
            if task is not None:
                task.delete()
                del tasks[which]
        elif task is None:
            tasks[which] = new_task(echo_agent, state=state, owner=ANONYMOUS_PRINCIPAL if anonymous else "alice")
        else:
            Task.objects.filter(pk=task.pk).update(state=state)
        assert counted(tenant) == recounted(tenant)
    Task.objects.filter(tenant=tenant).delete()
    assert counted(tenant) == (0, 0)


BEFORE = [("tasks_app", "0014_task_active_anonymous")]
AFTER = [("tasks_app", "0015_active_task_count")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_counts_the_tasks_active_when_it_runs(tenant, echo_agent):
    with migrated_back(BEFORE) as executor:
        old = executor.loader.project_state(BEFORE).apps.get_model("tasks_app", "Task")
        for state, owner in [("submitted", "alice"), ("working", ANONYMOUS_PRINCIPAL), ("completed", "alice")]:
            old.objects.create(
                tenant_id=tenant.pk,
                agent_id=echo_agent.pk,
                owner=owner,
                context_id="c",
                dialect="a2a/1.0",
                state=state,
                status_timestamp=timezone.now(),
            )
    assert counted(tenant) == recounted(tenant) == (2, 1)
