"""The admin's task list (its change list), fast on a table of a million tasks.

Every part of the page runs on an index: the order (newest change first, on
`tasks_task_recent`, or a tenant's and a state's own), the filters, and the searches (a
task, context or message id, exactly; or the words of the messages' text parts, through
the GIN index of migration 0010). The page counts no more than it must: a filtered list is
counted up to `EstimatingPaginator.exact_up_to` rows, and past that (or for the whole table)
it shows the planner's estimate ("about N"). The counts of messages and artifacts are the
task's own counters (kept by `services` and `sql`), so a row costs no query.

The change page (the task itself) is not built here; `admin.TaskAdmin` takes this list.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html

from accounts.admin_scoping import ScopedRelatedFieldListFilter, is_superuser, tenant_ids_with
from accounts.models import Agent

from . import encoders
from .lifecycle import Dialect, TaskState
from .models import Task
from .search import matching_task_ids

# --- The count ------------------------------------------------------------------------


class About(int):
    """A count the planner estimated: compares and pages as the number, shows as "about N"."""

    def __str__(self) -> str:
        return f"about {int(self):,}"


class EstimatingPaginator(Paginator):
    """Counts exactly up to `exact_up_to` rows; beyond, tells the planner's estimate.

    The whole table: the row count Postgres keeps in pg_class (one cheap query), counted
    exactly only when that says the table is small. A filtered or searched list: a count
    stopped after `exact_up_to` + 1 rows, and when it gets that far, the estimate of EXPLAIN.
    Elsewhere (SQLite) the count is exact.
    """

    exact_up_to = 5000

    @cached_property
    def count(self) -> int:  # type: ignore[override]
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        connection = connections[queryset.db]
        if connection.vendor != "postgresql":
            return queryset.count()
        queryset = queryset.order_by()
        if not queryset.query.where:
            estimate = self._table_estimate(connection, queryset.model._meta.db_table)
            if estimate > self.exact_up_to:
                return About(estimate)
        counted = queryset[: self.exact_up_to + 1].count()
        if counted <= self.exact_up_to:
            return counted
        return About(max(self._plan_estimate(queryset), counted))

    @staticmethod
    def _table_estimate(connection: Any, table: str) -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [table])
            row = cursor.fetchone()
        return int(row[0]) if row else -1  # -1: never analysed

    @staticmethod
    def _plan_estimate(queryset: QuerySet) -> int:
        plan = json.loads(queryset.explain(format="json"))
        return int(plan[0]["Plan"]["Plan Rows"])


# --- The filters ----------------------------------------------------------------------


def served_dialects() -> list[tuple[str, str]]:
    """The dialects this server speaks: those whose app registered an event encoder."""
    served = set(encoders._encoders)
    return [(value, str(label)) for value, label in Dialect.choices if value in served]


class DialectFilter(admin.SimpleListFilter):
    title = "dialect"
    parameter_name = "dialect"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return served_dialects()

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        return queryset.filter(dialect=value) if value else queryset


class AgentFilter(ScopedRelatedFieldListFilter):
    """The agents, each named with its tenant in one query (a member: only their tenants')."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: admin.ModelAdmin) -> Any:
        if not is_superuser(request):
            return super().field_choices(field, request, model_admin)
        agents = Agent.objects.select_related("tenant").order_by("tenant__slug", "slug")
        return [(agent.pk, str(agent)) for agent in agents]


class LastChangeFilter(admin.FieldListFilter):
    """The last change within the past hour, day, week or 30 days (`?changed=1h`), or any
    range given as `?status_timestamp__gte=…&status_timestamp__lt=…`."""

    periods = {
        "1h": ("Past hour", timedelta(hours=1)),
        "1d": ("Past day", timedelta(days=1)),
        "7d": ("Past 7 days", timedelta(days=7)),
        "30d": ("Past 30 days", timedelta(days=30)),
    }
    within = "changed"

    def __init__(self, field: Any, request: HttpRequest, params: Any, model: Any, model_admin: Any, field_path: Any):
        self.since = f"{field_path}__gte"
        self.until = f"{field_path}__lt"
        super().__init__(field, request, params, model, model_admin, field_path)
        self.title = "last change"

    def expected_parameters(self) -> list[str | None]:
        return [self.within, self.since, self.until]

    def _value(self, name: str) -> str | None:
        value = self.used_parameters.get(name)
        if isinstance(value, list):
            value = value[-1] if value else None
        return str(value) if value is not None else None

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        period = self.periods.get(self._value(self.within) or "")
        if period is not None:
            queryset = queryset.filter(**{self.since: timezone.now() - period[1]})
        for name in (self.since, self.until):
            if value := self._value(name):
                try:
                    queryset = queryset.filter(**{name: value})
                except Exception as exc:  # a malformed date: the admin says the lookup is wrong
                    raise admin.options.IncorrectLookupParameters(exc) from exc
        return queryset

    def choices(self, changelist: Any) -> Any:
        chosen = self._value(self.within)
        custom = bool(self._value(self.since) or self._value(self.until))
        yield {
            "selected": chosen is None and not custom,
            "query_string": changelist.get_query_string(remove=self.expected_parameters()),
            "display": "Any time",
        }
        for key, (label, _) in self.periods.items():
            yield {
                "selected": chosen == key,
                "query_string": changelist.get_query_string({self.within: key}, remove=self.expected_parameters()),
                "display": label,
            }


# --- The page -------------------------------------------------------------------------


class TaskChangeList(ChangeList):
    def get_ordering(self, request: HttpRequest, queryset: QuerySet) -> list[Any]:
        # Oldest change first walks the same index backwards: the id must go the same way.
        ordering = super().get_ordering(request, queryset)
        if ordering and ordering[0] == "status_timestamp":
            return ["status_timestamp", "id"]
        return ordering


def _human(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"


def _when(moment: Any) -> str:
    """To the second in the server's time zone; to the millisecond, with the zone, on hover."""
    local = timezone.localtime(moment)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        local.isoformat(),
        local.isoformat(timespec="milliseconds"),
        local.strftime("%Y-%m-%d %H:%M:%S"),
    )


class TaskList:
    """The list part of TaskAdmin: its columns, filters, search, order and paginator."""

    # Readable at 1,280 px beside the filters: ids clipped to their first characters (the whole
    # id is the cell's text, so hovering shows it and copying takes it), times without words,
    # the agent naming its tenant, what operators look for first on the left; the creation time
    # is the task page's (and its age here: last change − created).
    list_display = (
        "task_id",
        "agent_name",
        "state_badge",
        "last_change",
        "messages",
        "artifacts",
        "dialect",
        "context",
        "duration",
    )
    list_display_links = ("task_id",)
    list_filter = (
        "state",
        ("agent", AgentFilter),
        "tenant",
        DialectFilter,
        ("status_timestamp", LastChangeFilter),
    )
    list_select_related = ("agent", "agent__tenant", "tenant")
    list_per_page = 50
    search_fields = ("=id",)  # the search box; `get_search_results` does the searching
    search_help_text = "A task, context or message id, or words of a message's text."
    ordering = ("-status_timestamp", "-id")
    sortable_by = ("last_change",)
    show_facets = admin.ShowFacets.NEVER
    show_full_result_count = False
    paginator = EstimatingPaginator

    class Media:
        css = {"all": ("tasks_app/admin_list.css",)}

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return TaskChangeList

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        # The widest table of the admin needs the width the navigation sidebar takes (the
        # breadcrumbs and the index lead elsewhere): without it, every column fits at 1,280 px.
        context = {"is_nav_sidebar_enabled": False, **(extra_context or {})}
        return super().changelist_view(request, context)  # type: ignore[misc]

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        tenant_ids = None if is_superuser(request) else tenant_ids_with(request, self.view_role)  # type: ignore[attr-defined]
        return queryset.filter(matching_task_ids(term, connections[queryset.db].vendor, tenant_ids)), False

    @admin.display(description="task")
    def task_id(self, task: Task) -> str:
        return format_html('<span class="task-id" title="{}">{}</span>', task.pk, task.pk)

    @admin.display(description="agent")
    def agent_name(self, task: Task) -> str:
        # tenant/agent, broken after the slash when the column is narrow, never inside a slug.
        return format_html("{}/<wbr>{}", task.agent.tenant.slug, task.agent.slug)

    @admin.display(description="context")
    def context(self, task: Task) -> str:
        return format_html('<span class="task-id" title="{}">{}</span>', task.context_id, task.context_id)

    @admin.display(description="last change", ordering="status_timestamp")
    def last_change(self, task: Task) -> str:
        return _when(task.status_timestamp)

    @admin.display(description="state", ordering="state")
    def state_badge(self, task: Task) -> str:
        return format_html('<span class="task-state task-state-{}">{}</span>', task.state, TaskState(task.state).label)

    @admin.display(description="last change − created")
    def duration(self, task: Task) -> str:
        return _human(task.status_timestamp - task.created_at)

    @admin.display(description="messages")
    def messages(self, task: Task) -> int:
        return task.message_count

    @admin.display(description="artifacts")
    def artifacts(self, task: Task) -> int:
        return task.artifact_count
