"""Members browse and inspect their tenants' tasks; the store is written only through
services, so every page here is read-only, for superusers too."""

from django.contrib import admin

from accounts.admin_scoping import ReadOnlyForEveryone, TenantScopedAdmin, TenantScopedTabularInline

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
class TaskAdmin(ReadOnlyForEveryone, TenantScopedAdmin):
    tenant_field = "tenant"
    list_display = ("id", "agent", "owner", "state", "dialect", "status_timestamp", "context_id")
    list_filter = ("state", "dialect", "tenant", "agent")
    list_select_related = ("agent", "agent__tenant")
    search_fields = ("=id", "=context_id", "owner")
    ordering = ("-status_timestamp",)
    show_facets = admin.ShowFacets.NEVER
    raw_id_fields = ("tenant", "agent", "status_message")
    readonly_fields = [f.name for f in Task._meta.fields]
    inlines = (StatusChangeInline, MessageInline, ArtifactInline, TaskEventInline)
