"""Who manages a tenant through its API, decided from the headers alone, before a body is read:
an API key of the tenant that holds a management role (`X-API-Key: ask_…` or
`Authorization: Bearer ask_…`), or a bearer token of the tenant's OpenID Connect issuer whose
claim `OidcIssuer.role_claim` names a role.

No credential, or one that is not valid (unknown, revoked, expired; a token that does not
verify): 401. A key without a management role, a token without a role: 403, saying so; so is a
key limited to some agents, whatever role is stored with it (no key is made so any more, but
one made before may be: the tenant API manages every agent, more than such a key may reach). A
valid credential of another tenant: that tenant's URLs answer 404 as if it did not exist
(`TenantRole`). Roles are the admin's: viewer reads, operator acts, owner manages."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from accounts import selectors as account_selectors
from accounts import services as account_services
from accounts.models import Role, Tenant
from protocols import oidc

from . import selectors

API_KEY_HEADER = "X-API-Key"
NO_TENANT = "no tenant with this slug (or not one you manage)"


@dataclass(frozen=True)
class Manager:
    """The caller of the tenant API: whose tenant, with which role, known as whom."""

    tenant: Tenant
    role: str
    name: str  # key:<prefix>, or oidc:<sub>
    identity: str  # what the write throttle counts
    api_key_id: int | None = None
    maker: str = ""  # what a key it makes records as its maker (accounts.services.made_by_*)

    is_authenticated = True
    is_active = True
    pk = None

    def may(self, role: str) -> bool:
        return account_services.role_includes(self.role, role)


class ServiceUnavailable(exceptions.APIException):
    status_code = 503
    default_detail = "the bearer token cannot be checked just now"

    def __init__(self, detail: str, retry_after: float) -> None:
        super().__init__(detail)
        self.wait = max(1, math.ceil(retry_after))


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _url_slug(request: Request) -> str:
    kwargs = (getattr(request, "parser_context", None) or {}).get("kwargs") or {}
    return str(kwargs.get("slug", ""))


class TenantCredentialAuthentication(BaseAuthentication):
    """A management key or an issuer's bearer token (see the module's docstring)."""

    def authenticate_header(self, request: Request) -> str:
        return f'ApiKey header="{API_KEY_HEADER}", Bearer realm="agentserver tenant API"'

    def authenticate(self, request: Request) -> tuple[Manager, Any] | None:
        key = request.META.get("HTTP_X_API_KEY", "").strip()
        bearer = _bearer(request)
        if not key and bearer and bearer.startswith(f"{account_services.KEY_PREFIX}_"):
            key, bearer = bearer, None
        if key:
            return self._by_key(key), None
        if bearer:
            return self._by_token(request, bearer), None
        return None

    def _by_key(self, presented: str) -> Manager:
        grant = account_selectors.key_grant(presented)
        if grant is None or (grant.expires_at is not None and grant.expires_at <= timezone.now()):
            raise exceptions.AuthenticationFailed("the API key is not valid (unknown, revoked or expired)")
        found = selectors.key_management(grant.key_id)
        if found is None:
            raise exceptions.AuthenticationFailed("the API key is not valid (unknown, revoked or expired)")
        tenant, role, prefix = found
        if not role:
            raise exceptions.PermissionDenied(
                "this API key has no management role: it calls agents only. Make a key with one "
                "(the admin's key form, or create_api_key --management-role) to use the tenant API"
            )
        if grant.agent_ids is not None:
            # Read with the key (its grant, cached): no query of its own.
            raise exceptions.PermissionDenied(
                "this API key is limited to some agents, so it has no management role: the tenant API manages "
                "the whole tenant. Use a key for all of the tenant's agents with a management role"
            )
        if account_selectors.key_touch_due(grant.key_id):
            account_services.api_key_touch(key_id=grant.key_id)
            account_selectors.key_touched(grant.key_id)
        return Manager(
            tenant=tenant,
            role=role,
            name=account_services.made_by_key(prefix),
            identity=f"key:{grant.key_id}",
            api_key_id=grant.key_id,
            maker=account_services.made_by_key(prefix),
        )

    def _by_token(self, request: Request, token: str) -> Manager:
        # The token names its issuer; the tenants that accept it are tried, the URL's first,
        # so that a token of another tenant's issuer is that tenant's caller (and this
        # tenant's URLs answer it 404), not a stranger.
        issuers = selectors.issuers_named(selectors.unverified_issuer(token), prefer=_url_slug(request))
        if not issuers:
            raise exceptions.AuthenticationFailed(
                "no tenant accepts bearer tokens of this token's issuer; send a management API key in the "
                "X-API-Key header"
            )
        refused: oidc.BearerRefused | None = None
        for issuer in issuers:
            try:
                subject, _, claims = async_to_sync(oidc.verify_claims)(token, issuer)
                break
            except oidc.BearerRefused as exc:
                refused = refused or exc
            except oidc.IssuerUnavailable as exc:
                raise ServiceUnavailable(f"the bearer token cannot be checked: {exc}", exc.retry_after) from None
        else:
            raise exceptions.AuthenticationFailed(f"the bearer token is not valid: {refused}")
        if not issuer.role_claim:
            raise exceptions.PermissionDenied(
                "this tenant's issuer names no role claim: its tokens call agents only, not the tenant API"
            )
        role = claims.get(issuer.role_claim)
        if not (isinstance(role, str) and role in Role.values):
            raise exceptions.PermissionDenied(
                f"the bearer token's claim {issuer.role_claim!r} names no role (viewer, operator or owner)"
            )
        return Manager(
            tenant=issuer.tenant,
            role=role,
            name=f"{account_services.OIDC_PRINCIPAL_NAMESPACE}:{subject}",
            identity=f"oidc:{issuer.tenant_id}:{subject}",
            maker=account_services.made_by_token(issuer.issuer, subject),
        )


class TenantRole(BasePermission):
    """The URL's tenant must be the caller's (else 404, as for no tenant at all), and the
    caller's role must include the one the view asks for this method (else 403)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        manager = request.user
        if not isinstance(manager, Manager):
            raise exceptions.NotAuthenticated(
                f"send a management API key ({API_KEY_HEADER}: ask_…) or a bearer token of the tenant's issuer"
            )
        if _url_slug(request) != manager.tenant.slug:
            raise exceptions.NotFound(NO_TENANT)
        needed = view.role_for(request.method)
        if not manager.may(needed):
            raise exceptions.PermissionDenied(f"this needs the {needed} role; you have {manager.role}")
        return True


class TenantCredentialScheme(OpenApiAuthenticationExtension):
    target_class = TenantCredentialAuthentication
    name = ["managementKey", "managementBearer"]

    def get_security_definition(self, auto_schema: Any) -> Any:
        return [
            {
                "type": "apiKey",
                "in": "header",
                "name": API_KEY_HEADER,
                "description": "An API key of the tenant with a management role, not limited to some agents "
                "(ask_…); `Authorization: Bearer ask_…` works too.",
            },
            {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": "An access token of the tenant's OpenID Connect issuer whose role claim names a role.",
            },
        ]
