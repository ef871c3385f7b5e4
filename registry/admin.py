"""The curators' admin: the review queue, an entry's page (its card versions side by side,
trust signals, health, decisions and flags) with the decision form, and the open flags.

Curators (registry.curate_entry, e.g. the group "Registry curators") and superusers see every
entry and decide; a tenant's members see their tenant's entries, and its operators and owners
may submit, deprecate and un-deprecate them (accounts.admin_scoping). Nobody edits an entry's
card or history here: every change is a decision through registry.services.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from accounts.admin_scoping import TenantScopedAdmin, is_superuser

from . import attestations, card_hosts, selectors, services
from .models import ApiToken, CardVersion, Entry, Flag, State

DIFF_CONTEXT_LINES = 3


def pretty(document: Any) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False)


def card_diff(old: CardVersion, new: CardVersion) -> str:
    """Two card versions side by side, changed lines marked (difflib escapes the text)."""
    table = difflib.HtmlDiff(tabsize=2, wrapcolumn=70).make_table(
        pretty(old.document).splitlines(),
        pretty(new.document).splitlines(),
        fromdesc=f"version {old.number} ({old.hash[:12]})",
        todesc=f"version {new.number} ({new.hash[:12]})",
        context=True,
        numlines=DIFF_CONTEXT_LINES,
    )
    return mark_safe(table)  # noqa: S308 - HtmlDiff escapes &, < and > of every line


def is_curator(request: HttpRequest) -> bool:
    return request.user.is_active and request.user.is_staff and selectors.is_curator(request.user)


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(State.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(state=self.value()) if self.value() else queryset


@admin.register(Entry)
class EntryAdmin(TenantScopedAdmin):
    tenant_field = "tenant"
    list_display = [
        "name_or_url",
        "kind",
        "state",
        "domain_proven",
        "proven",
        "signed",
        "health",
        "provider",
        "tenant",
        "state_changed_at",
        "open_flags",
    ]
    list_filter = [StateFilter, "kind", "health", "signed", "dialect"]
    search_fields = ["name", "card_url", "domain", "provider"]
    list_select_related = ["tenant"]
    ordering = ["-state_changed_at", "-id"]
    list_per_page = 50
    show_full_result_count = False

    # --- who sees and decides

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset: QuerySet = Entry.objects.select_related("tenant")
        if not is_curator(request):
            queryset = super().get_queryset(request)
        return queryset.annotate(flag_count=Count("flags", filter=Q(flags__resolved_at__isnull=True)))

    def get_ordering(self, request: HttpRequest) -> Any:
        # The review queue (pending entries) is worked oldest first.
        if request.GET.get("state") == State.PENDING:
            return ["state_changed_at", "id"]
        return self.ordering

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_curator(request) or super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_curator(request) or super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # remote agents are submitted by URL (the API), hosted ones appear by themselves

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    # --- the list

    @admin.display(description="entry", ordering="name")
    def name_or_url(self, entry: Entry) -> str:
        return entry.name or entry.card_url

    @admin.display(description="domain proven", boolean=True)
    def domain_proven(self, entry: Entry) -> bool:
        return entry.domain_proven

    @admin.display(description="proven")
    def proven(self, entry: Entry) -> str:
        # An http proof on another port than 443, or over plain http, proves only that host:port.
        return entry.proven or "-"

    @admin.display(description="open flags", ordering="flag_count")
    def open_flags(self, entry: Entry) -> int:
        return getattr(entry, "flag_count", 0)

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        extra = {
            "review_queue_url": reverse("admin:registry_entry_review"),
            "pending_count": selectors.review_queue().count() if is_curator(request) else None,
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra)

    # --- urls

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("review/", wrap(self.review_view), name="registry_entry_review"),
            path("<path:object_id>/decide/", wrap(self.decide_view), name="registry_entry_decide"),
            path("<path:object_id>/diff/", wrap(self.diff_view), name="registry_entry_diff"),
            *super().get_urls(),
        ]

    def review_view(self, request: HttpRequest) -> HttpResponse:
        """The review queue: pending entries, oldest first."""
        if not is_curator(request):
            raise PermissionDenied
        url = reverse("admin:registry_entry_changelist")
        return HttpResponseRedirect(f"{url}?state={State.PENDING}")

    def _visible(self, request: HttpRequest, object_id: str) -> Entry:
        entry = self.get_object(request, object_id)
        if entry is None or not self.has_view_permission(request, entry):
            raise Http404("No such object.")
        return entry

    # --- an entry's page

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        entry = self._visible(request, object_id)
        if request.method not in ("GET", "HEAD"):
            raise PermissionDenied  # an entry changes by decisions only (the form below posts to decide/)
        role = selectors.role_of(request.user, entry)
        versions = list(CardVersion.objects.filter(entry=entry).order_by("-number").defer("raw"))
        current = entry.current_version
        approved = entry.approved_version
        diff = ""
        if current is not None and approved is not None and current.pk != approved.pk:
            diff = card_diff(approved, current)
        elif current is not None and len(versions) > 1:
            diff = card_diff(versions[1], current)
        context = {
            **self.admin_site.each_context(request),
            "title": str(entry),
            "subtitle": None,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "original": entry,
            "entry": entry,
            "has_view_permission": True,
            "role": role,
            "targets": services.allowed_targets(entry, role) if role else [],
            "reason_required": [str(s) for s in services.REASON_REQUIRED],
            "decide_url": reverse("admin:registry_entry_decide", args=[entry.pk]),
            "diff_url": reverse("admin:registry_entry_diff", args=[entry.pk]),
            "versions": versions,
            "current": current,
            "approved": approved,
            "diff": diff,
            "card": pretty(current.document) if current else "",
            "decisions": list(selectors.decisions_of(entry)[:100]),
            "checks": selectors.checks_of(entry, limit=20),
            "uptime": selectors.uptimes(entry),
            "flags": list(entry.flags.select_related("user", "resolved_by").order_by("-created_at")[:50]),
            # Who flagged an entry is the curators' to know, not the flagged tenant's.
            "show_flagger": _sees_flaggers(request),
            "page_url": f"/registry/{entry.pk}/",
            "host_flags": card_hosts.host_flags(entry, current),
            "conformance": selectors.conformance_of(entry),
            "attestation": _attestation(entry),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/registry/entry/detail.html", context)

    def diff_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Any two versions side by side: ?a=<number>&b=<number>."""
        entry = self._visible(request, object_id)
        try:
            a, b = int(request.GET.get("a", "")), int(request.GET.get("b", ""))
        except ValueError:
            a = b = 0
        old = CardVersion.objects.filter(entry=entry, number=a).first()
        new = CardVersion.objects.filter(entry=entry, number=b).first()
        context = {
            **self.admin_site.each_context(request),
            "title": f"{entry}: versions {a} and {b}",
            "opts": self.opts,
            "entry": entry,
            "diff": card_diff(old, new) if old and new else "",
            "missing": not (old and new),
        }
        return TemplateResponse(request, "admin/registry/entry/diff.html", context)

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        entry = self._visible(request, object_id)
        role = selectors.role_of(request.user, entry)
        if role is None:
            raise PermissionDenied
        try:
            services.entry_decide(
                entry=entry,
                to=request.POST.get("to", ""),
                actor=request.user,
                role=role,
                reason=request.POST.get("reason", ""),
                version_hash=request.POST.get("version_hash", ""),
            )
        except services.RegistryError as exc:
            self.message_user(request, f"Not done: {exc}", level=messages.ERROR)
        else:
            entry.refresh_from_db()
            self.message_user(request, f"{entry} is {entry.get_state_display().lower()} now.", level=messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:registry_entry_change", args=[entry.pk]))


def _sees_flaggers(request: HttpRequest) -> bool:
    return is_curator(request) or is_superuser(request)


@admin.register(Flag)
class FlagAdmin(TenantScopedAdmin):
    tenant_field = "entry__tenant"
    list_display = ["entry_link", "user", "reason_clipped", "created_at", "resolved_at", "resolved_by"]
    list_filter = [("resolved_at", admin.EmptyFieldListFilter)]
    list_select_related = ["entry", "user", "resolved_by"]
    search_fields = ["reason", "entry__name"]
    ordering = ["resolved_at", "-created_at"]
    actions = ["resolve"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return Flag.objects.all() if is_curator(request) else super().get_queryset(request)

    # Who flagged an entry is shown to curators only: the flagged tenant's members see the
    # reason, never the flagger (who might be a competitor, or a user they could retaliate against).
    def get_list_display(self, request: HttpRequest) -> Any:
        shown = list(super().get_list_display(request))
        return shown if _sees_flaggers(request) else [f for f in shown if f != "user"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_fields(request, obj))
        return fields if _sees_flaggers(request) else [f for f in fields if f != "user"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_curator(request) or super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_curator(request) or super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> dict:
        return super().get_actions(request) if is_curator(request) else {}

    @admin.display(description="entry")
    def entry_link(self, flag: Flag) -> str:
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:registry_entry_change", args=[flag.entry_id]), str(flag.entry)
        )

    @admin.display(description="reason")
    def reason_clipped(self, flag: Flag) -> str:
        return flag.reason if len(flag.reason) <= 120 else flag.reason[:119] + "…"

    @admin.action(description="Mark the selected flags resolved")
    def resolve(self, request: HttpRequest, queryset: QuerySet) -> None:
        if not is_curator(request):
            raise PermissionDenied
        done = 0
        for flag in queryset.filter(resolved_at__isnull=True):
            services.flag_resolve(flag=flag, user=request.user, resolution=f"resolved by {request.user}")
            done += 1
        self.message_user(request, f"{done} flag(s) resolved.", level=messages.SUCCESS)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """The registry API's tokens, for superusers to revoke: only a prefix and the dates are
    kept to show (the token itself was shown once, to its user)."""

    list_display = ["prefix", "user", "created_at", "expires_at"]
    list_select_related = ["user"]
    search_fields = ["prefix", "user__username"]
    ordering = ["-created_at"]
    readonly_fields = ["user", "prefix", "created_at", "expires_at"]
    exclude = ["digest"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made by POST /api/registry/token/ or `manage.py registry_token`

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_superuser(request)


def _attestation(entry: Entry) -> dict[str, Any] | None:
    found = selectors.attestation_of(entry)
    if found is None:
        return None
    status = attestations.status_of(found)
    return {"attestation": found, "state": status.state, "reason": status.reason}
