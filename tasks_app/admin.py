"""Members browse and inspect their tenants' tasks; the store is written only through
services, so every page here is read-only, for superusers too."""

from django.contrib import admin

from accounts.admin_scoping import ReadOnlyForEveryone, TenantScopedAdmin, TenantScopedTabularInline

from .admin_list import TaskList
from .models import Artifact, Message, StatusChange, Task, TaskEvent


class _TaskRows(ReadOnlyForEveryone, TenantScopedTabularInline):
    tenant_field = "task__tenant"
    extra = 0
    can_delete = False
    show_change_link = False


class StatusChangeInline(_TaskRows):
    model = StatusChange
    fields = ("timestamp", "state", "reason", "message")
    readonly_fields = fields
    ordering = ("id",)


class MessageInline(_TaskRows):
    model = Message
    fields = ("created_at", "role", "message_id", "parts", "reference_task_ids")
    readonly_fields = fields
    ordering = ("id",)


class ArtifactInline(_TaskRows):
    model = Artifact
    fields = ("artifact_id", "name", "complete", "parts", "updated_at")
    readonly_fields = fields


class TaskEventInline(_TaskRows):
    model = TaskEvent
    fields = ("seq", "kind", "created_at", "payload")
    readonly_fields = fields
    ordering = ("seq",)


@admin.register(Task)
class TaskAdmin(TaskList, ReadOnlyForEveryone, TenantScopedAdmin):  # type: ignore[misc]  # plain class attributes
    """The list (columns, filters, search, order, count) comes from `admin_list.TaskList`."""

    tenant_field = "tenant"
    raw_id_fields = ("tenant", "agent", "status_message")
    readonly_fields = [f.name for f in Task._meta.fields]
    inlines = (StatusChangeInline, MessageInline, ArtifactInline, TaskEventInline)
