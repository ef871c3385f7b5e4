"""Members of a tenant see its agents' group memberships; nothing is edited here (the Leader
decides who is in a group). The access token is never shown."""

from __future__ import annotations

from django.contrib import admin

from accounts.admin_scoping import ReadOnlyForEveryone, TenantScopedAdmin, TenantScopedTabularInline

from .models import SHOWN_FIELDS, GroupMembership, GroupTask


class GroupTaskInline(ReadOnlyForEveryone, TenantScopedTabularInline):
    model = GroupTask
    tenant_field = "membership__agent__tenant"
    extra = 0
    fields = ("task", "published_seq", "done", "created_at")
    readonly_fields = fields
    ordering = ("pk",)


@admin.register(GroupMembership)
class GroupMembershipAdmin(ReadOnlyForEveryone, TenantScopedAdmin):
    tenant_field = "agent__tenant"
    list_display = ("member_aic", "group_id", "leader_aic", "agent", "owner", "state", "muted", "created_at")
    list_select_related = ("agent__tenant",)
    list_filter = ("state", "credential", "muted")
    search_fields = ("=group_id", "=leader_aic", "=member_aic", "=owner")
    ordering = ("-created_at",)
    show_facets = admin.ShowFacets.NEVER
    fields = SHOWN_FIELDS  # never the sealed token nor the rate-limit identity
    readonly_fields = fields
    inlines = (GroupTaskInline,)
