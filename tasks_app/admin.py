"""Members browse and inspect their tenants' tasks; the store is written only through
services, so every page here is read-only, for superusers too. The task page, its actions
and the overview: tasks_app.admin_detail."""

from django.contrib import admin

from accounts.admin_scoping import ReadOnlyForEveryone, TenantScopedAdmin

from .admin_detail import TaskDetailAdmin
from .models import Task


@admin.register(Task)
class TaskAdmin(TaskDetailAdmin, ReadOnlyForEveryone, TenantScopedAdmin):
    tenant_field = "tenant"
    list_display = ("id", "agent", "owner", "state", "dialect", "status_timestamp", "context_id")
    list_filter = ("state", "dialect", "tenant", "agent")
    list_select_related = ("agent", "agent__tenant")
    search_fields = ("=id", "=context_id", "owner")
    ordering = ("-status_timestamp",)
    show_facets = admin.ShowFacets.NEVER
    raw_id_fields = ("tenant", "agent", "status_message")
    readonly_fields = [f.name for f in Task._meta.fields]
