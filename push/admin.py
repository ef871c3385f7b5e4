"""Members follow their tenants' deliveries and attempts; operators and owners revive dead
ones. Everything is read-only here; secrets (credentials, tokens, private keys) are never shown."""

from django.contrib import admin, messages

from accounts.admin_scoping import ReadOnlyForEveryone, TenantScopedAdmin, TenantScopedTabularInline, is_superuser
from accounts.models import Role

from . import services
from .models import DeliveryState, PushAttempt, PushConfig, PushDelivery, SigningKey


class PushAttemptInline(ReadOnlyForEveryone, TenantScopedTabularInline):
    model = PushAttempt
    tenant_field = "delivery__config__task__tenant"
    extra = 0
    fields = ("started_at", "status_code", "latency_ms", "error", "jti")
    readonly_fields = fields
    ordering = ("id",)


@admin.register(PushDelivery)
class PushDeliveryAdmin(ReadOnlyForEveryone, TenantScopedAdmin):
    tenant_field = "config__task__tenant"
    list_display = ("event_id", "config_name", "state", "attempts", "last_status_code", "created_at", "delivered_at")
    list_filter = ("state",)
    list_select_related = ("config",)
    search_fields = ("=config__task__id", "=config__config_id")
    ordering = ("-created_at",)
    show_facets = admin.ShowFacets.NEVER
    fields = (
        "config",
        "event",
        "seq",
        "state",
        "attempts",
        "last_status_code",
        "last_error",
        "created_at",
        "delivered_at",
    )
    readonly_fields = fields
    inlines = (PushAttemptInline,)
    actions = ("retry_dead",)

    @admin.display(description="event id")
    def event_id(self, obj: PushDelivery) -> str:
        return obj.event_id_text

    @admin.display(description="config")
    def config_name(self, obj: PushDelivery) -> str:
        return obj.config.config_id

    @admin.action(
        description="Retry dead deliveries (fresh attempts; the config resumes from there)", permissions=["retry"]
    )
    def retry_dead(self, request, queryset):
        # A member who only views some of the selected deliveries' tenants retries the rest.
        mine = self.may_in(request, queryset, Role.OPERATOR)
        dead = list(mine.filter(state=DeliveryState.DEAD).values_list("pk", flat=True))
        revived = services.deliveries_retry(delivery_pks=dead)
        for delivery in PushDelivery.objects.filter(pk__in=dead, state=DeliveryState.PENDING).select_related("config"):
            self.log_change(request, delivery, "Retried.")
        self.message_user(
            request, f"{revived} dead deliveries queued again.", messages.SUCCESS if revived else messages.WARNING
        )

    def has_retry_permission(self, request) -> bool:
        # The admin edits nothing here, but resuming a delivery is a change to it: operators'.
        if is_superuser(request):
            return request.user.has_perm("push.change_pushdelivery")
        return self.member_may(request, Role.OPERATOR)

    def get_actions(self, request):
        # The site-wide "delete selected" would remove the log; keep only ours.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


@admin.register(PushConfig)
class PushConfigAdmin(ReadOnlyForEveryone, TenantScopedAdmin):
    tenant_field = "task__tenant"
    list_display = ("config_id", "task", "url", "status", "delivered_seq", "next_attempt_at", "deleted_at")
    list_filter = ("status",)
    list_select_related = ("task",)
    search_fields = ("=task__id", "=config_id")
    ordering = ("-created_at",)
    show_facets = admin.ShowFacets.NEVER
    raw_id_fields = ("task",)
    # The sealed columns are `editable=False`, so no form shows them; list what may be seen.
    fields = (
        "task",
        "config_id",
        "url",
        "auth_scheme",
        "has_credentials",
        "has_token",
        "status",
        "delivered_seq",
        "next_attempt_at",
        "created_at",
        "updated_at",
        "deleted_at",
    )
    readonly_fields = fields

    @admin.display(boolean=True)
    def has_credentials(self, obj: PushConfig) -> bool:
        return bool(obj.credentials_sealed)

    @admin.display(boolean=True)
    def has_token(self, obj: PushConfig) -> bool:
        return bool(obj.token_sealed)


@admin.register(SigningKey)
class SigningKeyAdmin(ReadOnlyForEveryone, admin.ModelAdmin):
    """The site's keys, not a tenant's: superusers only (members hold no Django permissions)."""

    list_display = ("kid", "created_at", "signs_from", "signs_until", "unpublish_at")
    ordering = ("-signs_from",)
    fields = ("kid", "public_jwk", "created_at", "signs_from", "signs_until", "unpublish_at")
    readonly_fields = fields
