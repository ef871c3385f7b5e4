from __future__ import annotations

from django.conf import settings
from django.core.validators import URLValidator, validate_slug
from django.db import models
from django.db.models import Q

from .card_content import validate_extended_card, validate_extensions, validate_modes, validate_skills

SLUG_LENGTH = 64
# Principals named by the server itself carry one of these prefixes ("key:", "oidc:"), so a
# name a tenant chooses for a key can never be taken for one of them.
PRINCIPAL_NAMESPACE_SEPARATOR = ":"


class Tenant(models.Model):
    """An organisation hosting agents; the first path segment of every agent URL."""

    slug = models.SlugField(max_length=SLUG_LENGTH, unique=True, validators=[validate_slug])
    name = models.CharField(max_length=200)
    # Limits: empty means the site's default (settings); see docs/tenancy.md.
    rate_limit_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests per minute per API key or bearer subject (empty: site default)."
    )
    anonymous_rate_limit_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests per minute per anonymous client address (empty: site default)."
    )
    max_active_tasks = models.PositiveIntegerField(
        null=True, blank=True, help_text="Tasks queued or running at once, over all agents (empty: site default)."
    )
    max_request_bytes = models.PositiveIntegerField(
        null=True, blank=True, help_text="Largest request body (empty: the site's limit, which it cannot exceed)."
    )
    max_stored_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Bytes of messages and artifacts the tenant may store (empty: site default)."
    )
    max_active_anonymous_tasks = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Of the active tasks, how many callers without a key may have at once (empty: site default).",
    )
    max_push_configs_per_task = models.PositiveIntegerField(
        null=True, blank=True, help_text="Push notification configs per task (empty: site default)."
    )
    max_pending_push_configs = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="AIP push configs set ahead of their task, per caller (empty: site default).",
    )
    max_streams_per_caller = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Open SSE streams per API key, bearer subject or anonymous address (empty: site default).",
    )
    max_group_memberships_per_caller = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Live AIP group memberships per principal; 0: none allowed (empty: site default).",
    )
    max_anonymous_group_memberships = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Live AIP group memberships of all callers without credentials together; 0: none allowed "
        "(empty: site default).",
    )
    # Installed executors (plugins) this tenant's agents may use besides the built-in ones, by
    # name; the operator grants them (accounts.services.tenant_executors_set).
    allowed_executors = models.JSONField(
        default=list,
        blank=True,
        db_default=[],
        help_text="Installed executors (plugins) this tenant's agents may use, by name, besides the built-in ones.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Its name is on every card of its agents (the provider): a card's Last-Modified needs it.
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


# Links a card shows are for browsers: http(s) only (URLField alone would take ftp too).
WEB_URL = URLValidator(schemes=["http", "https"])


class Agent(models.Model):
    """A hosted agent: its card's content and which executor runs its logic."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="agents")
    slug = models.SlugField(max_length=SLUG_LENGTH, validators=[validate_slug])
    name = models.CharField(max_length=200)
    description = models.TextField()
    version = models.CharField(max_length=50, default="1.0.0")
    # Its Agent Identity Code in the ACPs family (AIP's senderId, a group's member id); empty
    # for an agent without one, which then goes by `aip_id`.
    aic = models.CharField(
        max_length=200, blank=True, default="", db_default="", verbose_name="AIC", help_text="ACPs Agent Identity Code."
    )
    # The card's provider (empty: the tenant, at this server's URL), icon and documentation.
    # Database defaults too: rows written without these columns (older code mid-deploy, a
    # migration's historical models) get empty ones.
    provider_organization = models.CharField(
        max_length=200, blank=True, default="", db_default="", help_text="Empty: the tenant's name."
    )
    provider_url = models.URLField(
        max_length=500,
        blank=True,
        default="",
        db_default="",
        validators=[WEB_URL],
        help_text="Empty: this server's URL.",
    )
    icon_url = models.URLField(max_length=500, blank=True, default="", db_default="", validators=[WEB_URL])
    documentation_url = models.URLField(max_length=500, blank=True, default="", db_default="", validators=[WEB_URL])
    skills = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_skills],
        help_text='A2A skills: [{"id", "name", "description", "tags", "examples", "inputModes", "outputModes"}]',
    )
    input_modes = models.JSONField(
        default=list, blank=True, validators=[validate_modes], help_text="Media types the agent accepts."
    )
    output_modes = models.JSONField(
        default=list, blank=True, validators=[validate_modes], help_text="Media types the agent produces."
    )
    executor = models.CharField(max_length=64, help_text="Name of a registered executor (tasks_app.executors).")
    settings = models.JSONField(default=dict, blank=True, help_text="Executor settings.")
    # The executor's secret (a webhook agent's signing secret, a fronted agent's credential for
    # its upstream), sealed (accounts.sealing): never shown, logged or put on a card.
    secret_sealed = models.TextField(blank=True, default="", db_default="", editable=False)
    extensions = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_extensions],
        help_text='A2A extensions: [{"uri", "description", "required", "params"}]. A request that does not '
        "activate a required one (A2A-Extensions header) is refused with ExtensionSupportRequired.",
    )
    has_extended_card = models.BooleanField(
        default=False, help_text="Declare an extended card for authenticated callers (GetExtendedAgentCard)."
    )
    extended_card = models.JSONField(
        null=True,
        blank=True,
        validators=[validate_extended_card],
        help_text='What authenticated callers see in addition: {"skills": [...]} added to the card\'s, and '
        "description, documentationUrl, iconUrl in place of the card's. The rest of the card is the server's.",
    )
    streaming = models.BooleanField(
        default=True, help_text="Offer live streams (SendStreamingMessage, SubscribeToTask) over SSE."
    )
    push_notifications = models.BooleanField(
        default=True, help_text="Offer push notifications (push config methods and inline configs)."
    )
    is_public = models.BooleanField(
        default=False,
        help_text="Anonymous callers may use it: each of their tasks is reachable only by its id, and they "
        "cannot list tasks.",
    )
    shared_sandbox = models.BooleanField(
        default=False,
        help_text="Every caller acts as one shared principal and sees every task of this agent (for "
        "conformance suites and demos). Its card says so.",
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__slug", "slug"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "slug"], name="accounts_agent_unique_tenant_slug"),
            # What a task's (agent, tenant) foreign key points at, so that no task can belong to
            # one tenant and run on another tenant's agent (tasks_app migration 0005).
            models.UniqueConstraint(fields=["id", "tenant"], name="accounts_agent_unique_id_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.slug}"

    @property
    def path(self) -> str:
        return f"/agents/{self.tenant.slug}/{self.slug}/"

    @property
    def aip_id(self) -> str:
        """Who it is to AIP peers (its senderId): its AIC, else its tenant's and its slugs."""
        return self.aic or f"{self.tenant.slug}/{self.slug}"


class Role(models.TextChoices):
    """What a member may do in the admin, each including the one below it."""

    OWNER = "owner", "owner: members and API keys"
    OPERATOR = "operator", "operator: cancel tasks, retry deliveries"
    VIEWER = "viewer", "viewer: read"


class Membership(models.Model):
    """A Django user's role in one tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="accounts_membership_one_per_tenant"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="accounts_membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant.slug} ({self.role})"


class InvitationAnswer(models.TextChoices):
    """How an invitation ended; empty while it is pending (or lapsed unanswered)."""

    PENDING = "", "pending"
    ACCEPTED = "accepted", "accepted"
    DECLINED = "declined", "declined"
    REVOKED = "revoked", "revoked"


class MembershipInvitation(models.Model):
    """An invitation to a tenant, addressed to a username, that becomes a Membership only when
    that user accepts it. It is stored whether or not such a user exists (the inviter must not
    learn who has an account), and its token is kept as a SHA-256 only."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    username = models.CharField(max_length=150)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    # A user, or empty when a management key or an issuer's token invited (`invited_as` says who).
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    invited_as = models.CharField(max_length=200, blank=True, default="", help_text="Who invited, as shown.")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    answer = models.CharField(max_length=16, choices=InvitationAnswer.choices, blank=True, default="")
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "membership invitation"
        constraints = [
            # A new invitation of the same user replaces the pending one (membership_invite).
            models.UniqueConstraint(
                fields=["tenant", "username"], condition=Q(answer=""), name="accounts_invitation_one_pending"
            ),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="accounts_invitation_role_valid"),
            models.CheckConstraint(
                condition=Q(answer__in=InvitationAnswer.values), name="accounts_invitation_answer_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.username} to {self.tenant.slug} ({self.role})"


class StaffByMembership(models.Model):
    """The user's is_staff was given by accepting a membership (they were not staff before): it is
    taken back when their last membership ends. Staff given any other way (a superuser, the
    add_curator command) has no row and stays."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="staff_by_membership")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "staff by membership"
        verbose_name_plural = "staff by membership"

    def __str__(self) -> str:
        return str(self.user)


class ApiKeyQuerySet(models.QuerySet):
    def active(self) -> ApiKeyQuerySet:
        return self.filter(revoked_at__isnull=True)


# oidc:<issuer>#<subject>: an issuer URL (500) and a subject (protocols.oidc, 140) with room to spare.
MADE_BY_LENGTH = 700


class ApiKey(models.Model):
    """A tenant's API key: a caller of the tenant's agents (all, or those listed). Only a
    SHA-256 of the secret and a short public prefix are stored.

    Keys carry 256 bits of randomness, so a fast hash is enough (no stretching needed,
    unlike passwords) and verifying one costs microseconds on every request.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    principal = models.CharField(
        max_length=150,
        help_text="Who the caller is: its tasks belong to this principal. Keys naming the same principal "
        "share their tasks; a key made without one is its own principal (key:<prefix>).",
    )
    agents = models.ManyToManyField(
        Agent, blank=True, related_name="+", help_text="Only these agents of the tenant (none: all of them)."
    )
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Refused from this time on, at most API_KEY_MAX_LIFETIME away. A new key made without one "
        "expires API_KEY_DEFAULT_LIFETIME after it is made; empty on a stored key: never.",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    # A key that also manages its tenant through the tenant API (/api/v1/), with this role's
    # rights there (as a member with it has in the admin); empty: it calls agents only.
    management_role = models.CharField(
        max_length=16,
        choices=Role.choices,
        blank=True,
        default="",
        db_default="",
        help_text="With a role, the key may also manage the tenant through its API (/api/v1/) with that "
        "role's rights; empty: it calls agents only.",
    )
    # Who made the key (accounts.services.api_key_create's `made_by`), so that an owner can find
    # and revoke, in one call, every key a leaked credential made; empty for keys made before.
    made_by = models.CharField(
        max_length=MADE_BY_LENGTH,
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text="Who made the key: key:<prefix> (a key, through the tenant API), oidc:<issuer>#<subject> "
        "(a bearer token, through the tenant API), admin:<username>, or command:<name>; empty: made before "
        "this was recorded.",
    )
    # Written at most once a minute per key and process (accounts.selectors), never per request.
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"
        constraints = [
            models.CheckConstraint(condition=~Q(principal=""), name="accounts_apikey_principal_not_blank"),
            models.CheckConstraint(
                condition=Q(management_role__in=["", *Role.values]), name="accounts_apikey_management_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class OidcIssuer(models.Model):
    """An OpenID Connect issuer whose access tokens (JWTs) the tenant accepts as bearer tokens.
    The token's subject is the principal (oidc:<sub>)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="oidc_issuer")
    issuer = models.URLField(max_length=500, help_text="The tokens' iss, exactly.")
    audience = models.CharField(max_length=500, help_text="The aud a token must carry.")
    jwks_url = models.URLField(
        max_length=500, help_text="Where the signing keys are (fetched through the outbound guard, cached)."
    )
    # Tokens of this issuer may manage the tenant through its API (/api/v1/) when they carry
    # this claim naming a role (viewer, operator, owner); empty: they call agents only.
    role_claim = models.CharField(
        max_length=100,
        blank=True,
        default="",
        db_default="",
        help_text="A claim naming the token's role in the tenant API (viewer, operator or owner); empty: "
        "this issuer's tokens call agents only.",
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "OpenID Connect issuer"

    def __str__(self) -> str:
        return f"{self.issuer} for {self.tenant.slug}"


class HostProof(models.TextChoices):
    """How the right to a host name was shown (docs/tenancy.md, "Agents at their own host names")."""

    OPERATOR = "operator", "Bound by the server's operator"
    DNS = "dns", "A DNS TXT record"
    HTTP = "http", "A token at a well-known path"


class RootCard(models.TextChoices):
    DEFAULT = "", "The default (A2A 1.0)"
    A2A_0_3 = "0.3", "A2A 0.3"


class AgentHost(models.Model):
    """A host name at whose root one agent answers: its card at /.well-known/agent-card.json,
    its endpoints at /. A tenant's claim is pending (`proven_at` empty, served nowhere) until
    the token is found on the host (the registry's DNS TXT or well-known proof); the operator
    binds any name at once. A name is served for one agent only; pending claims of it may be
    several (whoever proves first takes it)."""

    host = models.CharField(max_length=253, help_text="Lower-case, IDNA-encoded, without a port.")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="hosts")
    card_version = models.CharField(
        max_length=8,
        choices=RootCard.choices,
        blank=True,
        help_text="The card a request that names no A2A version gets at this name's root: the default's "
        "(1.0), or 0.3's for clients that read the root's card without saying which (A2A 0.3 clients, "
        "the 0.3 conformance suite).",
    )
    proof = models.CharField(max_length=8, choices=HostProof.choices, blank=True)
    proof_token = models.CharField(max_length=100, blank=True, editable=False)
    proven_at = models.DateTimeField(null=True, blank=True, editable=False)
    bound_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["host"]
        verbose_name = "host name"
        constraints = [
            models.UniqueConstraint(
                fields=["host"], condition=Q(proven_at__isnull=False), name="accounts_agenthost_one_bound_per_host"
            ),
            models.UniqueConstraint(fields=["host", "agent"], name="accounts_agenthost_one_claim_per_agent"),
            models.CheckConstraint(
                condition=Q(proof__in=[*HostProof.values, ""]), name="accounts_agenthost_proof_valid"
            ),
            models.CheckConstraint(
                condition=Q(proven_at__isnull=True) | ~Q(proof=""), name="accounts_agenthost_bound_has_proof"
            ),
            models.CheckConstraint(
                condition=Q(card_version__in=RootCard.values), name="accounts_agenthost_card_version_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.host

    @property
    def is_bound(self) -> bool:
        return self.proven_at is not None
