"""The tenant, its members, its API keys and its OpenID Connect issuer (docs/api.md).

Every write is an accounts.services call; every read an accounts or tenant_api selector; a
service's refusal is a 400 naming the field. Owners manage all of these; viewers and
operators read them (a key's secret is never in a read)."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import services
from accounts.models import Role

from . import represent, selectors
from . import serializers as s
from .base import TenantView, errors, missing, next_link, page_or_400, query, valid
from .errors import Conflict, field_errors

TAG = "tenant"
OWNER_WRITES = {"POST": Role.OWNER, "PATCH": Role.OWNER, "PUT": Role.OWNER, "DELETE": Role.OWNER}


class TenantDetailView(TenantView):
    roles = OWNER_WRITES

    @extend_schema(
        operation_id="tenant_retrieve",
        tags=[TAG],
        summary="The tenant",
        responses={200: s.TenantOut, **errors()},
    )
    def get(self, request: Request, slug: str) -> Response:
        return Response(s.TenantOut(represent.tenant(self.tenant(request), self.manager(request).role)).data)

    @extend_schema(
        operation_id="tenant_rename",
        tags=[TAG],
        summary="Rename the tenant (owners)",
        description="Its display name, on every card of its agents as the provider. The slug stays.",
        request=s.TenantIn,
        responses={200: s.TenantOut, **errors(400, 413, 429)},
    )
    def patch(self, request: Request, slug: str) -> Response:
        v = valid(s.TenantIn, request.data)
        with field_errors("name"):
            found = services.tenant_rename(tenant=self.tenant(request), name=v["name"])
        return Response(s.TenantOut(represent.tenant(found, self.manager(request).role)).data)


# --- members --------------------------------------------------------------------------------


class MembersView(TenantView):
    roles = OWNER_WRITES

    @extend_schema(
        operation_id="tenant_members_list",
        tags=[TAG],
        summary="The tenant's members",
        parameters=[s.PageQuery],
        responses={200: s.MembersOut, **errors(400)},
    )
    def get(self, request: Request, slug: str) -> Response:
        v = query(s.PageQuery, request)
        page = page_or_400(
            lambda: selectors.page_by_pk(
                selectors.members_of(self.tenant(request)), cursor=v.get("cursor"), size=v["page_size"]
            )
        )
        body = {"results": [represent.member(m) for m in page.items], "next": next_link(request, page)}
        return Response(s.MembersOut(body).data)

    @extend_schema(
        operation_id="tenant_members_add",
        tags=[TAG],
        summary="Invite a member by username (owners)",
        description="Invites: the user becomes a member (and may use the admin) only when they accept, signed in, "
        "at `accept_url` (or among their invitations at /invitations/), before `expires_at`. The answer is the same "
        "whether or not anyone has this username; a pending invitation of the same name is replaced. A member "
        "already is refused (change their role).",
        request=s.MemberIn,
        responses={202: s.InvitationCreatedOut, **errors(400, 413, 429)},
    )
    def post(self, request: Request, slug: str) -> Response:
        v = valid(s.MemberIn, request.data)
        with field_errors("username"):
            invitation, token = services.membership_invite(
                tenant=self.tenant(request),
                username=v["username"],
                role=v["role"],
                invited_as=self.manager(request).name,
            )
        body = {
            **represent.invitation(invitation),
            "accept_url": request.build_absolute_uri(reverse("invitations:answer", args=[token])),
        }
        return Response(s.InvitationCreatedOut(body).data, status=status.HTTP_202_ACCEPTED)


# Invitations are the owners' (the usernames they typed), read and revoked by them alone.
OWNERS_ONLY = {**OWNER_WRITES, "GET": Role.OWNER}


class InvitationsView(TenantView):
    roles = OWNERS_ONLY

    @extend_schema(
        operation_id="tenant_invitations_list",
        tags=[TAG],
        summary="The tenant's pending invitations (owners)",
        description="Unanswered and unexpired, newest first; never a link's token.",
        parameters=[s.PageQuery],
        responses={200: s.InvitationsOut, **errors(400)},
    )
    def get(self, request: Request, slug: str) -> Response:
        v = query(s.PageQuery, request)
        page = page_or_400(
            lambda: selectors.page_by_pk(
                selectors.invitations_of(self.tenant(request)),
                cursor=v.get("cursor"),
                size=v["page_size"],
                newest_first=True,
            )
        )
        body = {"results": [represent.invitation(i) for i in page.items], "next": next_link(request, page)}
        return Response(s.InvitationsOut(body).data)


class InvitationView(TenantView):
    roles = OWNERS_ONLY

    def _invitation(self, request: Request, pk: int):  # type: ignore[no-untyped-def]
        found = selectors.invitation_of(self.tenant(request), pk)
        if found is None:
            raise missing("pending invitation")
        return found

    @extend_schema(
        operation_id="tenant_invitations_retrieve",
        tags=[TAG],
        summary="A pending invitation (owners)",
        responses={200: s.InvitationOut, **errors()},
    )
    def get(self, request: Request, slug: str, pk: int) -> Response:
        return Response(s.InvitationOut(represent.invitation(self._invitation(request, pk))).data)

    @extend_schema(
        operation_id="tenant_invitations_revoke",
        tags=[TAG],
        summary="Revoke a pending invitation (owners)",
        description="It can no longer be accepted, and is no longer listed.",
        responses={204: OpenApiResponse(description="Revoked."), **errors(429)},
    )
    def delete(self, request: Request, slug: str, pk: int) -> Response:
        services.membership_revoke(invitation=self._invitation(request, pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemberView(TenantView):
    roles = OWNER_WRITES

    def _member(self, request: Request, username: str):  # type: ignore[no-untyped-def]
        found = selectors.member_of(self.tenant(request), username)
        if found is None:
            raise missing("member")
        return found

    @extend_schema(
        operation_id="tenant_members_retrieve",
        tags=[TAG],
        summary="A member",
        responses={200: s.MemberOut, **errors()},
    )
    def get(self, request: Request, slug: str, username: str) -> Response:
        return Response(s.MemberOut(represent.member(self._member(request, username))).data)

    @extend_schema(
        operation_id="tenant_members_role",
        tags=[TAG],
        summary="Change a member's role (owners)",
        description="The tenant's last owner stays an owner.",
        request=s.MemberRoleIn,
        responses={200: s.MemberOut, **errors(400, 413, 429)},
    )
    def patch(self, request: Request, slug: str, username: str) -> Response:
        membership = self._member(request, username)
        v = valid(s.MemberRoleIn, request.data)
        with field_errors("role"):
            membership = services.member_role_set(membership=membership, role=v["role"])
        return Response(s.MemberOut(represent.member(membership)).data)

    @extend_schema(
        operation_id="tenant_members_remove",
        tags=[TAG],
        summary="Remove a member (owners)",
        description="The tenant's last owner stays (409).",
        responses={204: None, **errors(409, 429)},
    )
    def delete(self, request: Request, slug: str, username: str) -> Response:
        membership = self._member(request, username)
        try:
            services.member_remove(membership=membership)
        except services.AccountError as exc:
            raise Conflict(str(exc)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- API keys -------------------------------------------------------------------------------


class KeysView(TenantView):
    roles = OWNER_WRITES

    @extend_schema(
        operation_id="tenant_keys_list",
        tags=[TAG],
        summary="The tenant's API keys",
        description="Revoked ones too (newest first), or only those one maker made (`made_by`); never a key's secret.",
        parameters=[s.KeysQuery],
        responses={200: s.KeysOut, **errors(400)},
    )
    def get(self, request: Request, slug: str) -> Response:
        v = query(s.KeysQuery, request)
        keys = selectors.keys_of(self.tenant(request), made_by=v.get("made_by"))
        page = page_or_400(
            lambda: selectors.page_by_pk(keys, cursor=v.get("cursor"), size=v["page_size"], newest_first=True)
        )
        body = {"results": [represent.key(k) for k in page.items], "next": next_link(request, page)}
        return Response(s.KeysOut(body).data)

    @extend_schema(
        operation_id="tenant_keys_create",
        tags=[TAG],
        summary="Make an API key (owners)",
        description="The answer holds the whole key, once: only its hash is kept. Its management role is at most "
        "your own, and only for a key without `agents`. It expires at `expires_at` (at most API_KEY_MAX_LIFETIME "
        "away), else API_KEY_DEFAULT_LIFETIME from now; `made_by` records you as its maker.",
        request=s.KeyIn,
        responses={201: s.KeyCreatedOut, **errors(400, 413, 429)},
    )
    def post(self, request: Request, slug: str) -> Response:
        v = valid(s.KeyIn, request.data)
        tenant = self.tenant(request)
        wanted = v.get("agents") or []
        agents = list(selectors.agents_of(tenant).filter(slug__in=wanted))
        unknown = sorted(set(wanted) - {a.slug for a in agents})
        if unknown:
            raise ValidationError({"agents": [f"no agent {', '.join(unknown)} in this tenant"]})
        manager = self.manager(request)
        with field_errors("management_role"):
            role = services.management_role_check(
                v.get("management_role", ""), at_most=manager.role, limited=bool(agents)
            )
        with field_errors("expires_at"):
            expires_at = services.api_key_expiry(expires_at=v.get("expires_at"))
        with field_errors("non_field_errors"):
            key, plaintext = services.api_key_create(
                tenant=tenant,
                name=v["name"],
                principal=v.get("principal") or None,
                agents=agents,
                expires_at=expires_at,
                management_role=role,
                made_by=manager.maker,
            )
        body = {**represent.key(key), "key": plaintext}
        return Response(s.KeyCreatedOut(body).data, status=status.HTTP_201_CREATED)


class KeysRevokeView(TenantView):
    roles = OWNER_WRITES

    @extend_schema(
        operation_id="tenant_keys_revoke_made_by",
        tags=[TAG],
        summary="Revoke every key one maker made (owners)",
        description="Every key `made_by` made (`GET …/keys/?made_by=` lists them), and the keys those keys made, "
        "refused from the next request on, in every process: what a leaked token or key made, undone in one call. "
        "Answers the prefixes revoked now; keys revoked before stay as they were.",
        request=s.KeysRevokeIn,
        responses={200: s.KeysRevokedOut, **errors(400, 413, 429)},
    )
    def post(self, request: Request, slug: str) -> Response:
        v = valid(s.KeysRevokeIn, request.data)
        with field_errors("made_by"):
            revoked = services.api_key_revoke_made_by(tenant=self.tenant(request), made_by=v["made_by"])
        return Response(s.KeysRevokedOut({"revoked": [key.prefix for key in revoked]}).data)


class KeyView(TenantView):
    roles = OWNER_WRITES

    def _key(self, request: Request, prefix: str):  # type: ignore[no-untyped-def]
        found = selectors.key_of(self.tenant(request), prefix)
        if found is None:
            raise missing("API key")
        return found

    @extend_schema(
        operation_id="tenant_keys_retrieve",
        tags=[TAG],
        summary="An API key (never its secret)",
        responses={200: s.KeyOut, **errors()},
    )
    def get(self, request: Request, slug: str, prefix: str) -> Response:
        return Response(s.KeyOut(represent.key(self._key(request, prefix))).data)

    @extend_schema(
        operation_id="tenant_keys_revoke",
        tags=[TAG],
        summary="Revoke an API key (owners)",
        description="Refused from the next request on, in every process; the key stays listed as revoked. "
        "Revoking a revoked key changes nothing.",
        responses={200: s.KeyOut, **errors(429)},
    )
    def delete(self, request: Request, slug: str, prefix: str) -> Response:
        key = self._key(request, prefix)
        services.api_key_revoke(key=key)
        return Response(s.KeyOut(represent.key(self._key(request, prefix))).data)


# --- the issuer -----------------------------------------------------------------------------


class IssuerView(TenantView):
    roles = OWNER_WRITES

    @extend_schema(
        operation_id="tenant_issuer_retrieve",
        tags=[TAG],
        summary="The tenant's OpenID Connect issuer",
        description="404 when the tenant has none.",
        responses={200: s.IssuerOut, **errors()},
    )
    def get(self, request: Request, slug: str) -> Response:
        found = selectors.issuer_for(self.tenant(request))
        if found is None:
            raise missing("issuer")
        return Response(s.IssuerOut(represent.issuer(found)).data)

    @extend_schema(
        operation_id="tenant_issuer_set",
        tags=[TAG],
        summary="Set the tenant's issuer (owners)",
        description="Its tokens are accepted by the tenant's agents (and, with `role_claim`, by this API). "
        "The JWKS URL must pass the outbound guard (a public address, or one the server allows).",
        request=s.IssuerIn,
        responses={200: s.IssuerOut, **errors(400, 413, 429)},
    )
    def put(self, request: Request, slug: str) -> Response:
        v = valid(s.IssuerIn, request.data)
        with field_errors("jwks_url"):
            found = services.oidc_issuer_set(
                tenant=self.tenant(request),
                issuer=v["issuer"],
                audience=v["audience"],
                jwks_url=v["jwks_url"],
                role_claim=v.get("role_claim"),
            )
        return Response(s.IssuerOut(represent.issuer(found)).data)

    @extend_schema(
        operation_id="tenant_issuer_remove",
        tags=[TAG],
        summary="Remove the tenant's issuer (owners)",
        description="Its tokens are refused from the next request on. 404 when the tenant has none.",
        responses={204: OpenApiResponse(description="Removed."), **errors(429)},
    )
    def delete(self, request: Request, slug: str) -> Response:
        if not services.oidc_issuer_remove(tenant=self.tenant(request)):
            raise missing("issuer")
        return Response(status=status.HTTP_204_NO_CONTENT)
