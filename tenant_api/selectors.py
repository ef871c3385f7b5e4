"""Every read of the tenant API, each within one tenant: whatever another tenant owns is not
in any of these querysets, so a view that finds nothing answers 404 for it as for nothing."""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jwt
from django.db import connections
from django.db.models import Q, QuerySet

from accounts import selectors as account_selectors
from accounts import storable
from accounts.hosts import host_name
from accounts.models import Agent, AgentHost, ApiKey, Membership, MembershipInvitation, OidcIssuer, Tenant
from groups import selectors as group_selectors
from groups.models import GroupMembership, GroupTask
from protocols.oidc import MAX_TOKEN_LENGTH
from push.models import PushConfig, PushDelivery
from tasks_app.models import Task
from tasks_app.search import matching_task_ids


class BadCursor(ValueError):
    """A cursor this API did not hand out."""


def key_management(key_id: int) -> tuple[Tenant, str, str] | None:
    """A live key's tenant, management role and prefix (the key itself was checked by
    accounts.selectors.key_grant)."""
    key = ApiKey.objects.active().select_related("tenant").filter(pk=key_id).first()
    return (key.tenant, key.management_role, key.prefix) if key is not None else None


# Tenants that accept one issuer's tokens (a shared identity provider) tried for one token.
ISSUERS_TRIED = 3


def unverified_issuer(token: str) -> str | None:
    """The `iss` a bearer token claims, unverified (it only says which issuers to verify it
    against); None for what is no JWT naming one."""
    if len(token) > MAX_TOKEN_LENGTH:
        return None
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except (jwt.PyJWTError, ValueError, TypeError, RecursionError):
        return None
    iss = claims.get("iss") if isinstance(claims, dict) else None
    return iss if isinstance(iss, str) and iss and "\x00" not in iss else None


def issuers_named(iss: str | None, *, prefer: str) -> list[OidcIssuer]:
    """The active issuers (with their tenants) whose `issuer` is `iss`, the tenant `prefer`'s first."""
    if not iss:
        return []
    found = list(
        OidcIssuer.objects.select_related("tenant").filter(issuer=iss, is_active=True).order_by("pk")[:ISSUERS_TRIED]
    )
    mine = OidcIssuer.objects.select_related("tenant").filter(issuer=iss, is_active=True, tenant__slug=prefer).first()
    if mine is not None:
        found = [mine, *(i for i in found if i.pk != mine.pk)][:ISSUERS_TRIED]
    return found


def members_of(tenant: Tenant) -> QuerySet[Membership]:
    return Membership.objects.filter(tenant=tenant).select_related("user")


def _storable(text: str, limit: int) -> bool:
    """Whether `text` (a path segment) can name a stored row (storable.check_text's rules)."""
    try:
        storable.check_text(text, where="", max_length=limit)
    except storable.Refused:
        return False
    return True


def member_of(tenant: Tenant, username: str) -> Membership | None:
    if not _storable(username, 150):
        return None
    return members_of(tenant).filter(user__username=username).first()


def invitations_of(tenant: Tenant) -> QuerySet[MembershipInvitation]:
    return account_selectors.invitations_pending_of(tenant)


def invitation_of(tenant: Tenant, pk: int) -> MembershipInvitation | None:
    return invitations_of(tenant).filter(pk=pk).first()


def keys_of(tenant: Tenant, *, made_by: str | None = None) -> QuerySet[ApiKey]:
    keys = ApiKey.objects.filter(tenant=tenant).prefetch_related("agents")
    return keys if made_by is None else keys.filter(made_by=made_by)


def key_of(tenant: Tenant, prefix: str) -> ApiKey | None:
    if not _storable(prefix, 16):
        return None
    return keys_of(tenant).filter(prefix=prefix).first()


def issuer_for(tenant: Tenant) -> OidcIssuer | None:
    return OidcIssuer.objects.filter(tenant=tenant).first()


def agents_of(tenant: Tenant) -> QuerySet[Agent]:
    return Agent.objects.filter(tenant=tenant).select_related("tenant")


def agent_of(tenant: Tenant, slug: str) -> Agent | None:
    return agents_of(tenant).filter(slug=slug).first()


def hosts_of(agent: Agent) -> QuerySet[AgentHost]:
    return AgentHost.objects.filter(agent=agent)


def host_of(agent: Agent, host: str) -> AgentHost | None:
    """The agent's claim or binding of `host` (a name as typed: any case, a final dot, IDNA or not)."""
    name = host_name(host) if _storable(host, 300) else None
    # Looked up even for no name, so that what matches nothing costs what a name would.
    return hosts_of(agent).filter(host=name or "").first()


def host_proven_by_another(agent: Agent, name: str) -> bool:
    """Whether another agent's claim of `name` (a stored, normalised name) was proven."""
    return AgentHost.objects.filter(host=name, proven_at__isnull=False).exclude(agent=agent).exists()


# --- keyset pages ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    items: list[Any]
    next_cursor: str | None


def _encode(*values: Any) -> str:
    return base64.urlsafe_b64encode("|".join(map(str, values)).encode()).decode().rstrip("=")


def _decode(cursor: str, parts: int) -> list[str]:
    try:
        values = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().split("|")
    except (binascii.Error, ValueError):
        raise BadCursor("not a cursor this API handed out") from None
    if len(values) != parts:
        raise BadCursor("not a cursor this API handed out")
    return values


