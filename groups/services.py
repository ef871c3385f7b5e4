"""Every write of group mode. Short transactions, never across network I/O: the invitation
records a joining membership, connects outside any transaction, then records the outcome."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts import sealing
from accounts.models import Agent, Tenant

from . import selectors
from .credentials import Binding
from .errors import GroupNotSupported
from .invitation import Invitation
from .models import LIVE_STATES, Credential, GroupMembership, GroupTask, MembershipState


def membership_begin(
    *,
    agent: Agent,
    owner: str,
    invitation: Invitation,
    address: str,
    member_aic: str,
    username: str,
    queue: str,
    connection_name: str,
    binding: Binding,
) -> GroupMembership:
    """Record a joining membership, tied to the credential that made it. A live one of the
    same agent, group and owner is the Leader's earlier invitation: this one replaces it (same
    queue, new server and token). GroupNotSupported when the caller has as many live
    memberships on the tenant's agents as it may."""
    now = timezone.now()
    with transaction.atomic():
        # One invitation of a tenant at a time counts and records: two at once cannot both
        # take the last place under the cap.
        Tenant.objects.select_for_update().filter(pk=agent.tenant_id).first()
        membership_cap_check(agent=agent, owner=owner, group_id=invitation.group_id, binding=binding)
        GroupMembership.objects.filter(
            agent=agent, group_id=invitation.group_id, owner=owner, state__in=LIVE_STATES
        ).update(state=MembershipState.LEFT, state_reason="replaced by a new invitation", left_at=now, updated_at=now)
        return GroupMembership.objects.create(
            agent=agent,
            owner=owner,
            group_id=invitation.group_id,
            leader_aic=invitation.leader_aic,
            member_aic=member_aic,
            protocol=invitation.protocol,
            partners=invitation.partners,
            host=invitation.host,
            address=address,
            port=invitation.port,
            vhost=invitation.vhost,
            username=username,
            access_token_sealed=sealing.seal(invitation.access_token),
            exchange=invitation.exchange,
            exchange_type=invitation.exchange_type,
            routing_key=invitation.routing_key,
            queue=queue,
            connection_name=connection_name,
            credential=binding.credential,
            api_key_id=binding.api_key_id,
            oidc_issuer_id=binding.oidc_issuer_id,
            credential_expires_at=binding.expires_at,
            rate_identity=binding.rate_identity,
        )


def membership_cap_check(*, agent: Agent, owner: str, group_id: str, binding: Binding) -> None:
    """GroupNotSupported when the caller may not have one more live membership."""
    anonymous = binding.credential == Credential.ANONYMOUS
    tenant = agent.tenant
    if anonymous:
        own = tenant.max_anonymous_group_memberships
        cap = settings.GROUP_MAX_ANONYMOUS_MEMBERSHIPS if own is None else own
    else:
        own = tenant.max_group_memberships_per_caller
        cap = settings.GROUP_MAX_MEMBERSHIPS_PER_CALLER if own is None else own
    if anonymous and cap <= 0:
        raise GroupNotSupported(
            "Group communication is not supported without credentials on this server: "
            "send an API key or a bearer token to invite this agent into a group"
        )
    replaced = {"agent": agent, "group_id": group_id, "owner": owner}  # this invitation replaces it
    held = selectors.memberships_live_count(
        tenant_id=agent.tenant_id, owner=None if anonymous else owner, exclude=replaced
    )
    if held >= cap:
        who = "callers without credentials have" if anonymous else "this caller has"
        raise GroupNotSupported(
            f"Group communication is not supported for this invitation: {who} {held} group memberships "
            f"on this tenant's agents, the most allowed ({cap}); a Leader frees one with leave-group"
        )


def _move(pk: int, *, to: MembershipState, reason: str = "", **fields: object) -> bool:
    """Move a live membership to `to`; False if it is no longer live (left meanwhile)."""
    now = timezone.now()
    if to in (MembershipState.LEFT, MembershipState.FAILED):
        fields["left_at"] = now
    moved = GroupMembership.objects.filter(pk=pk, state__in=LIVE_STATES).update(
        state=to, state_reason=reason, updated_at=now, **fields
    )
    return moved == 1


def membership_activate(*, membership_pk: int, node_name: str) -> bool:
    return _move(membership_pk, to=MembershipState.ACTIVE, node_name=node_name[:255], joined_at=timezone.now())


def membership_fail(*, membership_pk: int, reason: str) -> bool:
    return _move(membership_pk, to=MembershipState.FAILED, reason=reason)


def membership_leave(*, membership_pk: int, reason: str) -> bool:
    return _move(membership_pk, to=MembershipState.LEFT, reason=reason)


def membership_mute(*, membership_pk: int, muted: bool) -> None:
    GroupMembership.objects.filter(pk=membership_pk).update(muted=muted, updated_at=timezone.now())


def group_task_take(*, membership_pk: int, task_key: str) -> GroupTask:
    """The member follows this task from now on (once: a redelivered start finds it)."""
    found, _ = GroupTask.objects.get_or_create(membership_id=membership_pk, task_id=task_key)
    return found


def group_task_published(*, group_task_pk: int, seq: int, done: bool) -> None:
    """Updates up to `seq` went out (never moves back: two publishers may race on a restart)."""
    GroupTask.objects.filter(pk=group_task_pk, published_seq__lte=seq).update(published_seq=seq, done=done)
