"""Operators browse and inspect tasks; the store is written only through services."""

from django.contrib import admin

from .models import Artifact, Message, StatusChange, Task, TaskEvent


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class StatusChangeInline(_ReadOnlyInline):
    model = StatusChange
    fields = ("timestamp", "state", "reason", "message")
    readonly_fields = fields
    ordering = ("id",)


class MessageInline(_ReadOnlyInline):
    model = Message
    fields = ("created_at", "role", "message_id", "parts", "reference_task_ids")
    readonly_fields = fields
    ordering = ("id",)


class ArtifactInline(_ReadOnlyInline):
    model = Artifact
    fields = ("artifact_id", "name", "complete", "parts", "updated_at")
    readonly_fields = fields


class TaskEventInline(_ReadOnlyInline):
    model = TaskEvent
    fields = ("seq", "kind", "created_at", "payload")
    readonly_fields = fields
    ordering = ("seq",)


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("id", "agent", "owner", "state", "dialect", "status_timestamp", "context_id")
    list_filter = ("state", "dialect", "agent__tenant")
    list_select_related = ("agent", "agent__tenant")
    search_fields = ("=id", "=context_id", "owner")
    ordering = ("-status_timestamp",)
    show_facets = admin.ShowFacets.NEVER
    raw_id_fields = ("tenant", "agent", "status_message")
    readonly_fields = [f.name for f in Task._meta.fields]
    inlines = (StatusChangeInline, MessageInline, ArtifactInline, TaskEventInline)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
