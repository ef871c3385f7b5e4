"""The task store's hook: what it announces after commit, to whom, and what a failing
subscriber costs (nothing to the writer or the other subscribers)."""

import uuid

import pytest
from django.db import transaction

from accounts.selectors import Principal
from push import dispatch as push_dispatch
from tasks_app import hooks, services
from tasks_app.domain import NewMessage

ALICE = Principal(name="alice", api_key_id=1)

pytestmark = pytest.mark.usefixtures("store_path")


@pytest.fixture
def heard(monkeypatch):
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    changes: list[hooks.TaskChanged] = []
    monkeypatch.setattr(hooks, "_subscribers", [*hooks._subscribers, changes.append])
    return changes


def receive(agent):
    message = NewMessage(message_id=str(uuid.uuid4()), role="user", parts=[{"type": "text", "text": "hi"}])
    return services.message_receive(agent=agent, principal=ALICE, message=message)[0]


def test_push_subscribes_to_the_store_s_changes_from_its_app_config():
    assert push_dispatch.on_task_changed in hooks._subscribers


@pytest.mark.django_db(transaction=True)
def test_a_committed_change_is_announced_with_its_state_and_push_flag(echo_agent, heard):
    task = receive(echo_agent)
    services.task_transition(task_id=task.pk, state="working")
    assert [(c.task_id, c.state, c.has_push_configs) for c in heard] == [
        (str(task.pk), "submitted", False),
        (str(task.pk), "working", False),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_change_rolled_back_is_never_announced(echo_agent, heard):
    task = receive(echo_agent)
    heard.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        services.task_transition(task_id=task.pk, state="working")
        raise RuntimeError("the caller's transaction fails after the write")
    assert heard == []


@pytest.mark.django_db(transaction=True)
def test_a_failing_subscriber_costs_neither_the_writer_nor_the_others(echo_agent, heard, monkeypatch, caplog):
    def broken(change):
        raise ValueError("a bug in a subscriber")

    monkeypatch.setattr(hooks, "_subscribers", [broken, *hooks._subscribers])
    task = receive(echo_agent)
    assert task.state == "submitted" and [c.state for c in heard] == ["submitted"]
    assert "a subscriber to task changes failed" in caplog.text
