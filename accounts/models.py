from __future__ import annotations

from django.core.validators import validate_slug
from django.db import models

SLUG_LENGTH = 64


class Tenant(models.Model):
    """An organisation hosting agents; the first path segment of every agent URL."""

    slug = models.SlugField(max_length=SLUG_LENGTH, unique=True, validators=[validate_slug])
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    # Its name is on every card of its agents (the provider): a card's Last-Modified needs it.
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Agent(models.Model):
    """A hosted agent: its card's content and which executor runs its logic."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="agents")
    slug = models.SlugField(max_length=SLUG_LENGTH, validators=[validate_slug])
    name = models.CharField(max_length=200)
    description = models.TextField()
    version = models.CharField(max_length=50, default="1.0.0")
    skills = models.JSONField(
        default=list,
        blank=True,
        help_text='A2A skills: [{"id", "name", "description", "tags", "examples", "inputModes", "outputModes"}]',
    )
    input_modes = models.JSONField(default=list, blank=True, help_text="Media types the agent accepts.")
    output_modes = models.JSONField(default=list, blank=True, help_text="Media types the agent produces.")
    executor = models.CharField(max_length=64, help_text="Name of a registered executor (tasks_app.executors).")
    settings = models.JSONField(default=dict, blank=True, help_text="Executor settings.")
    extensions = models.JSONField(
        default=list,
        blank=True,
        help_text='A2A extensions: [{"uri", "description", "required", "params"}]. A request that does not '
        "activate a required one (A2A-Extensions header) is refused with ExtensionSupportRequired.",
    )
    has_extended_card = models.BooleanField(
        default=False, help_text="Declare an extended card for authenticated callers (GetExtendedAgentCard)."
    )
    extended_card = models.JSONField(
        null=True,
        blank=True,
        help_text='Card members that authenticated callers see in addition, e.g. {"skills": [...]}.',
    )
    streaming = models.BooleanField(
        default=True, help_text="Offer live streams (SendStreamingMessage, SubscribeToTask) over SSE."
    )
    push_notifications = models.BooleanField(
        default=True, help_text="Offer push notifications (push config methods and inline configs)."
    )
    is_public = models.BooleanField(default=False, help_text="Public agents need no API key.")
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


class ApiKeyQuerySet(models.QuerySet):
    def active(self) -> ApiKeyQuerySet:
        return self.filter(revoked_at__isnull=True)


class ApiKey(models.Model):
    """A tenant's API key. Only a SHA-256 of the secret is stored.

    Keys carry 256 bits of randomness, so a fast hash is enough (no stretching needed,
    unlike passwords) and verifying one costs microseconds on every request.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    principal = models.CharField(
        max_length=150,
        help_text="Who the caller is: tasks created with this key belong to this principal.",
    )
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
