"""The directory: entries (a hosted or a remote agent), every version of each entry's card,
the curators' decisions, flags, and the liveness checks.

An entry's listed face is its *shown* version: the approved one while there is one, else the
latest fetched. The columns and facets an entry is searched by (name, provider, tags, modes,
bindings...) are copied from that version by `registry.services`, so a card that changed
after approval cannot change what the public sees until a curator approves it.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q

from accounts.models import Agent, Tenant

from . import proofs

URL_LENGTH = 2048
HASH_LENGTH = 64  # sha256, hex


class Kind(models.TextChoices):
    HOSTED = "hosted", "Hosted here"
    REMOTE = "remote", "Remote"


class State(models.TextChoices):
    DRAFT = "draft", "Draft"
    PENDING = "pending", "Pending review"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    SUSPENDED = "suspended", "Suspended"
    DEPRECATED = "deprecated", "Deprecated"
    # An unproven draft that lapsed (REGISTRY_DRAFT_LIFETIME) or lost to another submission of
    # its card whose domain was proven first: it holds nothing, and is dropped later.
    EXPIRED = "expired", "Expired"


# An entry is public while it has an approved version and is in one of these states
# (pending: a changed card awaits review, and the approved version stays listed).
LISTED_STATES = (State.APPROVED, State.PENDING, State.DEPRECATED)


class Health(models.TextChoices):
    UNKNOWN = "unknown", "Not checked yet"
    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Failing"
    STALE = "stale", "Stale"


class Dialect(models.TextChoices):
    A2A_1_0 = "1.0", "A2A 1.0"
    A2A_0_3 = "0.3", "A2A 0.3"
    A2A_0_1 = "0.1", "A2A 0.1"
    ACS = "acs", "ACPs ACS"


class ProofMethod(models.TextChoices):
    HTTP = "http", "A token at a well-known path"
    DNS = "dns", "A DNS TXT record"
    HOSTED = "hosted", "Hosted on this server"


class EntryQuerySet(models.QuerySet["Entry"]):
    def listed(self) -> EntryQuerySet:
        return self.filter(approved_version__isnull=False, state__in=LISTED_STATES)


class Entry(models.Model):
    kind = models.CharField(max_length=8, choices=Kind.choices)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="registry_entries")
    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, null=True, blank=True, related_name="registry_entry")
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="registry_entries"
    )
    card_url = models.URLField(max_length=URL_LENGTH, help_text="Where the card is read from.")
    domain = models.CharField(max_length=255, help_text="The host of the card URL.")
    state = models.CharField(max_length=12, choices=State.choices, default=State.DRAFT)
    state_changed_at = models.DateTimeField()
    current_version = models.ForeignKey(
        "CardVersion", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    approved_version = models.ForeignKey(
        "CardVersion", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Ownership of the card's domain.
    proof_token = models.CharField(max_length=100, blank=True)
    domain_verified_at = models.DateTimeField(null=True, blank=True)
    domain_verified_by = models.CharField(max_length=8, choices=ProofMethod.choices, blank=True)
    # The proof is looked for again every REGISTRY_PROOF_RECHECK_INTERVAL (registry.freshness):
    # when it was last found, how many re-checks in a row did not find it, and when it lapsed
    # (REGISTRY_PROOF_LAPSE_AFTER_FAILURES of them: back to review until proven again).
    proof_checked_at = models.DateTimeField(null=True, blank=True)
    proof_failures = models.PositiveIntegerField(default=0)
    proof_lapsed_at = models.DateTimeField(null=True, blank=True)
    next_proof_check_at = models.DateTimeField(null=True, blank=True)
    # The shown version's index, for search and lists.
    name = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    provider = models.CharField(max_length=300, blank=True)
    endpoint_url = models.CharField(max_length=URL_LENGTH, blank=True)
    dialect = models.CharField(max_length=4, choices=Dialect.choices, blank=True)
    signed = models.BooleanField(default=False, help_text="The shown card carries a valid signature.")
    signing_kid = models.CharField(max_length=200, blank=True)
    # Postgres full-text (weighted: name, then skills and tags, then descriptions, then
    # examples), GIN-indexed by migration 0007 on Postgres only; the embedded SQLite mode
    # leaves it empty and searches with LIKE.
    search = SearchVectorField(null=True, editable=False)
    # Liveness (registry.tasks checks entries whose next_check_at has come).
    health = models.CharField(max_length=8, choices=Health.choices, default=Health.UNKNOWN)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    next_check_at = models.DateTimeField(null=True, blank=True)
    # The directory's own conformance checks of an approved entry (registry.conformance).
    conformance_at = models.DateTimeField(null=True, blank=True)
    next_conformance_at = models.DateTimeField(null=True, blank=True)
    # Search lists newest first by (listed_at DESC NULLS LAST, id DESC): migration 0008 indexes
    # exactly that on Postgres (SQLite cannot declare NULLS LAST in an index).
    listed_at = models.DateTimeField(null=True, blank=True, help_text="When it was first approved.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = EntryQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "entries"
        permissions = [("curate_entry", "Can review, approve, reject and suspend registry entries")]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=Kind.values), name="registry_entry_kind_valid"),
            models.CheckConstraint(condition=Q(state__in=State.values), name="registry_entry_state_valid"),
            models.CheckConstraint(condition=Q(health__in=Health.values), name="registry_entry_health_valid"),
            # A hosted entry is its agent's; a remote one has no agent.
            models.CheckConstraint(
                condition=Q(kind=Kind.HOSTED, agent__isnull=False) | Q(kind=Kind.REMOTE, agent__isnull=True),
                name="registry_entry_agent_iff_hosted",
            ),
            # One proven entry per remote card URL. Unproven drafts of it may be several (one per
            # submitter): whoever proves the domain first takes the card, the others expire, so
            # submitting someone else's card first holds nothing (registry.services).
            models.UniqueConstraint(
                fields=["card_url"],
                condition=Q(kind=Kind.REMOTE, domain_verified_at__isnull=False),
                name="registry_entry_remote_url_unique",
            ),
            models.UniqueConstraint(
                fields=["card_url", "submitted_by"],
                condition=Q(kind=Kind.REMOTE, state="draft"),
                name="registry_entry_one_draft_per_submitter",
            ),
            # Approval needs a proven domain.
            models.CheckConstraint(
                condition=Q(approved_version__isnull=True) | Q(domain_verified_at__isnull=False),
                name="registry_entry_approved_domain_verified",
            ),
        ]
        indexes = [
            models.Index(fields=["state", "state_changed_at"], name="registry_entry_queue"),
            models.Index(fields=["next_check_at"], name="registry_entry_due"),
            models.Index(fields=["next_conformance_at"], name="registry_entry_conformance_due"),
            models.Index(fields=["next_proof_check_at"], name="registry_entry_proof_due"),
        ]

    def __str__(self) -> str:
        return self.name or self.card_url

    @property
    def is_listed(self) -> bool:
        return self.approved_version_id is not None and self.state in LISTED_STATES

    @property
    def proven(self) -> str:
        """What the entry's proof shows control of ("" while unproven): its domain, or only
        `host:port` (the well-known file over plain http or on a port other than 443)."""
        if self.domain_verified_at is None:
            return ""
        try:
            return proofs.proven_name(card_url=self.card_url, method=self.domain_verified_by)
        except ValueError:
            return self.domain

    @property
    def domain_proven(self) -> bool:
        """Whether control of the card's whole domain is proven (DNS, https on 443, hosted)."""
        return self.domain_verified_at is not None and proofs.covers_domain(
            card_url=self.card_url, method=self.domain_verified_by
        )