def page_by_pk(queryset: QuerySet, *, cursor: str | None, size: int, newest_first: bool = False) -> Page:
    """One page in primary-key order, after the cursor's key."""
    queryset = queryset.order_by("-pk" if newest_first else "pk")
    if cursor:
        try:
            after = int(_decode(cursor, 1)[0])
        except ValueError:
            raise BadCursor("not a cursor this API handed out") from None
        queryset = queryset.filter(pk__lt=after) if newest_first else queryset.filter(pk__gt=after)
    rows = list(queryset[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    return Page(rows, _encode(rows[-1].pk) if more and rows else None)


# --- tasks ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskFilter:
    """The admin's filters and search (tasks_app.admin_list) as the API takes them."""

    agent: str | None = None
    states: tuple[str, ...] = ()
    dialect: str | None = None
    owner: str | None = None
    changed_after: datetime | None = None
    changed_before: datetime | None = None
    q: str | None = None


def tasks_of(tenant: Tenant, found: TaskFilter) -> QuerySet[Task]:
    tasks = Task.objects.filter(tenant=tenant).select_related("agent")
    if found.agent:
        tasks = tasks.filter(agent__slug=found.agent, agent__tenant=tenant)
    if found.states:
        tasks = tasks.filter(state__in=found.states)
    if found.dialect:
        tasks = tasks.filter(dialect=found.dialect)
    if found.owner:
        tasks = tasks.filter(owner=found.owner)
    if found.changed_after:
        tasks = tasks.filter(status_timestamp__gte=found.changed_after)
    if found.changed_before:
        tasks = tasks.filter(status_timestamp__lt=found.changed_before)
    term = (found.q or "").strip()
    if term:
        tasks = tasks.filter(matching_task_ids(term, connections[tasks.db].vendor, [tenant.pk]))
    return tasks


def task_page(tenant: Tenant, found: TaskFilter, *, cursor: str | None, size: int) -> Page:
    """Newest change first (the admin's order), a page after the cursor's task."""
    tasks = tasks_of(tenant, found).order_by("-status_timestamp", "-id")
    if cursor:
        stamp, pk = _decode(cursor, 2)
        try:
            at, key = datetime.fromisoformat(stamp), uuid.UUID(pk)
        except ValueError:
            raise BadCursor("not a cursor this API handed out") from None
        tasks = tasks.filter(Q(status_timestamp__lt=at) | Q(status_timestamp=at, id__lt=key))
    rows = list(tasks[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    last = rows[-1] if rows else None
    return Page(rows, _encode(last.status_timestamp.isoformat(), last.pk) if more and last else None)


def task_of(tenant: Tenant, task_id: str) -> Task | None:
    try:
        pk = uuid.UUID(task_id)
    except ValueError:
        return None
    return Task.objects.select_related("agent").filter(tenant=tenant, pk=pk).first()


# --- push -----------------------------------------------------------------------------------


def push_configs_of(tenant: Tenant, *, task_id: str | None = None) -> QuerySet[PushConfig]:
    configs = PushConfig.objects.filter(task__tenant=tenant, deleted_at__isnull=True)
    if task_id:
        try:
            configs = configs.filter(task_id=uuid.UUID(task_id))
        except ValueError:
            return configs.none()
    return configs


def push_config_of(tenant: Tenant, pk: int) -> PushConfig | None:
    return push_configs_of(tenant).filter(pk=pk).first()


def deliveries_of(tenant: Tenant, *, state: str | None = None, task_id: str | None = None) -> QuerySet[PushDelivery]:
    deliveries = PushDelivery.objects.filter(config__task__tenant=tenant).select_related("config")
    if state:
        deliveries = deliveries.filter(state=state)
    if task_id:
        try:
            deliveries = deliveries.filter(config__task_id=uuid.UUID(task_id))
        except ValueError:
            return deliveries.none()
    return deliveries


def delivery_of(tenant: Tenant, pk: int) -> PushDelivery | None:
    return deliveries_of(tenant).filter(pk=pk).first()


# --- AIP group memberships ------------------------------------------------------------------


@dataclass(frozen=True)
class MembershipFilter:
    """The admin's filters and search (groups.admin) as the API takes them."""

    agent: str | None = None
    state: str | None = None
    credential: str | None = None
    muted: bool | None = None
    q: str | None = None


def memberships_of(tenant: Tenant, found: MembershipFilter) -> QuerySet[GroupMembership]:
    memberships = group_selectors.memberships_of_tenant(tenant.pk)
    if found.agent:
        memberships = memberships.filter(agent__slug=found.agent)
    if found.state:
        memberships = memberships.filter(state=found.state)
    if found.credential is not None:
        memberships = memberships.filter(credential=found.credential)
    if found.muted is not None:
        memberships = memberships.filter(muted=found.muted)
    term = (found.q or "").strip()
    if term:
        memberships = memberships.filter(Q(group_id=term) | Q(leader_aic=term) | Q(member_aic=term) | Q(owner=term))
    return memberships


def membership_of(tenant: Tenant, pk: int) -> GroupMembership | None:
    return group_selectors.membership_of_tenant(tenant.pk, pk)


def membership_tasks(membership: GroupMembership, *, page: int, per_page: int) -> tuple[list[GroupTask], int, int]:
    """A page of the tasks the member took (oldest first), the page shown and how many there are."""
    tasks = group_selectors.membership_tasks(membership.pk)
    pages = max(1, -(-tasks.count() // per_page))
    page = min(page, pages)
    return list(tasks[(page - 1) * per_page : page * per_page]), page, pages
