from django.contrib import admin, messages
from django.utils import timezone

from .models import Agent, ApiKey, Tenant
from .services import api_key_create


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("__str__", "name", "executor", "is_public", "is_active", "updated_at")
    list_filter = ("is_public", "is_active", "executor")
    list_select_related = ("tenant",)
    search_fields = ("slug", "name", "tenant__slug")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Adding a key here generates its secret, shows it once, and stores only its hash."""

    list_display = ("name", "tenant", "principal", "prefix", "created_at", "revoked_at")
    list_filter = ("tenant",)
    list_select_related = ("tenant",)
    fields = ("tenant", "name", "principal", "prefix", "created_at", "revoked_at")
    readonly_fields = ("prefix", "created_at")
    search_fields = ("name", "principal", "prefix")
    actions = ("revoke",)

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        key, plaintext = api_key_create(tenant=obj.tenant, name=obj.name, principal=obj.principal or None)
        obj.pk, obj.prefix, obj.key_hash, obj.created_at = key.pk, key.prefix, key.key_hash, key.created_at
        self.message_user(
            request, f"API key created. Copy it now, it is not shown again: {plaintext}", messages.WARNING
        )

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request, queryset):
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} key(s).")