class CardVersion(models.Model):
    """One card as fetched (or, for a hosted agent, as generated): kept for ever, never changed."""

    entry = models.ForeignKey(Entry, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    hash = models.CharField(max_length=HASH_LENGTH, help_text="sha256 of the card's RFC 8785 canonical form.")
    dialect = models.CharField(max_length=4, choices=Dialect.choices)
    fetched_from = models.CharField(max_length=URL_LENGTH)
    raw = models.TextField(help_text="The card exactly as served.")
    document = models.JSONField()
    index = models.JSONField(help_text="The normalised index (registry.cards.CardIndex).")
    signatures = models.JSONField(default=list, blank=True, help_text="Each signature's check.")
    etag = models.CharField(max_length=300, blank=True)
    fetched_at = models.DateTimeField()

    class Meta:
        ordering = ["entry", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["entry", "number"], name="registry_cardversion_unique_number"),
            models.CheckConstraint(condition=Q(number__gte=1), name="registry_cardversion_number_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.entry_id} v{self.number} ({self.hash[:12]})"


class Decision(models.Model):
    """A change of an entry's state: who (nobody: the server itself), when, why, on which card."""

    entry = models.ForeignKey(Entry, on_delete=models.CASCADE, related_name="decisions")
    from_state = models.CharField(max_length=12, choices=State.choices, blank=True)
    to_state = models.CharField(max_length=12, choices=State.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reason = models.TextField()
    version = models.ForeignKey(CardVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    at = models.DateTimeField()

    class Meta:
        ordering = ["entry", "-at", "-id"]
        indexes = [models.Index(fields=["entry", "-at"], name="registry_decision_entry")]

    def __str__(self) -> str:
        return f"{self.from_state or '-'} → {self.to_state}"


class Flag(models.Model):
    """Someone signed in says an entry is wrong (spam, impersonation, broken...)."""

    entry = models.ForeignKey(Entry, on_delete=models.CASCADE, related_name="flags")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    resolution = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["entry", "user"], condition=Q(resolved_at__isnull=True), name="registry_flag_one_open_per_user"
            ),
        ]

    def __str__(self) -> str:
        return f"flag on {self.entry_id} by {self.user_id}"


class HealthCheck(models.Model):
    """One liveness check: the card re-read and the endpoint probed."""

    entry = models.ForeignKey(Entry, on_delete=models.CASCADE, related_name="checks")
    at = models.DateTimeField()
    ok = models.BooleanField()
    card_ok = models.BooleanField()
    endpoint_ok = models.BooleanField()
    status = models.PositiveSmallIntegerField(null=True, blank=True, help_text="The endpoint's HTTP status.")
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["entry", "-at"]
        indexes = [models.Index(fields=["entry", "-at"], name="registry_check_entry_recent")]

    def __str__(self) -> str:
        return f"{self.entry_id} {'ok' if self.ok else 'failed'} at {self.at:%Y-%m-%d %H:%M:%S}"


class Outcome(models.TextChoices):
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    # Not run: the binding is not one the directory checks, the card allows what the check
    # would ask for, the endpoint wants credentials, or the run's time budget was spent.
    SKIPPED = "skipped", "Not run"


class ConformanceResult(models.Model):
    """One conformance check of the latest run (registry.conformance): which check, on which
    interface (dialect and binding), against which card, with what outcome. A run replaces
    the entry's previous results."""

    entry = models.ForeignKey(Entry, on_delete=models.CASCADE, related_name="conformance_results")
    at = models.DateTimeField()
    card_hash = models.CharField(max_length=HASH_LENGTH)
    name = models.CharField(max_length=40, help_text="Which check (registry.conformance.CHECKS).")
    dialect = models.CharField(max_length=4, choices=Dialect.choices, blank=True)
    binding = models.CharField(max_length=16, blank=True)
    url = models.CharField(max_length=URL_LENGTH, blank=True)
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["entry", "id"]
        indexes = [models.Index(fields=["entry", "at"], name="registry_conformance_entry")]
        constraints = [
            models.CheckConstraint(condition=Q(outcome__in=Outcome.values), name="registry_conformance_outcome_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.entry_id} {self.name} {self.dialect}/{self.binding}: {self.outcome}"


class Attestation(models.Model):
    """A statement the directory signed about an entry (registry.attestations): the JWS as
    issued, what it is about, its validity and, once withdrawn, when and why. Kept after
    revocation so that its status URL can say so."""

    entry = models.ForeignKey(Entry, on_delete=models.CASCADE, related_name="attestations")
    jti = models.CharField(max_length=64, unique=True)
    token = models.TextField(help_text="The compact JWS.")
    card_hash = models.CharField(max_length=HASH_LENGTH)
    issued_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["entry", "-issued_at", "-id"]
        indexes = [models.Index(fields=["entry", "-issued_at"], name="registry_attestation_entry")]

    def __str__(self) -> str:
        return f"attestation {self.jti[:12]} of {self.entry_id}"


class FacetKind(models.TextChoices):
    TAG = "tag"
    SKILL = "skill"
    INPUT_MODE = "input_mode"
    OUTPUT_MODE = "output_mode"
    CAPABILITY = "capability"
    BINDING = "binding"
    PROTOCOL_VERSION = "protocol_version"
    SECURITY = "security"


class Facet(models.Model):
    """One filterable value of an entry's shown card (a tag, a mode, a binding...): search's
    filters are lookups in this table's (kind, value) index, the same on every database."""

    entry = models.ForeignKey(Entry, on_delete=models.CASCADE, related_name="facets")
    kind = models.CharField(max_length=16, choices=FacetKind.choices)
    value = models.CharField(max_length=200)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["entry", "kind", "value"], name="registry_facet_unique"),
        ]
        indexes = [models.Index(fields=["kind", "value", "entry"], name="registry_facet_lookup")]

    def __str__(self) -> str:
        return f"{self.kind}={self.value}"


class ApiToken(models.Model):
    """A token for the registry's REST API (`Authorization: Token <token>`). Only its SHA-256
    is kept (the token itself is shown once, when made) with its first characters, to tell
    tokens apart; it stops working at `expires_at` (REGISTRY_TOKEN_LIFETIME after it was made)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="registry_tokens")
    prefix = models.CharField(max_length=16, help_text="The token's first characters (not secret).")
    digest = models.CharField(max_length=HASH_LENGTH, unique=True, help_text="sha256 of the token, hex.")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        verbose_name = "API token"
        ordering = ["user", "-created_at"]
        indexes = [models.Index(fields=["user", "-created_at"], name="registry_apitoken_user")]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user_id})"
