"""The tenant's agents, of every executor kind (owners write, everyone reads).

Values are checked by accounts.agent_services (`agent_save`), the one service the admin's form
and `create_agent` use too, so the three give the same answers for the same input; its
itemised problems are this API's 400. The executor's secret is write-only: `secret` in a body
sets it ("" removes it), and an answer says only whether one is set."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.agent_services import AgentInvalid, agent_save
from accounts.models import Agent, Role

from . import represent, selectors
from . import serializers as s
from .base import TenantView, errors, missing, next_link, page_or_400, query, valid
from .errors import problems_error

TAG = "tenant agents"
OWNER_WRITES = {"POST": Role.OWNER, "PATCH": Role.OWNER, "DELETE": Role.OWNER}


def _save(request: Request, view: TenantView, slug: str, values: dict[str, Any], agent: Agent | None) -> Agent:
    secret = values.pop("secret", None)
    try:
        return agent_save(tenant=view.tenant(request), slug=slug, values=values, secret=secret, agent=agent)
    except AgentInvalid as exc:
        raise problems_error(exc.problems) from None


class AgentsView(TenantView):
    roles = OWNER_WRITES

    @extend_schema(
        operation_id="tenant_agents_list",
        tags=[TAG],
        summary="The tenant's agents",
        description="Active and inactive ones; an agent's secret never (`has_secret` says whether one is set).",
        parameters=[s.PageQuery],
        responses={200: s.AgentsOut, **errors(400)},
    )
    def get(self, request: Request, slug: str) -> Response:
        v = query(s.PageQuery, request)
        page = page_or_400(
            lambda: selectors.page_by_pk(
                selectors.agents_of(self.tenant(request)), cursor=v.get("cursor"), size=v["page_size"]
            )
        )
        body = {"results": [represent.agent(a) for a in page.items], "next": next_link(request, page)}
        return Response(s.AgentsOut(body).data)

    @extend_schema(
        operation_id="tenant_agents_create",
        tags=[TAG],
        summary="Create an agent (owners)",
        description="Any executor the tenant may use, its settings checked against the executor's schema and "
        "rules as the admin checks them (a webhook agent needs its `secret`, a fronted agent's URL is checked "
        "through the outbound guard). 400 itemises every problem by field.",
        request=s.AgentCreateIn,
        responses={201: s.AgentOut, **errors(400, 413, 429)},
    )
    def post(self, request: Request, slug: str) -> Response:
        v = valid(s.AgentCreateIn, request.data)
        agent = _save(request, self, v.pop("slug"), v, None)
        return Response(s.AgentOut(represent.agent(agent)).data, status=status.HTTP_201_CREATED)


class AgentView(TenantView):
    roles = OWNER_WRITES

    def _agent(self, request: Request, agent: str) -> Agent:
        found = selectors.agent_of(self.tenant(request), agent)
        if found is None:
            raise missing("agent")
        return found

    @extend_schema(
        operation_id="tenant_agents_retrieve",
        tags=[TAG],
        summary="An agent",
        responses={200: s.AgentOut, **errors()},
    )
    def get(self, request: Request, slug: str, agent: str) -> Response:
        return Response(s.AgentOut(represent.agent(self._agent(request, agent))).data)

    @extend_schema(
        operation_id="tenant_agents_update",
        tags=[TAG],
        summary="Change an agent (owners)",
        description="Only the values given change, checked as on creation (with the agent's other values).",
        request=s.AgentIn,
        responses={200: s.AgentOut, **errors(400, 413, 429)},
    )
    def patch(self, request: Request, slug: str, agent: str) -> Response:
        found = self._agent(request, agent)
        v = valid(s.AgentIn, request.data)
        saved = _save(request, self, found.slug, v, found)
        return Response(s.AgentOut(represent.agent(saved)).data)

    @extend_schema(
        operation_id="tenant_agents_deactivate",
        tags=[TAG],
        summary="Deactivate an agent (owners)",
        description="It answers no request from then on (404, as an agent that does not exist); its tasks stay "
        "readable here. PATCH `is_active: true` brings it back.",
        responses={200: s.AgentOut, **errors(400, 429)},
    )
    def delete(self, request: Request, slug: str, agent: str) -> Response:
        found = self._agent(request, agent)
        saved = _save(request, self, found.slug, {"is_active": False}, found)
        return Response(s.AgentOut(represent.agent(saved)).data)
