"""Every read of group mode."""

from __future__ import annotations

from accounts import sealing

from .models import GroupMembership, GroupTask, MembershipState


def memberships_active() -> list[GroupMembership]:
    """What the runner consumes: every active membership, with its agent and tenant."""
    return list(
        GroupMembership.objects.filter(state=MembershipState.ACTIVE, agent__is_active=True).select_related(
            "agent__tenant"
        )
    )


def access_token(membership: GroupMembership) -> str:
    """The Leader's token, for the connection only: never logged, never shown."""
    return sealing.unseal(membership.access_token_sealed)


def group_tasks_open(membership_pk: int) -> list[GroupTask]:
    """The tasks a member took whose last update has not gone out yet (to resume after a restart)."""
    return list(GroupTask.objects.filter(membership_id=membership_pk, done=False).order_by("pk"))


def group_task_find(membership_pk: int, task_key: str) -> GroupTask | None:
    return GroupTask.objects.filter(membership_id=membership_pk, task_id=task_key).first()
