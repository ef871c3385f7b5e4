"""Operators follow deliveries and their attempts, and revive dead ones. Everything is
read-only here; secrets (credentials, tokens, private keys) are never shown."""

from django.contrib import admin, messages

from . import services
from .models import DeliveryState, PushAttempt, PushConfig, PushDelivery, SigningKey


class _ReadOnly:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class PushAttemptInline(_ReadOnly, admin.TabularInline):
    model = PushAttempt
    extra = 0
    fields = ("started_at", "status_code", "latency_ms", "error", "jti")
    readonly_fields = fields
    ordering = ("id",)


@admin.register(PushDelivery)
class PushDeliveryAdmin(_ReadOnly, admin.ModelAdmin):
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
        dead = list(queryset.filter(state=DeliveryState.DEAD).values_list("pk", flat=True))
        revived = services.deliveries_retry(delivery_pks=dead)
        self.message_user(
            request, f"{revived} dead deliveries queued again.", messages.SUCCESS if revived else messages.WARNING
        )

    def has_retry_permission(self, request) -> bool:
        # The admin edits nothing here, but resuming a delivery is a change to it.
        return request.user.has_perm("push.change_pushdelivery")

    def get_actions(self, request):
        # The site-wide "delete selected" would remove the log; keep only ours.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


@admin.register(PushConfig)
class PushConfigAdmin(_ReadOnly, admin.ModelAdmin):
    list_display = ("config_id", "task", "url", "status", "delivered_seq", "next_attempt_at", "deleted_at")
    list_filter = ("status",)
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
class SigningKeyAdmin(_ReadOnly, admin.ModelAdmin):
    list_display = ("kid", "created_at", "signs_from", "signs_until", "unpublish_at")
    ordering = ("-signs_from",)
    fields = ("kid", "public_jwk", "created_at", "signs_from", "signs_until", "unpublish_at")
    readonly_fields = fields
