"""The admin's task page, its actions (cancel, re-dispatch, export; their bulk forms on the list:
tests/test_admin_actions.py) and the overview (tasks_app.admin_detail): what each shows, what it
costs in queries, who may act, and that a cancel from the admin reaches the running agent and its
stream subscribers."""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Role
from accounts.selectors import Principal
from accounts.services import member_add, tenant_ensure
from protocols import contract
from push.models import ConfigStatus, DeliveryState, PushAttempt, PushConfig, PushDelivery
from tasks_app import hints, parts, services
from tasks_app.admin import TaskAdmin
from tasks_app.domain import NewMessage
from tasks_app.lifecycle import Dialect, Failure, TaskState
from tasks_app.models import Task, TaskEvent
from tests.conftest import make_agent, user_message

pytestmark = pytest.mark.django_db(transaction=True)

ALICE = Principal(name="alice", api_key_id=1)
PASSWORD = "pw-for-tests-only"
TEXT = "line one\nline <b>two</b> & <script>alert(1)</script>"
FILE_BYTES = b"hello, stored bytes\x00\x01"


@pytest.fixture
def runs(monkeypatch) -> list[dict[str, Any]]:
    """Runs are recorded, not run: each test moves its tasks through the services itself."""
    from tasks_app import dispatch

    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: sent.append(kw))
    return sent


@pytest.fixture
def bag(tenant):
    """An agent that takes every kind of part."""
    return make_agent(tenant, "bag", "echo", input_modes=["*/*"], output_modes=["*/*"])


def every_part() -> list[dict[str, Any]]:
    return [
        parts.text(TEXT),
        parts.data({"answer": 42, "nested": {"list": [1, 2, "<i>x</i>"]}}),
        parts.file_bytes(FILE_BYTES, media_type="text/plain", name="hello.txt"),
        parts.file_uri("https://files.example.com/report.pdf", media_type="application/pdf", name="report.pdf"),
        parts.file_uri("javascript:alert(1)", name="not-a-link"),
    ]


def receive(agent, message_parts=None, *, task_id=None, references=()) -> Task:
    message = NewMessage(
        message_id=str(uuid.uuid4()),
        role="user",
        parts=message_parts or [parts.text("hi")],
        reference_task_ids=list(references),
        task_id=str(task_id) if task_id else None,
    )
    return services.message_receive(
        agent=agent, principal=ALICE, message=message, follow_up=contract.follow_up(Dialect.A2A_1_0)
    )[0]


def task_in(state: str, agent, *, references=()) -> Task:
    """A task of `agent` in `state`, with every kind of part in its message, a status message
    and an artifact."""
    task = receive(agent, every_part(), references=references)
    if state == TaskState.SUBMITTED:
        return Task.objects.get(pk=task.pk)
    if state == TaskState.REJECTED:
        services.task_transition(task_id=task.pk, state=state, parts=[parts.text("no, thanks")])
        return Task.objects.get(pk=task.pk)
    services.task_transition(task_id=task.pk, state=TaskState.WORKING, parts=[parts.text("working on it")])
    services.artifact_append(task_id=task.pk, parts=every_part(), name="result-artifact")
    if state == TaskState.FAILED:
        services.run_fail(task_id=task.pk, reason="the agent broke <badly>", failure=Failure.AGENT_ERROR)
    elif state == TaskState.CANCELED:
        services.task_cancel_as_operator(task_id=task.pk, reason="test cancel")
    elif state != TaskState.WORKING:
        services.task_transition(task_id=task.pk, state=state, parts=[parts.text(f"now {state}")])
    return Task.objects.get(pk=task.pk)


def browser_for(username: str, *, superuser: bool = False, tenant=None, role: str | None = None) -> Client:
    users = get_user_model().objects
    if superuser:
        user = users.create_superuser(username, f"{username}@example.com", PASSWORD)
    else:
        user = users.create_user(username, password=PASSWORD, is_staff=True)
        if tenant is not None and role is not None:
            member_add(tenant=tenant, user=user, role=role)
    browser = Client()
    browser.force_login(user)
    return browser


