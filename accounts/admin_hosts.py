"""An agent's host names in its admin page (docs/tenancy.md, "Agents at their own host
names"): a superuser's new name is bound at once (the operator's binding); an owner's is a
claim, shown with the token to publish, and bound by the agent list's action "Verify pending
host names", which looks for the token by DNS, then over HTTP (network I/O: never inside the
page's transaction). Every change goes through accounts.host_services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from .admin_scoping import TenantScopedTabularInline, is_superuser
from .host_services import host_bind, host_check, host_claim, host_instructions, host_unbind, host_verify
from .models import Agent, AgentHost, HostProof, Role
from .services import AccountError


class AgentHostForm(forms.ModelForm):
    # An owner's new name is a claim; the inline makes a superuser's form the operator's binding.
    claim = True

    class Meta:
        model = AgentHost
        fields = ("host", "card_version")

    def clean_host(self) -> str:
        if self.instance.pk:
            return self.instance.host
        try:
            return host_check(self.cleaned_data.get("host") or "", claim=self.claim)
        except AccountError as exc:
            raise forms.ValidationError(str(exc)) from None


class AgentHostInline(TenantScopedTabularInline):
    model = AgentHost
    form = AgentHostForm
    tenant_field = "agent__tenant"
    add_role = delete_role = Role.OWNER
    extra = 0
    fields = ("host", "card_version", "state")
    readonly_fields = ("state",)
    verbose_name = "host name"
    verbose_name_plural = "host names (the agent's card and endpoints at the root of each; docs/tenancy.md)"

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        kwargs["form"] = type("AgentHostForm", (AgentHostForm,), {"claim": not is_superuser(request)})
        return super().get_formset(request, obj, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # A name is bound or dropped, not renamed; its root's card follows the same service.
        return (
            ("host", "card_version", "state")
            if obj is not None and not self.has_add_permission(request, obj)
            else ("state",)
        )

    @admin.display(description="State")
    def state(self, binding: AgentHost) -> str:
        if not binding.pk:
            return "bound at once (superuser), else a claim to prove"
        if binding.is_bound:
            return f"bound ({HostProof(binding.proof).label.lower()}) at {binding.proven_at:%Y-%m-%d %H:%M}"
        steps = host_instructions(binding)
        shown = ("dns_name", "dns_value", "http_url", "http_content")
        publish = format_html_join("", "<br>{}: <code>{}</code>", ((k, v) for k, v in steps.items() if k in shown))
        return format_html("pending: publish the token, then “Verify pending host names”{}", publish)


def save_hosts(request: HttpRequest, agent: Agent, formset: Any) -> None:
    """The inline's changes, through the services: a superuser binds, an owner claims."""
    operator = is_superuser(request)
    # What the admin's history reads of a saved formset.
    formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
    for form in formset.deleted_forms:
        if form.instance.pk:
            formset.deleted_objects.append(form.instance)
            host_unbind(binding=form.instance)
    for form in formset.forms:
        if form in formset.deleted_forms or not form.has_changed() or not form.cleaned_data:
            continue
        host, card_version = form.cleaned_data["host"], form.cleaned_data.get("card_version") or ""
        try:
            if operator:
                saved = host_bind(agent=agent, host=host, card_version=card_version, by=request.user)
            else:
                saved = host_claim(agent=agent, host=host, card_version=card_version, by=request.user)
            if form.instance.pk:
                formset.changed_objects.append((saved, form.changed_data))
            else:
                formset.new_objects.append(saved)
        except AccountError as exc:
            messages.error(request, f"{host}: {exc}")


def verify_pending_hosts(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
    """Look for each pending claim's token (DNS, then HTTP) on the selected agents' names."""
    agents = modeladmin.may_in(request, queryset, Role.OWNER)
    claims = AgentHost.objects.filter(agent__in=agents, proven_at__isnull=True).select_related("agent")
    if not claims:
        modeladmin.message_user(request, "No pending host names among the selected agents.", messages.INFO)
    for claim in claims:
        details = []
        for method in (HostProof.DNS, HostProof.HTTP):
            try:
                outcome = host_verify(binding=claim, method=method)
            except AccountError as exc:
                details.append(str(exc))
                break
            if outcome.ok:
                modeladmin.message_user(request, f"{claim.host} is bound to {claim.agent}: {outcome.detail}")
                break
            details.append(outcome.detail)
        else:
            modeladmin.message_user(request, f"{claim.host} is not proven yet: {'; '.join(details)}", messages.WARNING)


verify_pending_hosts.short_description = "Verify pending host names (DNS TXT or well-known file)"  # type: ignore[attr-defined]
