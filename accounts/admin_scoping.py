"""The admin, scoped by tenant and role.

Every admin page of a tenant's data derives from `TenantScopedAdmin` (or, for inlines,
`TenantScopedInline`) and names the path from its model to the tenant. Superusers see and do
everything Django lets them. A staff member sees only the tenants they belong to, and may do
there what their role allows (`Role`, each including the one below it); Django's model
permissions play no part for them, so a page added later is scoped without granting anything.

A member's roles are read once per request (one query), however many checks a page makes.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.admin.views.main import ERROR_FLAG
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.forms import ModelChoiceField, ModelMultipleChoiceField
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect

from .models import Membership, Role

# Each role may do what the roles below it may.
_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.OWNER: 2}


def member_roles(request: HttpRequest) -> dict[int, str]:
    """tenant id -> role of the requesting user (none for a user who may not use the admin)."""
    cached = getattr(request, "_tenant_roles", None)
    if cached is None:
        user = request.user
        if user.is_authenticated and user.is_active and user.is_staff:
            cached = dict(Membership.objects.filter(user_id=user.pk).values_list("tenant_id", "role"))
        else:
            cached = {}
        request._tenant_roles = cached  # type: ignore[attr-defined]
    return cached


def tenant_ids_with(request: HttpRequest, role: str | None) -> list[int]:
    """The tenants in which the requesting member has `role` or a higher one."""
    if role is None:
        return []
    return sorted(tenant for tenant, held in member_roles(request).items() if _RANK[Role(held)] >= _RANK[Role(role)])


def is_superuser(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_superuser)


class _Scoping:
    """What the page and its inlines share: the tenant path, the roles, and the scoping of
    querysets and form choices."""

    admin_site: admin.AdminSite
    model: type[Model]

    # The path from the model to its tenant ("tenant", "task__tenant"; "pk" for Tenant itself).
    tenant_field: str
    # The least role a member needs for each; None: no member may (superusers still may,
    # unless the page forbids it to everyone).
    view_role: str | None = Role.VIEWER
    add_role: str | None = None
    change_role: str | None = None
    delete_role: str | None = None

    def tenant_id_of(self, obj: Model) -> int:
        *hops, last = self.tenant_field.split("__")
        for hop in hops:
            obj = getattr(obj, hop)
        return obj.pk if last == "pk" else getattr(obj, f"{last}_id")

    def scoped(self, queryset: QuerySet, tenant_ids: list[int]) -> QuerySet:
        return queryset.filter(**{f"{self.tenant_field}__in": tenant_ids})

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)  # type: ignore[misc]
        if is_superuser(request):
            return queryset
        return self.scoped(queryset, tenant_ids_with(request, self.view_role))

    def member_may(self, request: HttpRequest, role: str | None, tenant_id: int | None = None) -> bool:
        """Whether the member has `role` in the tenant (or, with none given, in some tenant:
        whether the page or button is offered at all)."""
        allowed = tenant_ids_with(request, role)
        return tenant_id in allowed if tenant_id is not None else bool(allowed)

    def _form_role(self) -> str | None:
        return self.change_role or self.add_role

    def _scoped_choices(self, request: HttpRequest, model: type[Model], queryset: QuerySet | None) -> QuerySet:
        """The objects a form may point at: those of the tenants where the member may edit
        this page's objects. A relation to anything the admin does not scope offers nothing."""
        related_admin = self.admin_site._registry.get(model)
        base = queryset if queryset is not None else model._default_manager.all()
        if not isinstance(related_admin, _Scoping):
            return base.none()
        return related_admin.scoped(base, tenant_ids_with(request, self._form_role()))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> ModelChoiceField | None:
        if not is_superuser(request):
            kwargs["queryset"] = self._scoped_choices(request, db_field.related_model, kwargs.get("queryset"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]

    def formfield_for_manytomany(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> ModelMultipleChoiceField | None:
        if not is_superuser(request):
            kwargs["queryset"] = self._scoped_choices(request, db_field.related_model, kwargs.get("queryset"))
        return super().formfield_for_manytomany(db_field, request, **kwargs)  # type: ignore[misc]


class ScopedRelatedFieldListFilter(admin.RelatedFieldListFilter):
    """A filter by a related object that offers only the member's: Django's lists every row
    of the related table (every tenant, every agent)."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: admin.ModelAdmin) -> Any:
        if is_superuser(request):
            return super().field_choices(field, request, model_admin)
        related_admin = model_admin.admin_site._registry.get(field.related_model)
        if not isinstance(related_admin, _Scoping):
            return []
        queryset = related_admin.get_queryset(request)
        if isinstance(related_admin.list_select_related, (list, tuple)):  # type: ignore[attr-defined]
            queryset = queryset.select_related(*related_admin.list_select_related)  # type: ignore[attr-defined]
        ordering = self.field_admin_ordering(field, request, model_admin)
        if ordering:
            queryset = queryset.order_by(*ordering)
        return [(obj.pk, str(obj)) for obj in queryset]


class TenantScopedAdmin(_Scoping, admin.ModelAdmin):
    """The base of every admin page of a tenant's data (see the module's docstring)."""

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Postgres refuses NUL in any text it compares: a filter or search holding one would
        # fail the query. It is an incorrect lookup, answered as Django answers those.
        if any("\x00" in key or "\x00" in value for key, values in request.GET.lists() for value in values):
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")
        return super().changelist_view(request, extra_context)

    def response_action(
        self, request: HttpRequest, queryset: QuerySet, *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        # Django filters the list by the selected primary keys: a value no key can be (a word
        # for a UUID, a number past the column's range) would fail that query, a 500. It selects
        # nothing, and Django says that nothing was selected.
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        usable = [value for value in selected if _is_key(self.model, value)]
        if usable != selected:
            post = request.POST.copy()
            post.setlist(helpers.ACTION_CHECKBOX_NAME, usable)
            request.POST = post  # type: ignore[assignment]
        return super().response_action(request, queryset, *args, **kwargs)

    def has_module_permission(self, request: HttpRequest) -> bool:
        if is_superuser(request):
            return super().has_module_permission(request)
        return self.member_may(request, self.view_role)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._may(request, "view", self.view_role, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._may(request, "add", self.add_role, None)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._may(request, "change", self.change_role, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._may(request, "delete", self.delete_role, obj)

    def _may(self, request: HttpRequest, action: str, role: str | None, obj: Model | None) -> bool:
        if is_superuser(request):
            django_check = getattr(super(), f"has_{action}_permission")
            return django_check(request) if action == "add" else django_check(request, obj)
        return self.member_may(request, role, self.tenant_id_of(obj) if obj is not None else None)

    def may_in(self, request: HttpRequest, queryset: QuerySet, role: str) -> QuerySet:
        """The part of `queryset` in which the user has `role`: what a custom action may
        touch, when a member holds different roles in different tenants."""
        if is_superuser(request):
            return queryset
        return self.scoped(queryset, tenant_ids_with(request, role))

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        # Another tenant's object answers as one that does not exist, so its existence is not
        # revealed: 404, where Django would redirect to the index with "doesn't exist".
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            raise Http404("No such object.")
        return obj

    def get_list_filter(self, request: HttpRequest) -> Any:
        return [_scoped_filter(self.model, entry) for entry in super().get_list_filter(request)]


def _is_key(model: type[Model], value: str) -> bool:
    """Whether `value` can be a primary key of `model` (its type, and its column's range)."""
    field = model._meta.pk
    assert field is not None
    try:
        field.run_validators(field.to_python(value))
    except (ValidationError, ValueError, TypeError, OverflowError):
        return False
    return True


def _scoped_filter(model: type[Model], entry: Any) -> Any:
    if not isinstance(entry, str):
        return entry
    field = get_fields_from_path(model, entry)[-1]
    return (entry, ScopedRelatedFieldListFilter) if field.is_relation else entry


class TenantScopedInline(_Scoping, admin.options.InlineModelAdmin):
    """Rows shown in a scoped page: the member's role in the parent object's tenant decides."""

    def _may(self, request: HttpRequest, action: str, role: str | None, obj: Model | None) -> bool:
        if is_superuser(request):
            django_check = getattr(super(), f"has_{action}_permission")
            return django_check(request, obj)
        parent_admin = self.admin_site._registry.get(self.parent_model)
        if obj is not None and isinstance(parent_admin, _Scoping):
            return self.member_may(request, role, parent_admin.tenant_id_of(obj))
        return self.member_may(request, role)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._may(request, "view", self.view_role, obj)

    def has_add_permission(self, request: HttpRequest, obj: Model | None) -> bool:  # type: ignore[override]
        return self._may(request, "add", self.add_role, obj)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._may(request, "change", self.change_role, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._may(request, "delete", self.delete_role, obj)


class TenantScopedTabularInline(TenantScopedInline, admin.TabularInline):
    pass


class ReadOnlyForEveryone:
    """Protocol data (tasks, messages, events, push configs and deliveries) is written only
    by the protocol's services; the admin shows it to superusers and members alike."""

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False