def page_url(task: Task, suffix: str = "change/") -> str:
    return f"/admin/tasks_app/task/{task.pk}/{suffix}"


def logged(task: Task, username: str, text: str) -> bool:
    entries = LogEntry.objects.filter(object_id=str(task.pk), action_flag=CHANGE, user__username=username)
    return any(text in entry.get_change_message() for entry in entries)


# --- the pages render ---------------------------------------------------------------------


def test_every_page_renders_for_a_superuser_with_tasks_in_every_state_and_every_part_kind(bag, runs):
    root = browser_for("root", superuser=True)
    tasks = {state: task_in(state, bag) for state in TaskState.values}
    for state, task in tasks.items():
        response = root.get(page_url(task))
        assert response.status_code == 200, state
        html = response.content.decode()
        assert str(task.pk) in html and f"status <strong>{state}</strong>" in html
        # Text: escaped, with its line breaks.
        assert "line one<br>line &lt;b&gt;two&lt;/b&gt; &amp; &lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "<script>alert(1)" not in html and "<b>two</b>" not in html
        # Data: pretty JSON, escaped.
        assert "&quot;answer&quot;: 42" in html and "&lt;i&gt;x&lt;/i&gt;" in html
        # Files: name, media type, size and a download of the stored bytes; web URLs as links.
        assert "hello.txt" in html and f"{len(FILE_BYTES)} bytes" in html
        assert f"{page_url(task, 'file/message/')}" in html
        assert 'href="https://files.example.com/report.pdf" rel="noopener noreferrer"' in html
        assert 'href="javascript:' not in html and "javascript:alert(1)" in html
        # Timestamps to the millisecond with the timezone, and the events' seq.
        assert timezone.localtime(task.created_at).isoformat(timespec="milliseconds") in html
        # The task as its dialect returns it (A2A 1.0: its state on the wire).
        assert f"TASK_STATE_{state.upper().replace('-', '_')}" in html or state == TaskState.AWAITING_COMPLETION
    failed = root.get(page_url(tasks[TaskState.FAILED])).content.decode()
    assert "Failed: the agent broke &lt;badly&gt;" in failed
    assert "artifact <strong>result-artifact</strong>" in failed
    overview = root.get("/admin/tasks_app/task/overview/")
    assert overview.status_code == 200
    assert "/admin/tasks_app/task/overview/" in root.get("/admin/tasks_app/task/").content.decode()
    export = root.post(page_url(tasks[TaskState.COMPLETED], "export/"))
    assert export.status_code == 200


def test_the_stored_bytes_download_as_an_attachment_of_their_type(bag, runs):
    task = task_in(TaskState.COMPLETED, bag)
    root = browser_for("root", superuser=True)
    message_pk = task.messages.order_by("id").values_list("pk", flat=True).first()
    response = root.get(page_url(task, f"file/message/{message_pk}/2/"))
    assert response.status_code == 200 and response.content == FILE_BYTES
    assert response["Content-Type"] == "text/plain"
    assert response["Content-Disposition"] == 'attachment; filename="hello.txt"'
    artifact_seq = TaskEvent.objects.get(task=task, kind="artifact").seq
    assert root.get(page_url(task, f"file/event/{artifact_seq}/2/")).content == FILE_BYTES
    # Not a file with bytes, or no such part: 404.
    assert root.get(page_url(task, f"file/message/{message_pk}/0/")).status_code == 404
    assert root.get(page_url(task, f"file/message/{message_pk}/3/")).status_code == 404
    assert root.get(page_url(task, f"file/message/{message_pk}/9/")).status_code == 404
    assert root.get(page_url(task, "file/event/999/0/")).status_code == 404


