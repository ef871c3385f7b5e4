"""The task list's bulk actions (tasks_app/admin_actions.py): cancel with a reason, re-dispatch
stuck runs, export as JSON. Each does for every selected task what the task page's button does,
through the same service, for the same people, with the same line in the admin log."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin import helpers
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.utils import timezone

from accounts.models import Role
from accounts.services import member_add, tenant_ensure
from tasks_app import admin_actions, services
from tasks_app.lifecycle import TaskState
from tasks_app.models import Task, TaskEvent
from tests import test_admin_detail
from tests.conftest import make_agent
from tests.test_admin_detail import browser_for, logged, page_url, receive, task_in

bag, runs = test_admin_detail.bag, test_admin_detail.runs  # the fixtures

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/tasks_app/task/"


def act(browser, action: str, tasks: list[Task], query: str = "", **fields: Any):
    """The list's action form, as the admin's page posts it."""
    data = {"action": action, "index": "0", helpers.ACTION_CHECKBOX_NAME: [str(t.pk) for t in tasks], **fields}
    return browser.post(LIST + query, data)


def said(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def state_of(task: Task) -> str:
    return Task.objects.values_list("state", flat=True).get(pk=task.pk)


@pytest.fixture(autouse=True)
def _runs_recorded(runs):
    """No agent runs: each test moves its tasks through the services itself."""
    return runs


@pytest.fixture
def operator(tenant):
    return browser_for("operator", tenant=tenant, role=Role.OPERATOR)


# --- who is offered them ----------------------------------------------------------------------


@pytest.mark.parametrize(("role", "offered"), [(Role.VIEWER, False), (Role.OPERATOR, True), (Role.OWNER, True)])
def test_the_list_offers_the_three_actions_to_operators_and_owners_and_none_to_viewers(role, offered, bag, tenant):
    task_in(TaskState.WORKING, bag)
    html = browser_for(role, tenant=tenant, role=role).get(LIST).content.decode()
    for action in ("cancel_selected", "redispatch_selected", "export_selected"):
        assert (f'<option value="{action}">' in html) == offered, action
    assert ('name="_selected_action"' in html) == offered
    assert "delete_selected" not in html  # the log is never deleted from the admin


def test_a_superuser_is_offered_them_too(bag):
    task_in(TaskState.WORKING, bag)
    html = browser_for("root", superuser=True).get(LIST).content.decode()
    assert '<option value="cancel_selected">' in html and '<option value="export_selected">' in html


def test_a_viewer_posting_an_action_changes_nothing(bag, tenant):
    task = task_in(TaskState.WORKING, bag)
    viewer = browser_for("viewer", tenant=tenant, role=Role.VIEWER)
    response = act(viewer, "cancel_selected", [task], confirm="yes")
    assert response.status_code in (200, 302) and state_of(task) == TaskState.WORKING


# --- cancel ------------------------------------------------------------------------------------


def test_a_bulk_cancel_asks_for_a_reason_then_cancels_each_task_through_the_cancel_service(
    bag, runs, operator, monkeypatch
):
    working = [task_in(TaskState.WORKING, bag) for _ in range(2)]
    done = task_in(TaskState.COMPLETED, bag)
    called: list[Any] = []
    real = services.task_cancel_as_operator
    monkeypatch.setattr(services, "task_cancel_as_operator", lambda **kw: (called.append(kw["task_id"]), real(**kw))[1])

    asked = act(operator, "cancel_selected", [*working, done])
    assert asked.status_code == 200 and called == []  # nothing yet: first the reason
    page = asked.content.decode()
    assert "Cancel 2 tasks?" in page and 'name="reason"' in page and "(finished: left as it is)" in page
    assert all(str(t.pk) in page for t in [*working, done])
    assert page.count(f'name="{helpers.ACTION_CHECKBOX_NAME}"') == 2  # the finished one is not sent again

    confirmed = act(operator, "cancel_selected", working, confirm="yes", reason="maintenance window")
    assert confirmed.status_code == 302 and confirmed["Location"] == LIST
    assert sorted(called) == sorted(t.pk for t in working)
    for task in working:
        assert state_of(task) == TaskState.CANCELED
        last = TaskEvent.objects.filter(task=task).order_by("-seq").first()
        assert last.payload["reason"] == "maintenance window"
        assert logged(task, "operator", "Canceled: maintenance window")
    assert said(confirmed) == ["Canceled 2 tasks; their agents, streams and push receivers are told."]
    assert state_of(done) == TaskState.COMPLETED and not logged(done, "operator", "Canceled")


def test_a_bulk_cancel_without_a_reason_tells_the_clients_an_operator_canceled(bag, runs, operator):
    task = task_in(TaskState.WORKING, bag)
    act(operator, "cancel_selected", [task], confirm="yes", reason="  ")
    last = TaskEvent.objects.filter(task=task).order_by("-seq").first()
    assert last.payload["reason"] == services.OPERATOR_CANCEL_REASON


def test_a_reason_the_store_cannot_hold_cancels_nothing_and_says_why(bag, runs, operator):
    task, reason = task_in(TaskState.WORKING, bag), "a\x00b"
    response = act(operator, "cancel_selected", [task], confirm="yes", reason=reason)
    assert response.status_code == 302 and state_of(task) == TaskState.WORKING
    assert said(response)[0].startswith("Nothing was canceled: the reason ")
    button = operator.post(page_url(task, "cancel/"), {"reason": reason})
    assert button.status_code == 302 and state_of(task) == TaskState.WORKING
    refused = "The task was not canceled: the reason contains U+0000, which this server does not accept."
    assert said(button)[-1] == refused


def test_a_member_acts_only_on_the_tasks_of_the_tenants_they_operate(bag, runs, tenant):
    globex = tenant_ensure(slug="globex", name="Globex")
    theirs = task_in(TaskState.WORKING, make_agent(globex, "globex-bag", "echo", input_modes=["*/*"]))
    mine = task_in(TaskState.WORKING, bag)
    member = browser_for("split", tenant=tenant, role=Role.OPERATOR)
    member_add(tenant=globex, user=get_user_model().objects.get(username="split"), role=Role.VIEWER)
    asked = act(member, "cancel_selected", [mine, theirs]).content.decode()
    assert "1 selected task will be left alone" in asked
    assert str(mine.pk) in asked and str(theirs.pk) not in asked
    # Even if the form is sent with the other tenant's task in it.
    response = act(member, "cancel_selected", [mine, theirs], confirm="yes", reason="mine only")
    assert state_of(mine) == TaskState.CANCELED and state_of(theirs) == TaskState.WORKING
    assert said(response)[0].endswith("1 task left alone: you are not an operator of their tenant.")


def test_all_of_a_filtered_list_is_selected_across_pages(bag, runs, operator):
    waiting = [task_in(TaskState.INPUT_REQUIRED, bag) for _ in range(3)]
    other = task_in(TaskState.WORKING, bag)
    response = act(
        operator, "cancel_selected", waiting[:1], query="?state__exact=input-required", select_across="1", confirm="yes"
    )
    assert response.status_code == 302
    assert {state_of(t) for t in waiting} == {TaskState.CANCELED} and state_of(other) == TaskState.WORKING


def test_a_selection_larger_than_the_limit_is_refused_whole(bag, runs, operator, monkeypatch):
    monkeypatch.setattr(admin_actions, "BULK_MAX", 2)
    tasks = [task_in(TaskState.WORKING, bag) for _ in range(3)]
    response = act(operator, "cancel_selected", tasks, confirm="yes")
    assert said(response) == ["Select at most 2 tasks for an action (narrow the list with its filters or search)."]
    assert {state_of(t) for t in tasks} == {TaskState.WORKING}


# --- re-dispatch ----------------------------------------------------------------------------------


def test_a_bulk_redispatch_sends_the_stuck_runs_again_and_says_which_were_not_stuck(bag, runs, operator, settings):
    settings.AGENT_TIME_LIMIT = 30
    lost = task_in(TaskState.WORKING, bag)
    Task.objects.filter(pk=lost.pk).update(run_claimed_at=timezone.now() - timedelta(seconds=31))
    unclaimed = receive(bag)
    done = task_in(TaskState.COMPLETED, bag)
    runs.clear()
    response = act(operator, "redispatch_selected", [lost, unclaimed, done])
    assert response.status_code == 302
    fresh = Task.objects.get(pk=lost.pk)
    assert sorted(r["task_id"] for r in runs) == sorted([lost.pk, unclaimed.pk])
    assert fresh.run_token != lost.run_token and fresh.run_retries == 1
    assert logged(lost, "operator", f"Re-dispatched (run {fresh.run_token})")
    assert logged(unclaimed, "operator", "Re-dispatched") and not logged(done, "operator", "Re-dispatched")
    (message,) = said(response)
    assert message.startswith("Sent the runs of 2 tasks to the workers again. 1 task not stuck, nothing sent (")
    assert str(done.pk)[:8] in message


# --- export ---------------------------------------------------------------------------------------


def test_a_bulk_export_downloads_one_document_holding_each_task_s_export(bag, runs, operator):
    tasks = [task_in(TaskState.COMPLETED, bag), task_in(TaskState.WORKING, bag)]
    response = act(operator, "export_selected", tasks)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Content-Disposition"].startswith('attachment; filename="tasks-2-')
    document = json.loads(response.content)
    assert document["count"] == 2 and {t["id"] for t in document["tasks"]} == {str(t.pk) for t in tasks}
    single = json.loads(operator.post(page_url(tasks[0], "export/")).content)
    exported = next(t for t in document["tasks"] if t["id"] == str(tasks[0].pk))
    assert {k: v for k, v in exported.items() if k not in ("id", "exported_at")} == {
        k: v for k, v in single.items() if k != "exported_at"
    }
    assert all(logged(t, "operator", "Exported as JSON") for t in tasks)


def test_a_bulk_export_of_nothing_one_may_act_on_says_so(bag, runs, tenant):
    task = task_in(TaskState.COMPLETED, bag)
    globex = tenant_ensure(slug="globex", name="Globex")
    member = browser_for("g-operator", tenant=globex, role=Role.OPERATOR)
    member_add(tenant=tenant, user=get_user_model().objects.get(username="g-operator"), role=Role.VIEWER)
    response = act(member, "export_selected", [task])
    assert response.status_code == 302 and said(response)[0].startswith("Nothing exported. 1 task left alone")


@pytest.mark.parametrize(
    "selected",
    [["not-a-uuid"], ["\x00"], [""], ["1" * 5000], ["00000000-0000-0000-0000-000000000000"]],
    ids=["word", "nul", "empty", "long", "nobody's"],
)
@pytest.mark.parametrize("action", ["cancel_selected", "redispatch_selected", "export_selected"])
def test_no_selection_a_form_can_carry_makes_an_action_answer_500(action, selected, bag, operator):
    task = task_in(TaskState.WORKING, bag)
    data = {"action": action, "index": "0", helpers.ACTION_CHECKBOX_NAME: selected, "confirm": "yes"}
    response = operator.post(LIST, data)
    assert response.status_code in (200, 302), response.status_code
    assert state_of(task) == TaskState.WORKING
