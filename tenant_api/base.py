"""What every view of the tenant API shares: authentication before any parsing, the tenant
and role check, strict JSON bodies, the write throttle and one JSON shape for refusals."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts.models import Role, Tenant

from . import selectors
from . import serializers as s
from .auth import NO_TENANT, Manager, TenantCredentialAuthentication, TenantRole
from .errors import StrictJSONParser, exception_handler
from .throttles import WriteThrottle

WHAT = {
    400: "The request is not valid (`errors` itemises why).",
    401: "No credential, or one that is not valid (unknown, revoked or expired key; a token that does not verify).",
    403: "A credential without a management role, or a role too low for this.",
    404: "No such object in this tenant (another tenant's answers the same), or no such tenant.",
    409: "Conflicts with the object's state.",
    413: "The body is too large.",
    429: "Too many writes from this caller (TENANT_API_WRITE_RATE): try again after Retry-After seconds.",
    503: "The bearer token's issuer cannot be reached just now: try again after Retry-After seconds.",
}


def errors(*codes: int) -> dict[int, Any]:
    return {code: OpenApiResponse(s.ErrorOut, description=WHAT[code]) for code in (401, 403, 404, 503, *codes)}


class TenantView(APIView):
    authentication_classes = [TenantCredentialAuthentication]
    permission_classes = [TenantRole]
    parser_classes = [StrictJSONParser]
    renderer_classes = [JSONRenderer]
    throttle_classes = [WriteThrottle]
    # The least role for each method; what is not named is a read.
    roles: Mapping[str, str] = {}

    def get_exception_handler(self) -> Any:
        return exception_handler

    def role_for(self, method: str) -> str:
        return self.roles.get(method, Role.VIEWER)

    def tenant(self, request: Request) -> Tenant:
        manager = request.user
        assert isinstance(manager, Manager)  # TenantRole let the request in
        return manager.tenant

    def manager(self, request: Request) -> Manager:
        manager = request.user
        assert isinstance(manager, Manager)
        return manager


def valid(serializer_class: type[Any], data: Any, *, partial: bool = False) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise exceptions.ValidationError({"non_field_errors": ["the body must be a JSON object"]})
    serializer = serializer_class(data=data, partial=partial)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def query(serializer_class: type[Any], request: Request, repeated: tuple[str, ...] = ()) -> dict[str, Any]:
    params = request.query_params
    data = {k: params.getlist(k) if k in repeated else params.get(k) for k in params}
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def page_or_400(make: Any) -> selectors.Page:
    try:
        return make()
    except selectors.BadCursor as exc:
        raise exceptions.ValidationError({"cursor": [str(exc)]}) from None


def missing(what: str) -> exceptions.NotFound:
    return exceptions.NotFound(f"no {what} with this id in this tenant")


__all__ = ["NO_TENANT", "TenantView", "errors", "missing", "page_or_400", "query", "valid"]


def next_link(request: Request, page: selectors.Page) -> str | None:
    """The URL of the page after `page`, with the request's other query parameters; None at the end."""
    if not page.next_cursor:
        return None
    params = request.query_params.copy()
    params["cursor"] = page.next_cursor
    return request.build_absolute_uri(f"{request.path}?{params.urlencode()}")
