"""Tenants, their agents, members, API keys and issuers in the admin, scoped by tenant and
role (accounts.admin_scoping): viewers read; owners manage keys, members, the issuer and
their agents; only superusers create tenants or change a tenant's limits."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import User
from django.db import models
from django.db.models import Model, Prefetch, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from . import agent_kinds
from .admin_hosts import AgentHostInline, save_hosts, verify_pending_hosts
from .admin_scoping import TenantScopedAdmin, is_superuser, tenant_ids_with
from .agent_services import (
    ALL,
    SECRET,
    SETTABLE,
    AgentInvalid,
    Checked,
    agent_write,
    check,
    tenant_executors_check,
    tenant_executors_set,
)
from .models import Agent, AgentHost, ApiKey, Membership, MembershipInvitation, OidcIssuer, Role, Tenant
from .selectors import executors_for
from .services import (
    AccountError,
    agent_secret_generate,
    api_key_check,
    api_key_create,
    api_key_expiry,
    api_key_revoke,
    made_by_user,
    management_role_check,
    member_remove,
    membership_invite,
    membership_invite_check,
    membership_revoke,
)


class TenantForm(forms.ModelForm):
    """A tenant's page; the installed executors its agents may use are the operator's grant
    (accounts.agent_services.tenant_executors_set)."""

    allowed_executors = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Installed executors allowed",
        help_text="Executors installed distributions add (plugins) this tenant's agents may use; every tenant "
        "may use the built-in ones.",
    )

    class Meta:
        model = Tenant
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "allowed_executors" in self.fields:
            known = agent_kinds.kinds()
            granted = list(self.instance.allowed_executors or []) if self.instance.pk else []
            names = sorted({n for n, kind in known.items() if not kind.built_in} | set(granted))
            field = self.fields["allowed_executors"]
            assert isinstance(field, forms.ChoiceField)
            field.choices = [
                (n, f"{n}: {known[n].description}" if n in known else f"{n} (not installed)") for n in names
            ]

    def clean_allowed_executors(self) -> list[str]:
        chosen = list(self.cleaned_data.get("allowed_executors") or [])
        try:
            return tenant_executors_check(tenant=self.instance if self.instance.pk else None, executors=chosen)
        except AccountError as exc:
            raise forms.ValidationError(str(exc)) from exc


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_field = "pk"
    # Members read their tenant: its limits and the executors it may use are the site's to set,
    # not the tenant's.
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    form = TenantForm

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        granted = form.cleaned_data.get("allowed_executors", [])
        if change:  # the grant is written by its service (and announced), the rest as Django does
            obj.allowed_executors = Tenant.objects.values_list("allowed_executors", flat=True).get(pk=obj.pk)
        else:
            obj.allowed_executors = []
        super().save_model(request, obj, form, change)
        if granted != obj.allowed_executors:
            tenant_executors_set(tenant=obj, executors=granted)


class AgentForm(forms.ModelForm):
    """An agent's page, checked and saved by the one agent service (accounts.agent_services),
    which create_agent and the tenant API use too: the same input, the same answer. The
    executor is one its tenant may use; every problem shows under its field."""

    # The card's links: one typed without a scheme is https (Django 6's default; 5.2 warns).
    provider_url = forms.URLField(
        required=False, max_length=500, assume_scheme="https", help_text="Empty: this server's URL."
    )
    icon_url = forms.URLField(required=False, max_length=500, assume_scheme="https")
    documentation_url = forms.URLField(required=False, max_length=500, assume_scheme="https")
    # The secret is written, never read back: the page says only whether one is set.
    secret_action = forms.ChoiceField(
        label="Secret",
        choices=[
            ("keep", "keep as it is"),
            ("generate", "generate a new one (shown once)"),
            ("set", "set the one typed below"),
            ("clear", "remove it"),
        ],
        initial="keep",
        required=False,
        help_text="The executor's secret: a webhook agent signs its requests with it (it needs one), a fronted "
        "agent sends it to its upstream. Stored encrypted; never shown again.",
    )
    new_secret = forms.CharField(
        label="New secret", required=False, strip=False, widget=forms.PasswordInput(render_value=False)
    )

    class Meta:
        model = Agent
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.secret: str | None = None
        self.checked: Checked | None = None
        for name in ("name", "description"):
            if name in self.fields:  # the service fills them (a fronted agent's upstream's, or the slug)
                self.fields[name].required = False
                self.fields[name].help_text = "Empty: a fronted agent's upstream's, else from the slug."
        known = agent_kinds.kinds()
        tenant = self.instance.tenant if self.instance.pk else None
        current = self.instance.executor if self.instance.pk else ""
        # A tenant's page offers the executors that tenant may use; a new agent's tenant is not
        # chosen yet: every installed one is offered, and the service refuses what is not allowed.
        usable = executors_for(tenant) if tenant is not None else sorted(known)
        names = sorted(set(usable) | ({current} if current else set()))
        if "executor" in self.fields:
            self.fields["executor"] = _ExecutorField(
                choices=[(n, _executor_label(n, known, usable)) for n in names],
                help_text="The agent's logic: the built-in executors, and the installed ones its tenant may use.",
            )
        if "settings" in self.fields:
            schemas = {n: known[n].schema for n in usable if n in known}
            shown = {current: schemas[current]} if current in schemas else schemas
            # The admin prints help text as HTML: the schemas (a plugin's too) go in escaped.
            self.fields["settings"].help_text = format_html(
                "Executor settings, checked against the executor's JSON Schema:<pre>{}</pre>",
                json.dumps(shown, indent=1)[:4000],
            )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        action, typed = cleaned.get("secret_action") or "keep", cleaned.get("new_secret") or ""
        if action == "set" and not typed:
            self.add_error("new_secret", "Type the secret to set.")
        elif action != "set" and typed:
            self.add_error("new_secret", "Choose “set the one typed below” to use it.")
        elif action == "generate":
            self.secret = agent_secret_generate()
        elif action == "set":
            self.secret = typed
        elif action == "clear":
            self.secret = ""
        return cleaned

    def _post_clean(self) -> None:
        # Instead of the model's own validation: the service checks every field, the executor,
        # its settings and its secret, as it does for create_agent and the API.
        tenant = self.instance.tenant if self.instance.pk else self.cleaned_data.get("tenant")
        slug = self.cleaned_data.get("slug") if "slug" in self.fields else self.instance.slug
        if tenant is None or not slug or "new_secret" in self.errors:
            return
        values = {f: self.cleaned_data[f] for f in SETTABLE if f in self.cleaned_data and f in self.fields}
        try:
            self.checked = check(
                tenant=tenant,
                slug=slug,
                values=values,
                secret=self.secret,
                agent=self.instance if self.instance.pk else None,
            )
        except AgentInvalid as exc:
            for field, messages in exc.problems.items():
                target = self._field_for(field)
                if target in self.errors:  # refused by the form already; the service saw the stored value
                    continue
                for message in messages:
                    self.add_error(target, message if target or field == ALL else f"{field}: {message}")

    def _field_for(self, field: str) -> str | None:
        if field == SECRET:
            return "new_secret" if self.cleaned_data.get("secret_action") == "set" else "secret_action"
        return field if field in self.fields else None

    def save(self, commit: bool = True) -> Agent:
        if self.errors or self.checked is None:
            raise ValueError("The agent could not be saved because its data didn't validate.")
        self.save_m2m = lambda: None  # type: ignore[method-assign]  # an agent has no many-to-many fields
        return self.write() if commit else self.instance

    def write(self) -> Agent:
        """Store what the service checked (no second check: a fronted agent's card is not
        fetched twice) and bring the form's instance up to it."""
        assert self.checked is not None
        tenant = self.instance.tenant if self.instance.pk else self.cleaned_data["tenant"]
        saved = agent_write(tenant=tenant, checked=self.checked, agent=self.instance if self.instance.pk else None)
        for f in Agent._meta.concrete_fields:
            setattr(self.instance, f.attname, getattr(saved, f.attname))
        self.instance.tenant = saved.tenant
        self.instance._state.adding = False
        return self.instance


