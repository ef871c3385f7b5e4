"""Every read of group mode."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts import sealing

from . import credentials
from .models import LIVE_STATES, Credential, GroupMembership, GroupTask, MembershipState


def _with_credentials(memberships: QuerySet[GroupMembership]) -> QuerySet[GroupMembership]:
    # The agent with its tenant's issuer, the key and the agents the key is limited to: all a
    # credential check reads (two queries for any number of memberships).
    return memberships.select_related("agent__tenant__oidc_issuer", "api_key").prefetch_related("api_key__agents")


def _key_agent_ids(membership: GroupMembership) -> frozenset[int] | None:
    if membership.api_key is None:
        return None
    ids = frozenset(agent.pk for agent in membership.api_key.agents.all())
    return ids or None


def memberships_active() -> list[tuple[GroupMembership, str | None]]:
    """What the runner consumes: every active membership, with its agent and tenant, and why
    its Leader's credential no longer lets it act (None while it does)."""
    now = timezone.now()
    found = _with_credentials(GroupMembership.objects.filter(state=MembershipState.ACTIVE))
    return [(m, credentials.lapse_reason(m, now=now, key_agent_ids=_key_agent_ids(m))) for m in found]


def membership_check(pk: int) -> tuple[GroupMembership | None, str | None]:
    """The membership if it is still active, and why its credential no longer lets it act
    (None while it does): read afresh for each Leader message."""
    found = _with_credentials(GroupMembership.objects.filter(pk=pk, state=MembershipState.ACTIVE)).first()
    if found is None:
        return None, None
    return found, credentials.lapse_reason(found, now=timezone.now(), key_agent_ids=_key_agent_ids(found))


def memberships_live_count(*, tenant_id: int, owner: str | None, exclude: dict[str, object]) -> int:
    """The caller's joining or active memberships on the tenant's agents (`owner` None: the
    anonymous callers', all of them together), but the one `exclude` names (being replaced)."""
    live = GroupMembership.objects.filter(agent__tenant_id=tenant_id, state__in=LIVE_STATES)
    anonymous = Q(credential=Credential.ANONYMOUS)
    live = live.filter(anonymous) if owner is None else live.exclude(anonymous).filter(owner=owner)
    return live.exclude(**exclude).count()


def access_token(membership: GroupMembership) -> str:
    """The Leader's token, for the connection only: never logged, never shown."""
    return sealing.unseal(membership.access_token_sealed)


def group_tasks_open(membership_pk: int) -> list[GroupTask]:
    """The tasks a member took whose last update has not gone out yet (to resume after a restart)."""
    return list(GroupTask.objects.filter(membership_id=membership_pk, done=False).order_by("pk"))


def group_task_find(membership_pk: int, task_key: str) -> GroupTask | None:
    return GroupTask.objects.filter(membership_id=membership_pk, task_id=task_key).first()


# --- a tenant's memberships, as its members read them (the admin, the tenant API) ------------


def memberships_of_tenant(tenant_id: int) -> QuerySet[GroupMembership]:
    """The group memberships of the tenant's agents, with the agent and the Leader's credential
    (the key, the issuer) it came by. The sealed access token is deferred: it is never shown."""
    return (
        GroupMembership.objects.filter(agent__tenant_id=tenant_id)
        .select_related("agent", "api_key", "oidc_issuer")
        .defer("access_token_sealed")
    )


def membership_of_tenant(tenant_id: int, pk: int) -> GroupMembership | None:
    return memberships_of_tenant(tenant_id).filter(pk=pk).first()


def membership_tasks(membership_pk: int) -> QuerySet[GroupTask]:
    """The tasks a member took in its group, oldest first (the admin's inline)."""
    return GroupTask.objects.filter(membership_id=membership_pk).order_by("pk")
