"""Members follow their tenants' deliveries and attempts; operators and owners revive dead
ones. Everything is read-only here; secrets (credentials, tokens, private keys) are never shown."""

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.contrib import admin, messages
from django.db.models import Q
from django.http import HttpRequest
from django.urls import reverse

from accounts.admin_scoping import ReadOnlyForEveryone, TenantScopedAdmin, TenantScopedTabularInline, is_superuser
from accounts.models import Role
from tasks_app import admin_detail

from . import services
from .models import ConfigStatus, DeliveryState, PushAttempt, PushConfig, PushDelivery, SigningKey


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


# --- push on the task page and the overview (tasks_app.admin_detail) -----------------------

_TASK_PAGE_DELIVERIES = 100


@admin_detail.add_task_section
def _task_push_section(request: HttpRequest, task) -> admin_detail.Section | None:
    """The task's push configs, its newest deliveries and their attempts: three queries
    (configs by task; deliveries by config, the unique (config, seq) index; attempts by
    delivery, push_attempt_per_delivery), however many events the task has."""
    configs = list(PushConfig.objects.filter(task_id=task.pk).order_by("id"))
    if not configs:
        return None
    by_pk = {c.pk: c for c in configs}
    deliveries = list(
        PushDelivery.objects.filter(config_id__in=list(by_pk)).order_by("-seq", "-id")[:_TASK_PAGE_DELIVERIES]
    )
    attempts = list(
        PushAttempt.objects.filter(delivery_id__in=[d.pk for d in deliveries]).order_by("delivery_id", "id")
    )
    delivery_url = "admin:push_pushdelivery_change"
    config_rows = [
        [
            (c.config_id, reverse("admin:push_pushconfig_change", args=[c.pk])),
            c.url,
            c.auth_scheme or "",
            "yes" if c.credentials_sealed or c.token_sealed else "no",  # never the secrets themselves
            c.status,
            c.delivered_seq,
            admin_detail.stamp(c.next_attempt_at),
            admin_detail.stamp(c.deleted_at),
        ]
        for c in configs
    ]
    delivery_rows = [
        [
            (f"{task.pk}:{d.seq}", reverse(delivery_url, args=[d.pk])),
            by_pk[d.config_id].config_id,
            d.state,
            d.attempts,
            d.last_status_code or "",
            d.last_error[:200],
            admin_detail.stamp(d.created_at),
            admin_detail.stamp(d.delivered_at),
        ]
        for d in deliveries
    ]
    seqs = {d.pk: d.seq for d in deliveries}
    attempt_rows = [
        [
            seqs[a.delivery_id],
            admin_detail.stamp(a.started_at),
            a.status_code or "no answer",
            f"{a.latency_ms} ms",
            a.error[:200],
        ]
        for a in attempts
    ]
    changelist = reverse("admin:push_pushdelivery_changelist")
    return admin_detail.Section(
        title="Push notifications",
        tables=[
            admin_detail.Table(
                ["config", "url", "auth scheme", "credentials", "status", "delivered seq", "next attempt", "deleted"],
                config_rows,
            ),
            admin_detail.Table(
                ["event", "config", "state", "attempts", "last response", "last error", "created", "delivered"],
                delivery_rows,
                caption=f"Deliveries (the newest {_TASK_PAGE_DELIVERIES})",
            ),
            admin_detail.Table(
                ["event seq", "started", "response", "latency", "error"], attempt_rows, caption="Their attempts"
            ),
        ],
        links=[
            ("All deliveries of this task", f"{changelist}?q={task.pk}"),
            ("Its dead deliveries, to retry them", f"{changelist}?q={task.pk}&state__exact={DeliveryState.DEAD}"),
        ],
    )


@admin_detail.add_overview_section
def _failing_endpoints_section(
    request: HttpRequest, tenant_ids: list[int] | None, now: datetime
) -> admin_detail.Section | None:
    """Endpoints whose deliveries of the last day died or are failing, by URL host. One query on
    push_delivery_by_state (state, -created_at): the dead and pending deliveries of the last
    day, joined to their configs (and tasks, for the tenant) by primary key."""
    since = now - timedelta(days=1)
    rows = PushDelivery.objects.filter(state__in=[DeliveryState.DEAD, DeliveryState.PENDING], created_at__gte=since)
    rows = rows.filter(Q(state=DeliveryState.DEAD) | Q(attempts__gt=0))
    if tenant_ids is not None:
        rows = rows.filter(config__task__tenant_id__in=tenant_ids)
    hosts: dict[str, dict[str, Any]] = {}
    for state, config_pk, url, code, config_status in rows.order_by("-created_at").values_list(
        "state", "config_id", "config__url", "last_status_code", "config__status"
    )[:5000]:
        host = urlsplit(url).hostname or url
        entry = hosts.setdefault(host, {"dead": 0, "failing": 0, "configs": set(), "dead_configs": set(), "codes": {}})
        entry["dead" if state == DeliveryState.DEAD else "failing"] += 1
        entry["configs"].add(config_pk)
        if config_status == ConfigStatus.DEAD:
            entry["dead_configs"].add(config_pk)
        if code:
            entry["codes"][code] = entry["codes"].get(code, 0) + 1
    ordered = sorted(hosts.items(), key=lambda item: (-item[1]["dead"], -item[1]["failing"], item[0]))
    changelist = reverse("admin:push_pushdelivery_changelist")
    return admin_detail.Section(
        title="Failing push endpoints (last day)",
        tables=[
            admin_detail.Table(
                ["host", "dead deliveries", "failing (pending, retried)", "configs", "configs stopped", "responses"],
                [
                    [
                        host,
                        e["dead"],
                        e["failing"],
                        len(e["configs"]),
                        len(e["dead_configs"]),
                        ", ".join(f"{code}: {n}" for code, n in sorted(e["codes"].items())),
                    ]
                    for host, e in ordered[:50]
                ],
            )
        ],
        links=[("Dead deliveries, to retry them", f"{changelist}?state__exact={DeliveryState.DEAD}")],
    )
