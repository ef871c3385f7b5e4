"""Push notifications: the configs clients register on their tasks, the delivery log, and
the keys that sign every notification.

Delivery is a cursor per config (`delivered_seq`): every TaskEvent of the task with a larger
seq is still due, in seq order. See push/delivery.py for how the cursor moves.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from accounts.storable import ID_LENGTH, SCHEME_LENGTH, URL_LENGTH
from tasks_app.models import Task, TaskEvent


class ConfigStatus(models.TextChoices):
    ACTIVE = "active"
    # Delivery of one event ran out of attempts (or its destination was refused): the config
    # stops there, so nothing is delivered out of order. "Retry dead deliveries" in the admin
    # resumes it from that event.
    DEAD = "dead"


class PushConfigQuerySet(models.QuerySet):
    def live(self) -> PushConfigQuerySet:
        """Configs that still get deliveries: not dead, not deleted."""
        return self.filter(status=ConfigStatus.ACTIVE, deleted_at__isnull=True)

    def free(self, now) -> PushConfigQuerySet:
        """Configs no live job holds and that are not waiting out a backoff."""
        return self.filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now)).filter(
            Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
        )


class PushConfig(models.Model):
    """A TaskPushNotificationConfig: where and how to tell a client about its task's events."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="push_configs")
    config_id = models.CharField(max_length=ID_LENGTH, help_text="The A2A config id (the client's, or a server UUID).")
    url = models.URLField(max_length=URL_LENGTH)
    auth_scheme = models.CharField(max_length=SCHEME_LENGTH, blank=True, default="")
    # Fernet tokens (accounts.sealing); never shown in the admin or logged.
    credentials_sealed = models.TextField(blank=True, default="", editable=False)
    token_sealed = models.TextField(blank=True, default="", editable=False)
    status = models.CharField(max_length=8, choices=ConfigStatus.choices, default=ConfigStatus.ACTIVE)
    delivered_seq = models.PositiveIntegerField(
        default=0, help_text="Every event of the task up to this seq was delivered (or predates the config)."
    )
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="After a failed attempt: no delivery to this config before then."
    )
    # A delivery job owns the config while lease_until is in the future (compare-and-set on
    # lease_token); a job that died loses it when the lease runs out.
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    lease_until = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True, help_text="Deleted by the client; kept for the log.")
    # The states whose status events are delivered (AIP's notifyOnStates), in the store's
    # names; empty: every event.
    notify_on_states = models.JSONField(default=list, blank=True, db_default=[])

    objects = PushConfigQuerySet.as_manager()

    class Meta:
        verbose_name = "push config"
        constraints = [
            models.UniqueConstraint(
                fields=["task", "config_id"],
                condition=Q(deleted_at__isnull=True),
                name="push_config_unique_id_per_task",
            ),
            models.CheckConstraint(condition=Q(status__in=ConfigStatus.values), name="push_config_status_valid"),
        ]
        indexes = [
            # The sweeper: live configs that may still have events due.
            models.Index(
                fields=["lease_until"],
                condition=Q(status=ConfigStatus.ACTIVE, deleted_at__isnull=True),
                name="push_config_live",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.config_id} on {self.task_id}"


class PendingPushConfig(models.Model):
    """A config a client registered for a task it has not started yet, under the id it will
    give the task (AIP: notification/set, then notification/start naming the config). Starting
    the task moves it onto the task as a PushConfig (push.services.config_attach). One not set
    again for PUSH_PENDING_CONFIG_TTL seconds has expired: it is ignored, then swept."""

    agent = models.ForeignKey("accounts.Agent", on_delete=models.CASCADE, related_name="+")
    owner = models.CharField(max_length=150)
    client_task_id = models.CharField(max_length=ID_LENGTH)
    config_id = models.CharField(max_length=ID_LENGTH)
    url = models.URLField(max_length=URL_LENGTH)
    auth_scheme = models.CharField(max_length=SCHEME_LENGTH, blank=True, default="")
    credentials_sealed = models.TextField(blank=True, default="", editable=False)
    token_sealed = models.TextField(blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "push config awaiting its task"
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "owner", "client_task_id", "config_id"], name="push_pending_unique_id_per_task"
            ),
        ]
        indexes = [
            # The sweep of expired ones (push.services.pending_configs_sweep).
            models.Index(fields=["updated_at"], name="push_pending_updated"),
        ]

    def __str__(self) -> str:
        return f"{self.config_id} awaiting {self.client_task_id}"


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"


class PushDelivery(models.Model):
    """One event to one config, with its attempts."""

    config = models.ForeignKey(PushConfig, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(TaskEvent, on_delete=models.CASCADE, related_name="+")
    seq = models.PositiveIntegerField()
    state = models.CharField(max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveSmallIntegerField(
        default=0, help_text="Attempts counted against PUSH_MAX_ATTEMPTS (a retry from the admin resets it)."
    )
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "push deliveries"
        constraints = [
            models.UniqueConstraint(fields=["config", "seq"], name="push_delivery_unique_seq"),
            models.CheckConstraint(condition=Q(state__in=DeliveryState.values), name="push_delivery_state_valid"),
        ]
        indexes = [
            # The admin's default listing, newest first, and its "dead" filter.
            models.Index(fields=["state", "-created_at"], name="push_delivery_by_state"),
            models.Index(fields=["-created_at"], name="push_delivery_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.event_id_text} -> {self.config.config_id} ({self.state})"

    @property
    def event_id_text(self) -> str:
        """The id receivers deduplicate on: `<task id>:<seq>`."""
        return f"{self.config.task_id}:{self.seq}"


class PushAttempt(models.Model):
    """One POST (or a refusal to make it) and how it went."""

    delivery = models.ForeignKey(PushDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    started_at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True, help_text="None: no HTTP answer.")
    latency_ms = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    jti = models.CharField(max_length=64, blank=True, default="", help_text="The signature's unique id.")

    class Meta:
        indexes = [models.Index(fields=["delivery", "id"], name="push_attempt_per_delivery")]

    def __str__(self) -> str:
        return f"{self.started_at:%Y-%m-%d %H:%M:%S} {self.status_code or self.error[:40]}"


class KeyPurpose(models.TextChoices):
    """What a key signs. Each purpose has its own keys and its own JWKS, so a verifier that
    trusts one kind of statement is never handed a key that signs another."""

    PUSH = "push", "push notifications"
    CARD = "card", "agent cards"
    DIRECTORY = "directory", "directory attestations"


class SigningKey(models.Model):
    """An ES256 key of the server that signs one kind of statement (its `purpose`); its public
    half is in that purpose's JWKS while it may have signatures in flight.

    Timeline: published at `created_at`; signs from `signs_from` (a rotation leaves a delay so
    receivers that cache the JWKS see the key first); a newer key takes over at
    `signs_until`; it leaves the JWKS at `unpublish_at`, once its last signature has expired.
    """

    kid = models.CharField(max_length=64, unique=True)
    purpose = models.CharField(max_length=16, choices=KeyPurpose.choices, default=KeyPurpose.PUSH)
    private_key_sealed = models.TextField(editable=False, help_text="PEM (PKCS#8), Fernet-encrypted.")
    public_jwk = models.JSONField()
    created_at = models.DateTimeField()
    signs_from = models.DateTimeField()
    signs_until = models.DateTimeField(null=True, blank=True)
    unpublish_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["purpose", "-signs_from"], name="push_signingkey_purpose_newest")]
        constraints = [
            models.CheckConstraint(
                condition=Q(signs_from__gte=models.F("created_at")), name="push_signingkey_published_before_signing"
            ),
        ]

    def __str__(self) -> str:
        return self.kid
