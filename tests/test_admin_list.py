"""The admin's task list (tasks_app/admin_list.py): its columns, counters, filters, search,
order and count, and what it costs. The benchmark on a million tasks: bench/admin_bench.py."""

from __future__ import annotations

import importlib
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import F
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.models import Role
from accounts.services import member_add, tenant_ensure
from tasks_app import admin_list, services
from tasks_app.lifecycle import TaskState
from tasks_app.models import Artifact, Message, Task
from tests.conftest import make_agent, migrated_back

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/tasks_app/task/"


@pytest.fixture
def superuser() -> Client:
    browser = Client()
    browser.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw-for-tests-only"))
    return browser


def _tasks(agent, count: int, *, state: str = TaskState.COMPLETED, **fields: Any) -> list[Task]:
    """Tasks written straight to the store (the list reads rows; how they came is not its business)."""
    now = timezone.now()
    made = Task.objects.bulk_create(
        [
            Task(
                tenant_id=agent.tenant_id,
                agent=agent,
                owner="alice",
                context_id=fields.get("context_id", f"ctx-{uuid.uuid4()}"),
                dialect="a2a/1.0",
                state=state,
                status_timestamp=fields.get("status_timestamp", now - timedelta(seconds=i)),
                message_count=2,
                artifact_count=1,
            )
            for i in range(count)
        ]
    )
    # created_at is the time of the insert (auto_now_add): five minutes before the last change
    Task.objects.filter(pk__in=[t.pk for t in made]).update(created_at=F("status_timestamp") - timedelta(minutes=5))
    return made


def _listed(browser: Client, query: str = "") -> list[str]:
    response = browser.get(LIST + query)
    assert response.status_code == 200, response.status_code
    return [str(task.pk) for task in response.context["cl"].result_list]


