"""The tenant's AIP group memberships, as the admin shows them (groups.admin): read-only for
every role (the Leader decides who is in a group), with the tasks each member took. The
Leader's access token is never in an answer, sealed or not."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from . import represent, selectors
from . import serializers as s
from .base import TenantView, errors, missing, next_link, page_or_400, query

TAG = "tenant agents"
TASKS_PAGE_SIZE = 200


class GroupMembershipsView(TenantView):
    @extend_schema(
        operation_id="tenant_group_memberships_list",
        tags=[TAG],
        summary="The AIP group memberships of the tenant's agents",
        description="Newest first; the admin's filters (agent, state, credential, muted) and search (`q`: a "
        "group id, a Leader's or member's AIC, or an owner, exactly). Never the Leader's access token.",
        parameters=[s.GroupMembershipQuery],
        responses={200: s.GroupMembershipsOut, **errors(400)},
    )
    def get(self, request: Request, slug: str) -> Response:
        v = query(s.GroupMembershipQuery, request)
        found = selectors.MembershipFilter(
            agent=v.get("agent"),
            state=v.get("state"),
            credential=v.get("credential"),
            muted=v.get("muted"),
            q=v.get("q"),
        )
        memberships = selectors.memberships_of(self.tenant(request), found)
        page = page_or_400(
            lambda: selectors.page_by_pk(memberships, cursor=v.get("cursor"), size=v["page_size"], newest_first=True)
        )
        body = {"results": [represent.group_membership(m) for m in page.items], "next": next_link(request, page)}
        return Response(s.GroupMembershipsOut(body).data)


class GroupMembershipView(TenantView):
    @extend_schema(
        operation_id="tenant_group_memberships_retrieve",
        tags=[TAG],
        summary="A group membership with its tasks",
        description=f"The tasks the member took in the group, oldest first, {TASKS_PAGE_SIZE} a page (`tasks_page`).",
        parameters=[s.GroupMembershipDetailQuery],
        responses={200: s.GroupMembershipDetailOut, **errors(400)},
    )
    def get(self, request: Request, slug: str, pk: int) -> Response:
        found = selectors.membership_of(self.tenant(request), pk)
        if found is None:
            raise missing("group membership")
        v = query(s.GroupMembershipDetailQuery, request)
        tasks, page, pages = selectors.membership_tasks(found, page=v["tasks_page"], per_page=TASKS_PAGE_SIZE)
        body = {
            **represent.group_membership(found),
            "tasks": [represent.group_task(t) for t in tasks],
            "tasks_page": page,
            "tasks_pages": pages,
        }
        return Response(s.GroupMembershipDetailOut(body).data)