class _ExecutorField(forms.ChoiceField):
    """The executors offered; any other name goes to the service, whose refusal says why
    (not installed, or not allowed for the tenant), as it does for create_agent and the API."""

    def valid_value(self, value: Any) -> bool:
        return True


def _executor_label(name: str, known: dict[str, agent_kinds.Kind], usable: list[str]) -> str:
    if name not in known:
        return f"{name} (not installed)"
    if name not in usable:
        return f"{name} (not allowed for this tenant)"
    return f"{name}: {known[name].description}"


@admin.register(Agent)
class AgentAdmin(TenantScopedAdmin):
    tenant_field = "tenant"
    change_role = Role.OWNER  # adding and removing agents stays with superusers
    list_display = ("__str__", "name", "executor", "is_public", "is_active", "updated_at")
    list_filter = ("tenant", "is_public", "is_active", "executor")
    list_select_related = ("tenant",)
    search_fields = ("slug", "name", "tenant__slug")
    form = AgentForm
    inlines = (AgentHostInline,)
    actions = (verify_pending_hosts,)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        if formset.model is AgentHost:
            save_hosts(request, form.instance, formset)
        else:
            super().save_formset(request, form, formset, change)

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> Any:
        # Tasks point at (agent, tenant) together: an agent cannot move to another tenant.
        readonly = (*super().get_readonly_fields(request, obj), "secret_is_set")
        return (*readonly, "tenant") if obj is not None else readonly

    @admin.display(description="Secret set", boolean=True)
    def secret_is_set(self, obj: Agent) -> bool:
        return bool(obj.secret_sealed)

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        form.write()  # through the service, with the secret sealed, in one write
        if form.secret and form.cleaned_data.get("secret_action") == "generate":
            self.message_user(
                request, f"Secret generated. Copy it now, it is not shown again: {form.secret}", messages.WARNING
            )


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    tenant_field = "tenant"
    change_role = delete_role = Role.OWNER
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("tenant", "role")
    list_select_related = ("tenant", "user")
    search_fields = ("user__username", "tenant__slug")

    def get_form(self, request: HttpRequest, obj: Membership | None = None, change: bool = False, **kwargs: Any) -> Any:
        kwargs["form"] = MembershipChangeForm
        return super().get_form(request, obj, change, **kwargs)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a member is invited (the invitations' page) and becomes one by accepting

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # Members cannot leave a tenant without an owner: only a superuser could repair it.
        if isinstance(obj, Membership) and not is_superuser(request) and _is_last_owner(obj):
            return False
        return super().has_delete_permission(request, obj)

    def get_fields(self, request: HttpRequest, obj: Membership | None = None) -> Any:
        return ("tenant", "user", "role", "created_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> Any:
        # Only the role changes: another user or tenant is another membership.
        return ("tenant", "user", "created_at")

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        # Through the service: the user's last membership ending takes back the staff it gave.
        member_remove(membership=obj, last_owner_may_go=is_superuser(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for membership in queryset:
            self.delete_model(request, membership)


def _is_last_owner(membership: Membership) -> bool:
    others = Membership.objects.filter(tenant_id=membership.tenant_id, role=Role.OWNER).exclude(pk=membership.pk)
    return membership.role == Role.OWNER and not others.exists()


class MembershipChangeForm(forms.ModelForm):
    class Meta:
        model = Membership
        fields = ("role",)

    def clean_role(self) -> str:
        role = self.cleaned_data["role"]
        if role != Role.OWNER and _is_last_owner(Membership.objects.get(pk=self.instance.pk)):
            raise forms.ValidationError("The tenant's last owner stays an owner: make another member owner first.")
        return role


class InvitationForm(forms.ModelForm):
    # A name, not a list of every user of the site: members of one tenant must not learn
    # who else has an account (the answer is the same for any name).
    username = forms.CharField(
        max_length=150, help_text="Whom to invite: the username they have (or will have) on this server."
    )

    class Meta:
        model = MembershipInvitation
        fields = ("tenant", "username", "role")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        username, tenant, role = cleaned.get("username"), cleaned.get("tenant"), cleaned.get("role")
        if username and tenant is not None and role:
            try:
                cleaned["username"] = membership_invite_check(tenant=tenant, username=username, role=role)
            except AccountError as exc:
                self.add_error("username", str(exc).capitalize() + ".")
        return cleaned

    def _post_clean(self) -> None:
        pass  # membership_invite makes the row (its token, its expiry); the form only checks


@admin.register(MembershipInvitation)
class MembershipInvitationAdmin(TenantScopedAdmin):
    """The tenant's invitations: its owners invite (the link to pass on is shown once) and
    revoke; the invited user answers at /invitations/ (accounts.invitation_views)."""

    tenant_field = "tenant"
    view_role = add_role = Role.OWNER
    list_display = ("username", "tenant", "role", "invited_as", "created_at", "expires_at", "answer")
    list_filter = ("tenant", "answer")
    list_select_related = ("tenant",)
    search_fields = ("username", "tenant__slug")
    actions = ("revoke",)
    form = InvitationForm

    def get_fields(self, request: HttpRequest, obj: MembershipInvitation | None = None) -> Any:
        if obj is None:
            return ("tenant", "username", "role")
        return ("tenant", "username", "role", "invited_as", "created_at", "expires_at", "answer", "answered_at")

    def get_readonly_fields(self, request: HttpRequest, obj: MembershipInvitation | None = None) -> Any:
        return () if obj is None else self.get_fields(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # an invitation is answered or revoked, never edited: invite again instead

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # revoked, never deleted: the action below

    def save_model(self, request: HttpRequest, obj: MembershipInvitation, form: Any, change: bool) -> None:
        inviter = request.user if isinstance(request.user, User) else None
        wanted = form.cleaned_data
        made, token = membership_invite(
            tenant=wanted["tenant"], username=wanted["username"], role=wanted["role"], invited_by=inviter
        )
        obj.__dict__.update({k: v for k, v in made.__dict__.items() if k != "_state"})
        obj._state.adding = False
        link = request.build_absolute_uri(reverse("invitations:answer", args=[token]))
        self.message_user(
            request,
            f"Invited. {obj.username} accepts, signed in, at {link} (or among their invitations at "
            f"{request.build_absolute_uri(reverse('invitations:list'))}). Copy the link now, it is not shown again.",
            messages.WARNING,
        )

    @admin.action(description="Revoke the selected pending invitations")
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        revoked = sum(
            membership_revoke(invitation=invitation) for invitation in self.may_in(request, queryset, Role.OWNER)
        )
        self.message_user(request, f"Revoked {revoked} invitation{'s' if revoked != 1 else ''}.")


@admin.register(OidcIssuer)
class OidcIssuerAdmin(TenantScopedAdmin):
    tenant_field = "tenant"
    add_role = change_role = delete_role = Role.OWNER
    list_display = ("tenant", "issuer", "audience", "is_active", "updated_at")
    list_select_related = ("tenant",)
    # Issuers and their keys are served over TLS; a URL typed without a scheme means https.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def get_readonly_fields(self, request: HttpRequest, obj: OidcIssuer | None = None) -> Any:
        return ("tenant",) if obj is not None else ()


class ApiKeyAddForm(forms.ModelForm):
    """A new key's terms; accounts.services makes it (and says what it will not make)."""

    principal = forms.CharField(
        required=False,
        max_length=150,
        help_text="Who the caller is: its tasks belong to this principal; keys naming the same principal share "
        "their tasks. Empty: the key is its own principal (key:<prefix>).",
    )

    class Meta:
        model = ApiKey
        fields = ("tenant", "name", "principal", "agents", "expires_at", "management_role")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant = cleaned.get("tenant")
        if tenant is not None:
            # The terms api_key_create refuses, checked by the same service so that they show
            # on the form instead of failing the save.
            try:
                cleaned["principal"] = (
                    api_key_check(
                        tenant=tenant,
                        principal=cleaned.get("principal") or None,
                        agents=cleaned.get("agents") or [],
                        expires_at=cleaned.get("expires_at"),
                        management_role=cleaned.get("management_role") or "",
                    )
                    or ""
                )
            except AccountError as exc:
                raise forms.ValidationError(str(exc)) from exc
        return cleaned

    def _post_clean(self) -> None:
        # The model's checks would refuse the blank principal that api_key_create fills in;
        # the key is validated above and made by the service.
        pass


class ApiKeyChangeForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = ("name", "agents", "expires_at")

    def clean_agents(self) -> Any:
        agents = self.cleaned_data["agents"]
        foreign = [str(agent) for agent in agents if agent.tenant_id != self.instance.tenant_id]
        if foreign:
            raise forms.ValidationError(f"Not agents of {self.instance.tenant}: {', '.join(foreign)}.")
        try:
            management_role_check(self.instance.management_role, limited=bool(agents))
        except AccountError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return agents

    def clean_expires_at(self) -> Any:
        expires_at = self.cleaned_data["expires_at"]
        if "expires_at" not in self.changed_data:
            return expires_at  # a key made before expiries were required keeps its own
        if expires_at is None:
            raise forms.ValidationError("A key's expiry can be changed, not removed; to end the key now, revoke it.")
        try:
            return api_key_expiry(expires_at=expires_at)
        except AccountError as exc:
            raise forms.ValidationError(str(exc)) from exc


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    """Adding a key here generates its secret, shows it once, and stores only its hash.
    Keys are revoked, never deleted here: their tasks and log keep pointing at them."""

    tenant_field = "tenant"
    add_role = change_role = Role.OWNER
    list_display = (
        "name",
        "tenant",
        "principal",
        "prefix",
        "agent_list",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("tenant",)
    list_select_related = ("tenant",)
    search_fields = ("name", "principal", "prefix", "made_by")
    actions = ("revoke",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiKey]:
        # The agents column: one query for the page, not one per key.
        return super().get_queryset(request).prefetch_related(Prefetch("agents", queryset=Agent.objects.only("slug")))

    def get_form(self, request: HttpRequest, obj: ApiKey | None = None, change: bool = False, **kwargs: Any) -> Any:
        kwargs["form"] = ApiKeyAddForm if obj is None else ApiKeyChangeForm
        return super().get_form(request, obj, change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        if obj is None:
            return ("tenant", "name", "principal", "agents", "expires_at", "management_role")
        return (
            "tenant",
            "name",
            "principal",
            "prefix",
            "management_role",
            "agents",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "made_by",
        )

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> Any:
        if obj is None:
            return ()
        # Another principal would hand the key's tasks to someone else; revoke and make a new key.
        return (
            "tenant",
            "principal",
            "prefix",
            "management_role",
            "created_at",
            "last_used_at",
            "revoked_at",
            "made_by",
        )

    @admin.display(description="agents")
    def agent_list(self, obj: ApiKey) -> str:
        return ", ".join(agent.slug for agent in obj.agents.all()) or "all"

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            return super().save_model(request, obj, form, change)
        data = form.cleaned_data
        key, plaintext = api_key_create(
            tenant=data["tenant"],
            name=data["name"],
            principal=data["principal"] or None,
            agents=data["agents"],
            expires_at=data["expires_at"],
            management_role=data.get("management_role") or "",
            made_by=made_by_user(request.user.get_username()),
        )
        # The admin logs the addition and links to the object through these.
        for field in (
            "pk",
            "tenant",
            "name",
            "principal",
            "prefix",
            "key_hash",
            "created_at",
            "expires_at",
            "management_role",
            "made_by",
        ):
            setattr(obj, field, getattr(key, field))
        self.message_user(
            request, f"API key created. Copy it now, it is not shown again: {plaintext}", messages.WARNING
        )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # A new key's agents were set by api_key_create.
        if change:
            super().save_related(request, form, formsets, change)

    @admin.action(description="Revoke the selected keys", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        mine = self.may_in(request, queryset, Role.OWNER)
        revoked = 0
        # Through the service, one by one: each revocation is announced to every process.
        for key in mine.filter(revoked_at__isnull=True):
            if api_key_revoke(key=key):
                self.log_change(request, key, "Revoked.")
                revoked += 1
        skipped = queryset.count() - mine.count()
        text = f"Revoked {revoked} key(s)."
        if skipped:
            text += f" {skipped} not yours to revoke (you are not an owner of their tenant)."
        self.message_user(request, text, messages.SUCCESS if revoked else messages.WARNING)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return is_superuser(request) or bool(tenant_ids_with(request, Role.OWNER))