def test_the_context_and_the_referenced_tasks_are_links_to_what_the_member_may_see(bag, runs, tenant):
    first = receive(bag)
    services.task_transition(task_id=first.pk, state=TaskState.COMPLETED)
    globex = tenant_ensure(slug="globex", name="Globex")
    foreign = receive(make_agent(globex, "globex-bag", "echo"))
    referring = task_in(TaskState.COMPLETED, bag, references=[str(first.pk), str(foreign.pk), "not-a-uuid"])
    sibling = receive(bag, task_id=None)
    Task.objects.filter(pk=sibling.pk).update(context_id=referring.context_id)
    viewer = browser_for("viewer", tenant=tenant, role=Role.VIEWER)
    html = viewer.get(page_url(referring)).content.decode()
    assert f'href="/admin/tasks_app/task/{first.pk}/change/"' in html
    assert f'href="/admin/tasks_app/task/{sibling.pk}/change/"' in html
    assert f'href="/admin/tasks_app/task/{foreign.pk}/change/"' not in html
    root_html = browser_for("root", superuser=True).get(page_url(referring)).content.decode()
    assert f'href="/admin/tasks_app/task/{foreign.pk}/change/"' in root_html


def test_the_task_page_shows_what_its_executor_keeps_between_runs_escaped(bag, runs, tenant):
    task = task_in(TaskState.INPUT_REQUIRED, bag)
    Task.objects.filter(pk=task.pk).update(executor_state={"upstreamTaskId": "<up-1>"})
    html = browser_for("viewer", tenant=tenant, role=Role.VIEWER).get(page_url(task)).content.decode()
    assert "executor state" in html and "&quot;upstreamTaskId&quot;: &quot;&lt;up-1&gt;&quot;" in html


def test_the_task_page_shows_push_configs_deliveries_and_attempts_but_no_secrets(bag, runs):
    task = task_in(TaskState.COMPLETED, bag)
    config = PushConfig.objects.create(
        task=task,
        config_id="hook-1",
        url="https://hooks.example.com/in",
        auth_scheme="Bearer",
        credentials_sealed="SEALED-CREDENTIALS",
        token_sealed="SEALED-TOKEN",
        status=ConfigStatus.DEAD,
    )
    event = TaskEvent.objects.filter(task=task).order_by("seq").first()
    delivery = PushDelivery.objects.create(
        config=config, event=event, seq=event.seq, state=DeliveryState.DEAD, attempts=4, last_status_code=503
    )
    PushAttempt.objects.create(delivery=delivery, started_at=timezone.now(), status_code=503, latency_ms=1234)
    html = browser_for("root", superuser=True).get(page_url(task)).content.decode()
    assert "hook-1" in html and "https://hooks.example.com/in" in html and "1234 ms" in html and "503" in html
    assert "SEALED" not in html
    assert f"/admin/push/pushdelivery/?q={task.pk}&amp;state__exact=dead" in html


# --- cost -------------------------------------------------------------------------------


def _big_task(agent, rounds: int) -> Task:
    """A task with `rounds` user messages, status changes, artifacts, push deliveries and attempts."""
    task = receive(agent, [parts.text("round 0")])
    config = PushConfig.objects.create(task=task, config_id="hook", url="https://hooks.example.com/in")
    for n in range(rounds):
        if n:
            receive(agent, [parts.text(f"round {n}")], task_id=task.pk)
        services.task_transition(task_id=task.pk, state=TaskState.WORKING, parts=[parts.text(f"working {n}")])
        services.artifact_append(task_id=task.pk, parts=every_part(), name=f"artifact-{n}")
        services.task_transition(task_id=task.pk, state=TaskState.INPUT_REQUIRED, parts=[parts.text("more?")])
    for event in TaskEvent.objects.filter(task=task):
        delivery = PushDelivery.objects.create(
            config=config, event=event, seq=event.seq, state=DeliveryState.DELIVERED, attempts=1
        )
        PushAttempt.objects.create(delivery=delivery, started_at=timezone.now(), status_code=200, latency_ms=5)
    return Task.objects.get(pk=task.pk)


