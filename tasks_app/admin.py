"""Members browse and inspect their tenants' tasks; the store is written only through
services, so every page here is read-only, for superusers too. The list (columns, filters,
search, order, count): tasks_app.admin_list. The task page, its actions and the overview:
tasks_app.admin_detail."""

from django.contrib import admin

from accounts.admin_scoping import ReadOnlyForEveryone, TenantScopedAdmin

from .admin_detail import TaskDetailAdmin
from .admin_list import TaskList
from .models import Task


@admin.register(Task)
class TaskAdmin(TaskDetailAdmin, TaskList, ReadOnlyForEveryone, TenantScopedAdmin):  # type: ignore[misc]  # plain class attributes
    tenant_field = "tenant"
    raw_id_fields = ("tenant", "agent", "status_message")
    readonly_fields = [f.name for f in Task._meta.fields]
