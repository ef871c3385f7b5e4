"""An agent's host names (docs/tenancy.md, "Agents at their own host names"): everyone reads
them, with their state and, while pending, what to publish where; owners claim a name, verify
it (the registry's DNS or well-known proof, looked for now) and remove one, through
accounts.host_services as the admin's inline does. Binding without proof (`host_bind`) stays
the operator's (a superuser in the admin, `manage.py bind_host`): it is not offered here."""

from __future__ import annotations

import logging
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import host_services
from accounts.models import Agent, AgentHost, Role
from accounts.services import AccountError

from . import represent, selectors
from . import serializers as s
from .base import TenantView, errors, missing, next_link, page_or_400, query, valid
from .errors import Conflict, field_errors

log = logging.getLogger(__name__)

TAG = "tenant agents"
OWNER_WRITES = {"POST": Role.OWNER, "DELETE": Role.OWNER}


def _shown(binding: AgentHost) -> dict[str, Any]:
    return represent.host(binding, host_services.host_instructions(binding))


class _AgentHostView(TenantView):
    roles = OWNER_WRITES

    def _agent(self, request: Request, agent: str) -> Agent:
        found = selectors.agent_of(self.tenant(request), agent)
        if found is None:
            raise missing("agent")
        return found

    def _host(self, request: Request, agent: str, host: str) -> AgentHost:
        found = selectors.host_of(self._agent(request, agent), host)
        if found is None:
            raise missing("host name of this agent")
        return found


class HostsView(_AgentHostView):
    @extend_schema(
        operation_id="tenant_agent_hosts_list",
        tags=[TAG],
        summary="An agent's host names",
        description="Bound ones and pending claims, by name; a claim with what to publish, and where, to prove it.",
        parameters=[s.PageQuery],
        responses={200: s.HostsOut, **errors(400)},
    )
    def get(self, request: Request, slug: str, agent: str) -> Response:
        v = query(s.PageQuery, request)
        hosts = selectors.hosts_of(self._agent(request, agent))
        page = page_or_400(lambda: selectors.page_by_pk(hosts, cursor=v.get("cursor"), size=v["page_size"]))
        body = {"results": [_shown(h) for h in page.items], "next": next_link(request, page)}
        return Response(s.HostsOut(body).data)

    @extend_schema(
        operation_id="tenant_agent_hosts_claim",
        tags=[TAG],
        summary="Claim a host name for the agent (owners)",
        description="A pending claim with a fresh token: publish it as `instructions` say, then verify. Served "
        "nowhere until proven. Claiming a name the agent has already keeps it (and sets its `card_version`). "
        "400 for what is no host name, one of this server's own names (any ALLOWED_HOSTS matches), `localhost` or "
        "a name below it, an IP address that is not public, or a name bound to another agent.",
        request=s.HostClaimIn,
        responses={201: s.HostOut, **errors(400, 413, 429)},
    )
    def post(self, request: Request, slug: str, agent: str) -> Response:
        found = self._agent(request, agent)
        v = valid(s.HostClaimIn, request.data)
        with field_errors("host"):
            binding = host_services.host_claim(agent=found, host=v["host"], card_version=v["card_version"])
        return Response(s.HostOut(_shown(binding)).data, status=status.HTTP_201_CREATED)


class HostView(_AgentHostView):
    @extend_schema(
        operation_id="tenant_agent_hosts_retrieve",
        tags=[TAG],
        summary="One of an agent's host names",
        responses={200: s.HostOut, **errors()},
    )
    def get(self, request: Request, slug: str, agent: str, host: str) -> Response:
        return Response(s.HostOut(_shown(self._host(request, agent, host))).data)

    @extend_schema(
        operation_id="tenant_agent_hosts_remove",
        tags=[TAG],
        summary="Remove a host name (owners)",
        description="A claim is withdrawn; a bound name answers as an unknown one from the next request on.",
        responses={204: None, **errors(429)},
    )
    def delete(self, request: Request, slug: str, agent: str, host: str) -> Response:
        host_services.host_unbind(binding=self._host(request, agent, host))
        return Response(status=status.HTTP_204_NO_CONTENT)


class HostVerifyView(_AgentHostView):
    @extend_schema(
        operation_id="tenant_agent_hosts_verify",
        tags=[TAG],
        summary="Look for a claim's token now (owners)",
        description="By `method`: dns (the TXT record) or http (the well-known file, through the outbound guard). "
        "200 with `bound` and what was found (`detail`), proven or not; the first claim of a name proven takes "
        "it. 409 when another agent's claim of the name was proven first.",
        request=s.HostVerifyIn,
        responses={200: s.HostVerifyOut, **errors(400, 409, 413, 429)},
    )
    def post(self, request: Request, slug: str, agent: str, host: str) -> Response:
        binding = self._host(request, agent, host)
        v = valid(s.HostVerifyIn, request.data)
        try:
            outcome = host_services.host_verify(binding=binding, method=v["method"])
        except AccountError as exc:
            raise Conflict(str(exc)) from None
        if outcome.ok:
            log.info("host %s bound to %s by %s through the tenant API", binding.host, binding.agent, v["method"])
        fresh = selectors.host_of(binding.agent, binding.host)
        if fresh is None:  # dropped meanwhile: another claim of the name was proven, or it was withdrawn
            if selectors.host_proven_by_another(binding.agent, binding.host):
                raise Conflict(f"the claim of {binding.host} was dropped: another agent proved the name first")
            raise missing("host name of this agent")
        body = {"bound": fresh.proven_at is not None, "detail": outcome.detail, "host": _shown(fresh)}
        return Response(s.HostVerifyOut(body).data)