def _queries(browser: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert browser.get(url).status_code == 200
    return len(queries)


# --- the page ----------------------------------------------------------------------------


def test_the_list_shows_tasks_in_every_state_with_badges_counts_and_durations(superuser, echo_agent):
    for state in TaskState.values:
        _tasks(echo_agent, 1, state=state)
    page = superuser.get(LIST).content.decode()
    for state in TaskState.values:
        assert f'class="task-state task-state-{state}"' in page
    assert "tasks_app/admin_list.css" in page
    assert "5 min" in page  # last change − created
    assert "A2A 1.0" in page and "acme/<wbr>echo" in page
    assert len(_listed(superuser)) == len(TaskState.values)


def test_a_row_shows_the_short_id_holding_the_whole_one_the_counts_and_the_last_change(superuser, echo_agent):
    (task,) = _tasks(echo_agent, 1, context_id="ctx-short")
    Task.objects.filter(pk=task.pk).update(message_count=3, artifact_count=7)
    page = superuser.get(LIST).content.decode()
    # The whole id is the link's text (copied whole) and its title (shown on hover); the style
    # clips it to its first characters.
    assert f'<span class="task-id" title="{task.pk}">{task.pk}</span>' in page
    assert f'href="/admin/tasks_app/task/{task.pk}/change/"' in page
    assert '<td class="field-messages">3</td>' in page and '<td class="field-artifacts">7</td>' in page
    changed = timezone.localtime(Task.objects.get(pk=task.pk).status_timestamp)
    assert (
        f">{changed:%Y-%m-%d %H:%M:%S}</time>" in page
        and f'title="{changed.isoformat(timespec="milliseconds")}"' in page
    )
    headers = re.findall(r'<th scope="col" class="(?:sortable )?column-(\w+)', page)
    assert headers[:5] == ["task_id", "agent_name", "state_badge", "last_change", "messages"]  # after the checkbox


def test_the_list_is_newest_change_first_and_sorts_oldest_first_on_the_same_key(superuser, echo_agent):
    now = timezone.now()
    old, new = (_tasks(echo_agent, 1, status_timestamp=now - timedelta(hours=h))[0] for h in (2, 1))
    assert _listed(superuser) == [str(new.pk), str(old.pk)]
    # The bulk actions' checkbox is the first column (the `o` parameter counts it).
    column = ["action_checkbox", *admin_list.TaskList.list_display].index("last_change")
    assert _listed(superuser, f"?o={column}") == [str(old.pk), str(new.pk)]


def test_the_cost_of_the_list_does_not_grow_with_its_rows(superuser, echo_agent, tenant):
    globex = tenant_ensure(slug="globex", name="Globex")
    other = make_agent(globex, "globex-bot", "echo")
    _tasks(echo_agent, 1)
    one = _queries(superuser, LIST)
    _tasks(echo_agent, 20)
    _tasks(other, 10)
    assert len(_listed(superuser)) == 31
    thirty = _queries(superuser, LIST)
    # session and user; the count (pg_class says the table is small: a count, stopped past
    # EstimatingPaginator.exact_up_to); the page of tasks with their agents and tenants; the
    # agent and tenant filters' choices.
    assert one == thirty == 7


def test_a_filtered_or_searched_list_costs_the_same_however_many_rows(superuser, echo_agent):
    _tasks(echo_agent, 1, context_id="ctx-a")
    first = [_queries(superuser, LIST + q) for q in ("?state=completed", "?q=ctx-a", "?changed=1d")]
    _tasks(echo_agent, 25, context_id="ctx-a")
    assert [_queries(superuser, LIST + q) for q in ("?state=completed", "?q=ctx-a", "?changed=1d")] == first


# --- the counters ------------------------------------------------------------------------


def _counted(task_id: str) -> tuple[int, int]:
    task = Task.objects.get(pk=task_id)
    # The stored counters are what a count of the rows says.
    assert task.message_count == Message.objects.filter(task_id=task_id).count()
    assert task.artifact_count == Artifact.objects.filter(task_id=task_id).count()
    return task.message_count, task.artifact_count


def test_the_counters_follow_a_send_an_answer_and_streamed_chunks(store_path, rpc, echo_agent, alice_key):
    task = rpc.send("/agents/acme/echo/", "hi", key=alice_key).result["task"]
    assert _counted(task["id"]) == (1, 1)  # the user's message; the echo artifact
    chunked = rpc.send("/agents/acme/echo/", "hi", key=alice_key, metadata={"benchChunks": 4}).result["task"]
    assert _counted(chunked["id"]) == (1, 1)  # four chunks of one artifact


def test_the_counters_follow_status_messages_follow_ups_and_chunks(store_path, rpc, writer_agent, alice_key):
    asked = rpc.send("/agents/acme/writer/", "write something", key=alice_key).result["task"]
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert _counted(asked["id"]) == (2, 0)  # the request; the question
    done = rpc.send("/agents/acme/writer/", "a poem about the sea", key=alice_key, taskId=asked["id"]).result["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    # + the answer, two working messages and the final one; the poem, streamed in chunks
    assert _counted(asked["id"]) == (6, 1)


def test_the_counters_follow_a_reply_and_a_replaced_artifact(
    store_path, rpc, conformance_agent, writer_agent, alice_key
):
    reply = rpc.send("/agents/acme/conformance/", key=alice_key, messageId=f"tck-message-response-{uuid.uuid4()}")
    task_id = Message.objects.get(message_id=reply.result["message"]["messageId"]).task_id
    assert _counted(str(task_id)) == (2, 0)
    open_task = rpc.send("/agents/acme/writer/", "write something", key=alice_key).result["task"]["id"]
    for _ in range(2):  # the same artifact twice: replaced, counted once
        services.artifact_append(task_id=open_task, parts=[{"type": "text", "text": "x"}], artifact_id="same")
    services.artifact_append(task_id=open_task, parts=[{"type": "text", "text": "y"}], artifact_id="other")
    services.artifact_append(task_id=open_task, parts=[{"type": "text", "text": "z"}], artifact_id="new", append=True)
    assert _counted(open_task) == (2, 3)


# --- search ------------------------------------------------------------------------------


@pytest.fixture
def three_tasks(rpc, echo_agent, alice_key) -> list[dict[str, Any]]:
    texts = ("the quarterly invoice for Globex", "a weather forecast please", "translate this contract")
    return [
        rpc.send("/agents/acme/echo/", text, key=alice_key, messageId=f"msg-{i}", contextId=f"ctx-{i}").result["task"]
        for i, text in enumerate(texts)
    ]


@pytest.mark.parametrize(
    "term",
    [
        lambda tasks: tasks[1]["id"],
        lambda tasks: tasks[1]["id"].upper(),
        lambda tasks: "ctx-1",
        lambda tasks: "msg-1",
        lambda tasks: "forecast",
        lambda tasks: "Weather",
        lambda tasks: "  weather forecast ",
    ],
    ids=["task id", "task id in capitals", "context id", "message id", "a word", "a word in capitals", "two words"],
)
def test_a_search_finds_the_task_and_no_other(superuser, three_tasks, term):
    assert _listed(superuser, "?" + _q(term(three_tasks))) == [three_tasks[1]["id"]]


def test_a_search_for_what_no_task_has_finds_nothing(superuser, three_tasks):
    for term in (str(uuid.uuid4()), "ctx-9", "nowhere", "1=1' OR '1'='1"):
        assert _listed(superuser, "?" + _q(term)) == []


def test_a_search_does_not_match_parts_of_words_or_the_json_around_the_text(superuser, three_tasks):
    for term in ("forec", "type", "text"):
        assert _listed(superuser, "?" + _q(term)) == []


def _q(term: str) -> str:
    from urllib.parse import urlencode

    return urlencode({"q": term})


# --- filters -----------------------------------------------------------------------------


def test_the_filters_select_by_state_agent_tenant_dialect_and_last_change(superuser, echo_agent, writer_agent):
    globex = tenant_ensure(slug="globex", name="Globex")
    spy = make_agent(globex, "spy", "echo")
    now = timezone.now()
    [failed] = _tasks(echo_agent, 1, state=TaskState.FAILED)
    [written] = _tasks(writer_agent, 1)
    [theirs] = _tasks(spy, 1)
    [old] = _tasks(echo_agent, 1, status_timestamp=now - timedelta(days=3))
    recent = {str(t.pk) for t in (failed, written, theirs)}
    assert _listed(superuser, "?state=failed") == [str(failed.pk)]
    assert set(_listed(superuser, f"?agent__id__exact={writer_agent.pk}")) == {str(written.pk)}
    assert _listed(superuser, f"?tenant__id__exact={globex.pk}") == [str(theirs.pk)]
    assert len(_listed(superuser, "?dialect=a2a/1.0")) == 4
    assert set(_listed(superuser, "?changed=1d")) == recent
    assert set(_listed(superuser, "?changed=7d")) == recent | {str(old.pk)}
    since = _q((now - timedelta(days=4)).isoformat()).removeprefix("q=")
    until = _q((now - timedelta(days=2)).isoformat()).removeprefix("q=")
    assert _listed(superuser, f"?status_timestamp__gte={since}&status_timestamp__lt={until}") == [str(old.pk)]
    assert superuser.get(LIST + "?status_timestamp__gte=yesterday").status_code == 302  # ?e=1, as Django does


def test_the_dialect_filter_offers_the_dialects_the_server_serves(superuser, echo_agent):
    _tasks(echo_agent, 1)
    assert admin_list.served_dialects() == [
        ("a2a/1.0", "A2A 1.0"),
        ("a2a/0.3", "A2A 0.3"),
        ("a2a/0.1", "A2A 0.1"),
        ("aip/1.0", "ACPs AIP 1.0"),
    ]
    page = superuser.get(LIST).content.decode()
    assert all(f"?dialect={d.replace('/', '%2F')}" in page for d in ("a2a/1.0", "a2a/0.3", "a2a/0.1", "aip/1.0"))


# --- the count ---------------------------------------------------------------------------


def test_past_the_exact_count_the_list_shows_an_estimate(superuser, echo_agent, monkeypatch):
    _tasks(echo_agent, 12)
    monkeypatch.setattr(admin_list.EstimatingPaginator, "exact_up_to", 5)
    monkeypatch.setattr(admin_list.TaskList, "list_per_page", 5)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Task._meta.db_table}")
    response = superuser.get(LIST)
    count = response.context["cl"].result_count
    assert isinstance(count, admin_list.About) and count >= 6 and str(count).startswith("about ")
    assert f"about {int(count):,}" in response.content.decode()
    assert len(response.context["cl"].result_list) == 5
    filtered = superuser.get(LIST + "?state=completed").context["cl"].result_count
    assert isinstance(filtered, admin_list.About) and filtered >= 6
    small = superuser.get(LIST + "?state=failed").context["cl"].result_count
    assert small == 0 and not isinstance(small, admin_list.About)


# --- members -----------------------------------------------------------------------------


def test_a_member_lists_searches_and_filters_only_their_tenants_tasks(rpc, echo_agent, alice_key, tenant):
    globex = tenant_ensure(slug="globex", name="Globex")
    spy = make_agent(globex, "globex-spy", "echo")
    ours = rpc.send("/agents/acme/echo/", "the shared word", key=alice_key, contextId="shared").result["task"]
    [theirs] = _tasks(spy, 1, context_id="shared")
    Message.objects.create(
        task=theirs,
        message_id="m",
        context_id="shared",
        role="user",
        parts=[{"type": "text", "text": "the shared word"}],
    )
    member = get_user_model().objects.create_user("acme-viewer", password="pw-for-tests-only", is_staff=True)
    member_add(tenant=tenant, user=member, role=Role.VIEWER)
    browser = Client()
    browser.force_login(member)
    assert _listed(browser) == [ours["id"]]
    for term in ("shared", "word", str(theirs.pk)):
        assert str(theirs.pk) not in _listed(browser, "?" + _q(term))
    assert _listed(browser, "?" + _q("word")) == [ours["id"]]
    # (A member of one tenant has no tenant filter: Django drops a filter of one choice.)
    assert str(theirs.pk) not in _listed(browser, f"?tenant__id__exact={globex.pk}")
    page = browser.get(LIST).content.decode()
    assert "globex" not in page


# --- the migration -----------------------------------------------------------------------


def test_migration_0010_counts_the_messages_and_artifacts_of_the_tasks_there_are(monkeypatch):
    from django.db.migrations.executor import MigrationExecutor

    before = [("tasks_app", "0009_tenant_limits")]
    after = [("tasks_app", "0010_task_counters_and_list_indexes")]
    with migrated_back(before) as executor:
        old = executor.loader.project_state(before).apps
        tenant = old.get_model("accounts", "Tenant").objects.create(slug="old", name="Old")
        agent = old.get_model("accounts", "Agent").objects.create(
            tenant=tenant, slug="a", name="A", description="d", executor="echo"
        )
        tasks = [
            old.get_model("tasks_app", "Task").objects.create(
                tenant=tenant,
                agent=agent,
                owner="p",
                context_id="c",
                dialect="a2a/1.0",
                status_timestamp=timezone.now(),
            )
            for _ in range(5)
        ]
        for n, task in enumerate(tasks):
            for i in range(n):
                old.get_model("tasks_app", "Message").objects.create(
                    task=task, message_id=f"m{i}", context_id="c", role="user", parts=[{"type": "text", "text": "hi"}]
                )
            if n % 2:
                old.get_model("tasks_app", "Artifact").objects.create(task=task, artifact_id="x", parts=[])
        # batches of two: the fill goes on past its first batch
        monkeypatch.setattr(
            importlib.import_module("tasks_app.migrations.0010_task_counters_and_list_indexes"), "BATCH", 2
        )
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps.get_model("tasks_app", "Task")
        counted = {t.pk: (t.message_count, t.artifact_count) for t in new.objects.all()}
        assert counted == {t.pk: (n, n % 2) for n, t in enumerate(tasks)}


# --- hostile query strings ---------------------------------------------------------------------

_odd_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["\x00", "a\x00b", "'", "(", "!", "&|", ":*", "x" * 3000, "2026-13-45", "-1", "99999999999999999999"]
)


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(search=_odd_text, since=_odd_text, page=_odd_text)
def test_no_query_string_makes_the_task_pages_answer_500(
    client, rpc, echo_agent, alice_key, django_user_model, search, since, page
):
    """Whatever an operator types or a link carries: the list, its search and date filter, the
    task page's timeline page and the overview answer, never with a server error."""
    from urllib.parse import urlencode

    task = Task.objects.first() or Task.objects.get(
        pk=rpc.send("/agents/acme/echo/", key=alice_key, configuration={"returnImmediately": True}).result["task"]["id"]
    )
    root = django_user_model.objects.filter(username="root").first() or django_user_model.objects.create_superuser(
        "root", "root@example.com"
    )
    client.force_login(root)
    urls = [
        "/admin/tasks_app/task/?" + urlencode({"q": search}),
        "/admin/tasks_app/task/?" + urlencode({"status_timestamp__gte": since, "q": search}),
        f"/admin/tasks_app/task/{task.pk}/change/?" + urlencode({"timeline_page": page}),
        "/admin/tasks_app/task/overview/?" + urlencode({"q": search}),
    ]
    for url in urls:
        assert client.get(url).status_code < 500, url