def _queries(browser: Client, url: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        response = browser.get(url)
    assert response.status_code == 200
    return len(queries), response.content.decode()


# The detail page of a task with push configs, for a member: the session, the user, the
# member's roles, the task, its agent (with its tenant), the timeline's events, its user
# messages, the messages' references, the related tasks, the task as its dialect encodes it
# (one statement), the push configs, their deliveries and attempts, and the two reads of the
# user's Django permissions the admin's templates make.
DETAIL_QUERIES = 15


def test_the_task_page_costs_the_same_queries_for_1_and_50_rounds(bag, runs, tenant):
    small, big = _big_task(bag, 1), _big_task(bag, 50)
    assert big.last_seq == 1 + 50 * 3 + 49  # the first submitted, three per round, each follow-up's submitted
    browser = browser_for("operator", tenant=tenant, role=Role.OPERATOR)
    small_count, small_html = _queries(browser, page_url(small))
    big_count, big_html = _queries(browser, page_url(big))
    assert small_count == big_count == DETAIL_QUERIES
    assert "artifact-49" in big_html and "round 49" in big_html


def test_a_large_timeline_is_paged_by_seq_with_its_messages(bag, runs, tenant, monkeypatch):
    monkeypatch.setattr(TaskAdmin, "timeline_page_size", 10)
    task = _big_task(bag, 8)  # 32 events: pages of 10, 10, 10, 2
    browser = browser_for("viewer", tenant=tenant, role=Role.VIEWER)
    first = browser.get(page_url(task)).content.decode()
    shown = '<div class="part-text">round {}</div>'.format
    assert "page 1 of 4" in first and shown(0) in first and shown(3) not in first
    second = browser.get(page_url(task) + "?timeline_page=2").content.decode()
    assert "page 2 of 4" in second and shown(0) not in second and shown(3) in second
    assert (
        '<td class="seq">11</td>' in second
        and '<td class="seq">20</td>' in second
        and '<td class="seq">21</td>' not in second
    )
    assert "is not read whole here; export the task" in first  # nor its raw JSON: four pages of it
    last = browser.get(page_url(task) + "?timeline_page=99").content.decode()
    assert "page 4 of 4" in last and '<td class="seq">32</td>' in last
    assert browser.get(page_url(task) + "?timeline_page=x").status_code == 200


# --- actions ---------------------------------------------------------------------------


def test_cancel_from_the_admin_tells_the_agent_the_streams_and_push(bag, runs, tenant, push_jobs, monkeypatch):
    task = task_in(TaskState.WORKING, bag)
    config = PushConfig.objects.create(task=task, config_id="hook", url="https://hooks.example.com/in")
    services.task_push_configs_mark(task=task, present=True)
    push_jobs.clear()
    published: list[tuple[str, str]] = []
    real_publish = hints.publish
    monkeypatch.setattr(
        hints,
        "publish",
        lambda task_id, state="", **kw: (published.append((task_id, state)), real_publish(task_id, state, **kw)),
    )
    operator = browser_for("operator", tenant=tenant, role=Role.OPERATOR)
    assert "Cancel the task" in operator.get(page_url(task)).content.decode()
    response = operator.post(page_url(task, "cancel/"), {"reason": "stop it"}, follow=True)
    assert response.status_code == 200 and "Task canceled" in response.content.decode()
    task.refresh_from_db()
    assert task.state == TaskState.CANCELED
    last = TaskEvent.objects.filter(task=task).order_by("-seq").first()
    assert last.payload["state"] == TaskState.CANCELED and last.payload["reason"] == "stop it"
    assert (str(task.pk), TaskState.CANCELED) in published  # stream subscribers are woken
    assert [pk for pk, _ in push_jobs] == [config.pk]  # push receivers are told
    assert logged(task, "operator", "Canceled: stop it")
    # The agent's next write is refused: it is no longer its task to write.
    with pytest.raises(services.TaskClosed):
        services.artifact_append(task_id=task.pk, parts=[parts.text("late")], run_token=task.run_token)
    # Cancelling again changes nothing and says why.
    again = operator.post(page_url(task, "cancel/"), follow=True).content.decode()
    assert "already canceled" in again
    assert TaskEvent.objects.filter(task=task).count() == task.last_seq


def test_a_cancel_without_a_reason_tells_the_client_an_operator_canceled_and_the_log_who(bag, runs, tenant):
    task = task_in(TaskState.WORKING, bag)
    operator = browser_for("zq-alice", tenant=tenant, role=Role.OPERATOR)
    operator.post(page_url(task, "cancel/"), {"reason": ""})
    last = TaskEvent.objects.filter(task=task).order_by("-seq").first()
    assert last.payload["state"] == TaskState.CANCELED
    # The client (AIP shows a change's reason) learns no operator's username; the log does.
    assert last.payload["reason"] == services.OPERATOR_CANCEL_REASON
    assert "zq-alice" not in json.dumps(last.payload)
    assert logged(task, "zq-alice", f"Canceled: {services.OPERATOR_CANCEL_REASON}")


def test_redispatch_gives_a_lost_run_a_fresh_token_and_sends_an_unclaimed_one_again(bag, runs, tenant, settings):
    settings.AGENT_TIME_LIMIT = 30
    operator = browser_for("operator", tenant=tenant, role=Role.OPERATOR)
    lost = task_in(TaskState.WORKING, bag)
    Task.objects.filter(pk=lost.pk).update(run_claimed_at=timezone.now() - timedelta(seconds=31))
    assert "Re-dispatch" in operator.get(page_url(lost)).content.decode()
    runs.clear()
    operator.post(page_url(lost, "redispatch/"))
    fresh = Task.objects.get(pk=lost.pk)
    assert fresh.run_token != lost.run_token and fresh.run_claimed_at is None and fresh.run_retries == 1
    assert runs == [{"task_id": lost.pk, "run_token": fresh.run_token}]
    assert logged(lost, "operator", f"Re-dispatched (run {fresh.run_token})")

    unclaimed = receive(bag)
    runs.clear()
    operator.post(page_url(unclaimed, "redispatch/"))
    assert runs == [{"task_id": unclaimed.pk, "run_token": unclaimed.run_token}]

    # A run within its time, or a finished task: nothing is sent.
    running = task_in(TaskState.WORKING, bag)
    Task.objects.filter(pk=running.pk).update(run_claimed_at=timezone.now())
    done = task_in(TaskState.COMPLETED, bag)
    runs.clear()
    for task in (running, done):
        assert "Re-dispatch" not in operator.get(page_url(task)).content.decode()
        response = operator.post(page_url(task, "redispatch/"), follow=True)
        assert "not stuck" in response.content.decode()
    assert runs == []


def test_export_downloads_the_dialects_encoding_and_the_events(bag, runs, tenant):
    task = task_in(TaskState.COMPLETED, bag)
    operator = browser_for("operator", tenant=tenant, role=Role.OPERATOR)
    response = operator.post(page_url(task, "export/"))
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == f'attachment; filename="task-{task.pk}.json"'
    document = json.loads(response.content)
    assert document["dialect"] == "a2a/1.0"
    assert [e["seq"] for e in document["events"]] == list(range(1, task.last_seq + 1))
    assert document["events"][0]["encoded"]["statusUpdate"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    status = document["task"]["status"]
    assert "TASK_STATE_COMPLETED" in json.dumps(status)
    raw = base64.b64decode(document["events"][2]["payload"]["artifact"]["parts"][2]["bytes"])
    assert raw == FILE_BYTES
    assert logged(task, "operator", "Exported as JSON")


ACTIONS = [("cancel/", "Cancel"), ("redispatch/", "Re-dispatch"), ("export/", "Export")]


@pytest.mark.parametrize(("action", "name"), ACTIONS)
def test_an_action_s_address_opened_as_a_page_leads_back_to_the_task_saying_so(action, name, bag, runs, tenant):
    task = task_in(TaskState.WORKING, bag)
    operator = browser_for("operator", tenant=tenant, role=Role.OPERATOR)
    opened = operator.get(page_url(task, action))
    assert opened.status_code == 302 and opened["Location"] == page_url(task)
    page = operator.get(page_url(task)).content.decode()
    assert f"{name} is done with its button on this page: opening its address changes nothing." in page
    assert Task.objects.get(pk=task.pk).state == TaskState.WORKING and not LogEntry.objects.exists()
    assert operator.put(page_url(task, action)).status_code == 405


@pytest.mark.parametrize(("role", "may"), [(Role.VIEWER, False), (Role.OPERATOR, True), (Role.OWNER, True)])
def test_a_viewer_cannot_act_and_operators_and_owners_can(role, may, bag, runs, tenant):
    browser = browser_for(role, tenant=tenant, role=role)
    task = task_in(TaskState.WORKING, bag)
    html = browser.get(page_url(task)).content.decode()
    assert ("Cancel the task" in html) == may and ("Export as JSON" in html) == may
    for action in ("export/", "redispatch/"):
        assert (browser.post(page_url(task, action)).status_code == 403) != may
    cancel = browser.post(page_url(task, "cancel/"))
    assert cancel.status_code == (302 if may else 403)
    task.refresh_from_db()
    assert (task.state == TaskState.CANCELED) == may
    assert LogEntry.objects.filter(object_id=str(task.pk), user__username=role).exists() == may
    # Everyone who sees the task downloads its files.
    message_pk = task.messages.values_list("pk", flat=True).first()
    assert browser.get(page_url(task, f"file/message/{message_pk}/2/")).status_code == 200


def test_another_tenants_task_its_files_and_its_actions_answer_404(bag, runs, tenant):
    globex = tenant_ensure(slug="globex", name="Globex")
    other = make_agent(globex, "globex-bag", "echo", input_modes=["*/*"], output_modes=["*/*"])
    foreign = task_in(TaskState.WORKING, other)
    message_pk = foreign.messages.values_list("pk", flat=True).first()
    browser = browser_for("operator", tenant=tenant, role=Role.OPERATOR)
    missing = browser.get(f"/admin/tasks_app/task/{uuid.uuid4()}/change/")
    assert missing.status_code == 404
    for suffix in ("change/", f"file/message/{message_pk}/2/"):
        response = browser.get(page_url(foreign, suffix))
        assert response.status_code == 404 and response.content == missing.content
    for action in ("cancel/", "redispatch/", "export/"):
        assert browser.post(page_url(foreign, action)).status_code == 404
        opened = browser.get(page_url(foreign, action))
        assert opened.status_code == 404 and opened.content == missing.content
    foreign.refresh_from_db()
    assert foreign.state == TaskState.WORKING
    # Nor in the overview: no tasks of globex there.
    Task.objects.filter(pk=foreign.pk).update(run_claimed_at=timezone.now() - timedelta(days=1))
    overview = browser.get("/admin/tasks_app/task/overview/").content.decode()
    assert str(foreign.pk) not in overview and "globex" not in overview.lower()


# --- the overview ----------------------------------------------------------------------


def test_the_overview_counts_states_stuck_tasks_busy_agents_and_failing_endpoints(bag, runs, tenant, settings):
    settings.AGENT_TIME_LIMIT = 30
    settings.SWEEP_UNCLAIMED_AFTER = 5
    done = [task_in(TaskState.COMPLETED, bag) for _ in range(3)]
    Task.objects.filter(pk=done[0].pk).update(status_timestamp=timezone.now() - timedelta(hours=3))
    Task.objects.filter(pk=done[1].pk).update(status_timestamp=timezone.now() - timedelta(days=3))
    lost = task_in(TaskState.WORKING, bag)
    Task.objects.filter(pk=lost.pk).update(run_claimed_at=timezone.now() - timedelta(minutes=5))
    waiting = receive(bag)
    Task.objects.filter(pk=waiting.pk).update(run_requested_at=timezone.now() - timedelta(minutes=5))
    config = PushConfig.objects.create(task=done[2], config_id="hook", url="https://broken.example.com:8443/in")
    event = TaskEvent.objects.filter(task=done[2]).first()
    PushDelivery.objects.create(
        config=config, event=event, seq=event.seq, state=DeliveryState.DEAD, last_status_code=502
    )
    viewer = browser_for("viewer", tenant=tenant, role=Role.VIEWER)
    with CaptureQueriesContext(connection) as queries:
        html = viewer.get("/admin/tasks_app/task/overview/").content.decode()
    assert "<tr><td>completed</td><td>1</td><td>2</td></tr>" in html
    assert str(lost.pk) in html and str(waiting.pk) in html
    assert "acme/bag" in html or "Bag" in html
    assert "broken.example.com" in html and "502: 1" in html
    # The session, the user, the roles; five of tasks; one of push; one of agents whose
    # executor cannot run them; two of Django's permissions.
    assert len(queries) == 12


def test_only_a_superuser_s_overview_shows_the_site_wide_queue(bag, runs, tenant, settings):
    receive(bag)
    for role in (Role.OWNER, Role.VIEWER):
        html = (
            browser_for(f"m-{role}", tenant=tenant, role=role).get("/admin/tasks_app/task/overview/").content.decode()
        )
        assert "Tasks: overview" in html and "Runs waiting in the queue" not in html, role
        assert settings.CELERY_TASK_DEFAULT_QUEUE not in html, role
    root = browser_for("root", superuser=True).get("/admin/tasks_app/task/overview/").content.decode()
    assert "Runs waiting in the queue" in root and settings.CELERY_TASK_DEFAULT_QUEUE in root


def test_the_overview_tolerates_redis_being_down(bag, runs, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    html = browser_for("root", superuser=True).get("/admin/tasks_app/task/overview/").content.decode()
    assert "<strong>unknown</strong>" in html


def test_a_staff_user_of_no_tenant_gets_no_overview(tenant):
    assert browser_for("nobody").get("/admin/tasks_app/task/overview/").status_code == 403


# --- live: a cancel from the admin reaches the running agent and its stream ------------------


@pytest.mark.live
def test_a_cancel_from_the_admin_stops_the_running_writer_and_ends_its_streams(live, tenant, alice_key):
    from tests.test_live_streaming import state, stream

    make_agent(tenant, "slowpoke", "writer", settings={"delay": 1.0, "paragraphs": 10})
    operator = browser_for("operator", tenant=tenant, role=Role.OPERATOR)
    message = {"message": user_message("a story about snails")}
    with stream(live.url, "/agents/acme/slowpoke/", "SendStreamingMessage", message, key=alice_key) as sender:
        _, first = next(sender)
        task_id = first["task"]["id"]
        with stream(live.urls[1], "/agents/acme/slowpoke/", "SubscribeToTask", {"id": task_id}, key=alice_key) as sub:
            for _, event in sender:
                if "statusUpdate" in event and state(event) == "WORKING":
                    break
            task = Task.objects.get(pk=task_id)
            response = operator.post(page_url(task, "cancel/"), {"reason": "enough snails"})
            assert response.status_code == 302
            rest = [state(e) for _, e in sender if "statusUpdate" in e]
            seen = [state(e) for _, e in sub if "statusUpdate" in e or "task" in e]
    assert rest[-1] == "CANCELED" and seen[-1] == "CANCELED"
    time.sleep(2.5)  # the writer's next step finds the task closed and writes nothing more
    task.refresh_from_db()
    assert task.state == TaskState.CANCELED
    last = TaskEvent.objects.filter(task=task).order_by("-seq").first()
    assert last.payload["state"] == TaskState.CANCELED and last.seq == task.last_seq
    assert logged(task, "operator", "Canceled: enough snails")


def test_the_raw_json_is_the_dialects_own_task_encoding_and_its_events_without_one(bag, runs, monkeypatch):
    from tasks_app import encoders

    task = task_in(TaskState.COMPLETED, bag)
    root = browser_for("root", superuser=True)
    html = root.get(page_url(task)).content.decode()
    assert "Raw JSON: as A2A 1.0 returns it" in html and "&quot;contextId&quot;" in html
    with monkeypatch.context() as patched:  # as for a dialect that registered no task encoder
        patched.delitem(encoders._task_encoders, "a2a/1.0")
        assert "as A2A 1.0 encodes them in its events" in root.get(page_url(task)).content.decode()
    document = json.loads(root.post(page_url(task, "export/")).content)
    assert document["task"]["id"] == str(task.pk) and document["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
