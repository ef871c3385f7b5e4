"""Group memberships: an agent in an AIP group (seed section 7) on behalf of the Leader that
invited it, and the tasks it took there.

A membership is what the group runner (`manage.py aip_groups`) consumes: one consumer per
active membership, for as long as the credential that made it would still let the Leader call
the agent (groups.credentials). The Leader's access token is sealed (accounts.sealing), never
shown.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from accounts.models import Agent, ApiKey, OidcIssuer
from accounts.storable import ID_LENGTH
from tasks_app.models import Task

from .invitation import AMQP_NAME_BYTES


class MembershipState(models.TextChoices):
    JOINING = "joining"  # the invitation is being answered: connecting, binding the queue
    ACTIVE = "active"  # the runner consumes its queue
    LEFT = "left"  # the Leader asked it to leave (or a later invitation replaced it)
    FAILED = "failed"  # it could not join, or lost the group for good (the reason says)


LIVE_STATES = (MembershipState.JOINING, MembershipState.ACTIVE)


class Credential(models.TextChoices):
    """What let the Leader invite the agent: the membership lasts only while it would still let
    the Leader call the agent (groups.credentials)."""

    KEY = "key"  # an API key (`api_key`)
    BEARER = "bearer"  # a bearer token of the tenant's OIDC issuer (`oidc_issuer`), until its exp
    ANONYMOUS = "anonymous"  # nothing, on a public agent
    # A membership made before memberships were tied to credentials: ended on the next look.
    UNKNOWN = ""


class GroupMembership(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="group_memberships")
    owner = models.CharField(
        max_length=150, help_text="The principal of the Leader that invited the agent: its tasks are this owner's."
    )
    group_id = models.CharField(max_length=ID_LENGTH)
    leader_aic = models.CharField(max_length=ID_LENGTH, help_text="The Leader's AIC: only it commands the member.")
    member_aic = models.CharField(max_length=ID_LENGTH, help_text="The agent's senderId in the group.")
    protocol = models.CharField(max_length=64, help_text="As invited, e.g. rabbitmq:4.0.")
    partners = models.JSONField(default=list, blank=True, help_text="The partners' AICs, as invited.")
    host = models.CharField(max_length=255, help_text="The broker, as the Leader named it.")
    address = models.GenericIPAddressField(help_text="The address the name resolved to and passed the SSRF guard.")
    port = models.PositiveIntegerField()
    vhost = models.CharField(max_length=AMQP_NAME_BYTES)
    username = models.CharField(max_length=AMQP_NAME_BYTES, help_text="The login sent with the access token.")
    # A Fernet token (accounts.sealing); never shown in the admin or logged.
    access_token_sealed = models.TextField(editable=False)
    exchange = models.CharField(max_length=AMQP_NAME_BYTES)
    exchange_type = models.CharField(max_length=16, default="fanout")
    routing_key = models.CharField(max_length=AMQP_NAME_BYTES, blank=True, default="")
    queue = models.CharField(max_length=AMQP_NAME_BYTES, help_text="The member's own queue, bound to the exchange.")
    connection_name = models.CharField(max_length=AMQP_NAME_BYTES)
    node_name = models.CharField(max_length=255, blank=True, default="")
    state = models.CharField(max_length=8, choices=MembershipState.choices, default=MembershipState.JOINING)
    state_reason = models.TextField(blank=True, default="")
    credential = models.CharField(max_length=16, choices=Credential.choices, default=Credential.UNKNOWN, blank=True)
    # SET_NULL, not CASCADE: a deleted key or issuer ends the membership with a reason the
    # admin shows, rather than making it vanish.
    api_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    oidc_issuer = models.ForeignKey(OidcIssuer, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    credential_expires_at = models.DateTimeField(
        null=True, blank=True, help_text="A bearer token's exp: the membership ends then, at the latest."
    )
    rate_identity = models.CharField(
        max_length=300, blank=True, default="", help_text="What the rate limit counts the Leader's commands as."
    )
    muted = models.BooleanField(default=False, help_text="Muted by the Leader: task updates only when mentioned.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    joined_at = models.DateTimeField(null=True, blank=True)
    left_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "group_id", "owner"],
                condition=Q(state__in=LIVE_STATES),
                name="groups_membership_one_live_per_agent_group_owner",
            ),
            models.CheckConstraint(condition=Q(state__in=MembershipState.values), name="groups_membership_state_valid"),
            models.CheckConstraint(condition=Q(port__gte=1, port__lte=65535), name="groups_membership_port_valid"),
        ]
        indexes = [
            # The runner's poll: the memberships to consume.
            models.Index(fields=["state"], condition=Q(state="active"), name="groups_membership_active"),
        ]

    def __str__(self) -> str:
        return f"{self.member_aic} in {self.group_id} (leader {self.leader_aic}, {self.state})"


# What a reader of a membership (the admin, the tenant API) is shown, in this order: every field
# but the sealed access token, which is not even shown sealed, and the identity the rate limit
# counts an anonymous Leader by (its address).
SHOWN_FIELDS = (
    "agent",
    "owner",
    "member_aic",
    "group_id",
    "leader_aic",
    "protocol",
    "partners",
    "host",
    "address",
    "port",
    "vhost",
    "username",
    "exchange",
    "exchange_type",
    "routing_key",
    "queue",
    "connection_name",
    "node_name",
    "state",
    "state_reason",
    "credential",
    "api_key",
    "oidc_issuer",
    "credential_expires_at",
    "muted",
    "created_at",
    "updated_at",
    "joined_at",
    "left_at",
)


class GroupTask(models.Model):
    """A task a member took in its group, and how far its updates went out to the exchange:
    the runner resumes following it from `published_seq` after a restart."""

    membership = models.ForeignKey(GroupMembership, on_delete=models.CASCADE, related_name="tasks")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    published_seq = models.PositiveIntegerField(default=0, help_text="Updates up to this event went out.")
    done = models.BooleanField(default=False, help_text="The task is over and its last update went out.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["membership", "task"], name="groups_task_one_per_membership"),
        ]

    def __str__(self) -> str:
        return f"task {self.task_id} in {self.membership_id}"
