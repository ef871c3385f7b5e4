"""Members browse and inspect their tenants' tasks; the store is written only through
services, so every page here is read-only, for superusers too. The list (columns, filters,
search, order, count): tasks_app.admin_list; its bulk actions: tasks_app.admin_actions. The task
page, its actions and the overview: tasks_app.admin_detail."""

from datetime import datetime

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse

from accounts.admin_scoping import ReadOnlyForEveryone, TenantScopedAdmin
from accounts.selectors import agents_stranded

from . import admin_detail
from .admin_actions import TaskBulkActions
from .admin_detail import TaskDetailAdmin
from .admin_list import TaskList
from .executors import plugins
from .models import Task


@admin.register(Task)
class TaskAdmin(TaskDetailAdmin, TaskBulkActions, TaskList, ReadOnlyForEveryone, TenantScopedAdmin):  # type: ignore[misc]  # plain class attributes
    tenant_field = "tenant"
    raw_id_fields = ("tenant", "agent", "status_message")
    readonly_fields = [f.name for f in Task._meta.fields]


@admin_detail.add_overview_section
def _executors_section(request: HttpRequest, tenant_ids: list[int] | None, now: datetime) -> admin_detail.Section:
    """The executors this process loaded, and, to superusers, the plugins it could not load with
    the reason (the process logged them at start too): the server's installation (its modules,
    paths, errors) is the operator's, not every tenant member's. Agents (of the viewer's
    tenants) whose executor is not installed or no longer allowed for their tenant are flagged."""
    superuser = tenant_ids is None  # the overview's scope: None for a superuser alone
    tables = [
        admin_detail.Table(
            headers=["executor", "from", "class"],
            rows=[[item.name, item.source, item.target] for item in plugins.LOADED],
            caption="Loaded",
        )
    ]
    if superuser and plugins.BROKEN:
        tables.append(
            admin_detail.Table(
                headers=["executor", "from", "class", "why it was not loaded"],
                rows=[[item.name, item.source, item.target, item.error] for item in plugins.BROKEN],
                caption="Not loaded",
            )
        )
    stranded = agents_stranded(tenant_ids)
    if stranded:
        # Saved while their executor was installed and allowed: their runs now fail as
        # misconfigured, saying this, until the executor is back or the agent changes.
        tables.append(
            admin_detail.Table(
                headers=["agent", "executor", "why it cannot run"],
                rows=[
                    [
                        (str(item.agent), reverse("admin:accounts_agent_change", args=[item.agent.pk])),
                        item.agent.executor,
                        item.why,
                    ]
                    for item in stranded
                ],
                caption="Agents whose executor cannot run them",
            )
        )
    tables.append(
        admin_detail.Table(
            headers=["extension", "from", "class"],
            rows=[[item.name, item.source, item.target] for item in plugins.EXTENSIONS_LOADED]
            + [
                [item.name, item.source, f"{item.target} (not loaded: {item.error})"]
                for item in (plugins.EXTENSIONS_BROKEN if superuser else [])
            ],
            caption="Server extensions",
        )
    )
    return admin_detail.Section(
        title="Executors",
        tables=tables,
        note=f"Installed distributions add executors through the entry point group {plugins.GROUP!r}, "
        f"and extensions the server applies for agents that declare them through {plugins.EXTENSION_GROUP!r}.",
    )
