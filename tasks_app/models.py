"""The task store: every task, status change, message, artifact and event, in one schema
that every dialect (A2A 1.0/0.3/0.1, ACPs AIP) reads and writes through `services`.

The database holds the store's invariants where they cost the writes little: choice columns
by domains (accounts.domains), the combinations the state machine excludes by checks, a task's
agent and tenant by one composite foreign key, `(task, seq)` and the client's task ids by unique
constraints. A task's messages, status changes, artifacts and events carry no foreign key to it:
they are written only in statements and transactions that hold the task's row (inserted there,
or updated under its lock: `sql`, `services`), tasks are never deleted by the product, and each
key cost a lookup and a row lock per row written, half a millisecond of Postgres CPU per task,
a third of what Postgres spends on one (bench/README.md). Deleting through the ORM still cascades.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from accounts.domains import ChoiceDomainField
from accounts.models import Agent, Tenant
from accounts.services import ANONYMOUS_PRINCIPAL
from accounts.storable import ID_LENGTH, NAME_LENGTH

from .lifecycle import Dialect, EventKind, Failure, Role, TaskState

# A task is active while a run of its agent is queued or running: from a client's message
# until the agent settles it (finishes it, or asks for more input). `run_token` is kept after
# that (late writes of the old run are refused by it), so the state is what tells.
ACTIVE_STATES = (TaskState.SUBMITTED, TaskState.WORKING)
# The owner of tasks created without a key (accounts.selectors.Principal.ANONYMOUS), which a
# partial index's condition and the statement that must match it name.
ANONYMOUS_OWNER = ANONYMOUS_PRINCIPAL


class Task(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Looked up through tasks_task_tenant_recent, which begins with it: no index of its own
    # (one entry less to write at every insert and every change of state).
    # No foreign key of its own on Postgres either: the one on (agent, tenant) to the agent's
    # (id, tenant) (migration 0005) holds both, and the agent's own holds its tenant; each
    # further key was one more lookup and row lock in every new task's statement (~0.1 ms of
    # Postgres CPU per task, measured). Deleting a tenant or an agent with tasks stays refused:
    # by PROTECT here and by that key in the database.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="tasks", db_index=False, db_constraint=False
    )
    # No index of its own: `tasks_task_list` starts with agent_id and serves lookups by agent
    # alone. Every index is one more entry written on each status change, and those are
    # never HOT updates (the list indexes hold status_timestamp).
    agent = models.ForeignKey(
        Agent, on_delete=models.PROTECT, related_name="tasks", db_index=False, db_constraint=False
    )
    owner = models.CharField(max_length=150, help_text="The principal that created the task and alone may see it.")
    # A2A 0.1 and AIP let the client choose the task id; A2A 0.3/1.0 never do.
    client_task_id = models.CharField(max_length=ID_LENGTH, null=True, blank=True)
    context_id = models.CharField(max_length=ID_LENGTH, help_text="A2A contextId; A2A 0.1 sessionId; AIP session.")
    # The choice columns are held to their choices by Postgres domains (accounts.domains).
    dialect = ChoiceDomainField(
        max_length=16, choices=Dialect.choices, domain="tasks_dialect", help_text="The dialect that created it."
    )
    state = ChoiceDomainField(
        max_length=24, choices=TaskState.choices, default=TaskState.SUBMITTED, domain="tasks_state"
    )
    # One of the task's own messages, written in the statement that points at it; messages are
    # deleted only with their task. So no foreign key (a lookup at every status change with a
    # message) and no index (which only the key's checks on delete would read).
    status_message = models.ForeignKey(
        "Message",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    status_timestamp = models.DateTimeField()
    # The agent answered with a bare Message: to the client this exchange was never a task.
    reply_only = models.BooleanField(default=False)
    failure = ChoiceDomainField(
        max_length=24, choices=Failure.choices, blank=True, default=Failure.NONE, domain="tasks_failure"
    )
    last_seq = models.PositiveIntegerField(default=0, help_text="seq of the newest TaskEvent.")
    # Set (under the task's row lock) while the task has live push configs, so that writers
    # know without a query whether an event needs push deliveries.
    has_push_configs = models.BooleanField(default=False, db_default=False)
    metadata = models.JSONField(default=dict, blank=True)
    # What the task's executor keeps between its runs (a fronted agent: the upstream's task
    # id), through AgentContext.state; never shown to clients.
    executor_state = models.JSONField(default=dict, blank=True, db_default={})
    accepted_output_modes = models.JSONField(default=list, blank=True)
    # What the client asked of the task when it started it (AIP's start: awaitingInputTimeout,
    # awaitingCompletionTimeout, maxProductsBytes). A task that waits on the client longer
    # than its timeout is closed by the server (services.task_expire_awaiting): canceled when
    # it waited for input, completed when it waited for the client to confirm its products.
    input_timeout = models.DurationField(null=True, blank=True)
    completion_timeout = models.DurationField(null=True, blank=True)
    products_max_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    # The pending or running unit of work. Each client message that needs the agent gets a
    # fresh token; a worker claims it by compare-and-set on (token, claimed_at is null).
    run_token = models.UUIDField(null=True, blank=True)
    run_requested_at = models.DateTimeField(null=True, blank=True)
    run_claimed_at = models.DateTimeField(null=True, blank=True)
    # The process that claimed the run (a RunHolder's id; no foreign key: holders come and go).
    # In no index, as run_claimed_at: the claim stays a HOT update.
    run_holder = models.UUIDField(null=True, blank=True)
    # How often this run was given again after its worker was lost (services.sweep_stuck_work).
    run_retries = models.PositiveSmallIntegerField(default=0, db_default=0)
    # Kept by the statements that store messages and artifacts (sql.NEW_TASK, sql.run_write,
    # services), so the admin's task list shows them without a query per row.
    message_count = models.PositiveIntegerField(default=0, db_default=0)
    artifact_count = models.PositiveIntegerField(default=0, db_default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "owner", "client_task_id"],
                condition=Q(client_task_id__isnull=False),
                name="tasks_task_unique_client_task_id",
            ),
            models.CheckConstraint(
                condition=Q(run_claimed_at__isnull=True) | Q(run_token__isnull=False),
                name="tasks_task_claim_needs_run",
            ),
            models.CheckConstraint(
                condition=Q(reply_only=False) | Q(state=TaskState.COMPLETED),
                name="tasks_task_reply_only_is_completed",
            ),
            models.CheckConstraint(
                condition=Q(failure="") | Q(state=TaskState.FAILED),
                name="tasks_task_failure_means_failed",
            ),
        ]
        indexes = [
            # ListTasks: one caller's tasks of one agent, newest status first, keyset on (ts, id).
            models.Index(fields=["agent", "owner", "-status_timestamp", "-id"], name="tasks_task_list"),
            # ListTasks filtered by contextId.
            models.Index(fields=["agent", "owner", "context_id", "-status_timestamp"], name="tasks_task_list_ctx"),
            # The admin's task list: every task newest change first, a tenant's (members, the
            # tenant filter) and one state's the same way, and the search by context id.
            # It carries tenant, state and agent too: the admin's overview (selectors.tasks_overview)
            # counts the last hour's and day's tasks by state and agent as index-only range scans.
            models.Index(
                fields=["-status_timestamp", "-id"], include=["tenant", "state", "agent"], name="tasks_task_recent"
            ),
            models.Index(fields=["tenant", "-status_timestamp", "-id"], name="tasks_task_tenant_recent"),
            models.Index(fields=["state", "-status_timestamp", "-id"], name="tasks_task_state_recent"),
            models.Index(fields=["context_id"], name="tasks_task_context"),
            # The sweeper and the queue gauge: the active tasks' runs, claimed or not, by when
            # they were asked for; whether and when one was claimed is read off the rows found.
            # run_claimed_at is in no index and no index's condition: the claim, which writes
            # only it, is a HOT update (no index entry written) when the row's page has room,
            # which the table's fillfactor keeps (migration 0018).
            models.Index(
                fields=["run_requested_at"],
                condition=Q(state__in=[TaskState.SUBMITTED, TaskState.WORKING], run_token__isnull=False),
                name="tasks_task_runs",
            ),
            # The sweeper: tasks waiting on their client that may outstay their timeout.
            models.Index(
                fields=["status_timestamp"],
                condition=(
                    Q(state=TaskState.INPUT_REQUIRED, input_timeout__isnull=False)
                    | Q(state=TaskState.AWAITING_COMPLETION, completion_timeout__isnull=False)
                ),
                name="tasks_task_awaiting_expiry",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.state})"


# The words of a message's text parts, as Postgres indexes them (migration 0010) and the
# admin's search matches them: the search must write the very expression of the index.
MESSAGE_TSVECTOR = "to_tsvector('simple'::regconfig, jsonb_path_query_array(parts, '$[*].text'))"


class Message(models.Model):
    """One message of a task's history, from the user (AIP leader) or the agent (AIP partner)."""

    # No index of its own: the composite index below begins with task_id and serves every lookup
    # (and the cascade's) by task; a second one was one more entry to write per row. No foreign
    # key: see the module's docstring.
    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, related_name="messages", db_index=False, db_constraint=False
    )
    message_id = models.CharField(max_length=ID_LENGTH, help_text="The sender's messageId; not unique by design.")
    context_id = models.CharField(max_length=ID_LENGTH)
    role = ChoiceDomainField(max_length=8, choices=Role.choices, domain="tasks_role")
    parts = models.JSONField(help_text="Canonical parts (see tasks_app.parts).")
    metadata = models.JSONField(default=dict, blank=True)
    extensions = models.JSONField(default=list, blank=True)
    reference_task_ids = models.JSONField(default=list, blank=True)
    # The extensions the client's request activated for this message (A2A-Extensions), each
    # {"uri", "metadata"}: the metadata entries of the request and of the message filed under
    # that URI. What the agent's run sees as ctx.extensions; never shown to clients.
    activated_extensions = models.JSONField(default=list, blank=True, db_default=[])
    # AIP: leader messages carry a command (start, continue, cancel, complete, get) and parameters.
    command = models.CharField(max_length=32, blank=True, default="")
    command_params = models.JSONField(null=True, blank=True)
    # AIP: when and by whom the sender says it sent the message (its sentAt and senderId).
    sent_at = models.DateTimeField(null=True, blank=True)
    sender_id = models.CharField(max_length=ID_LENGTH, blank=True, default="", db_default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = []
        indexes = [
            # History of a task in order (the pk is monotonic per insert).
            models.Index(fields=["task", "id"], name="tasks_message_history"),
            # The admin's search by message id. (Its full-text search of the text parts has a
            # GIN index on Postgres only, made by migration 0010: see MESSAGE_TEXT_SEARCH.)
            models.Index(fields=["message_id"], name="tasks_message_message_id"),
        ]

    def __str__(self) -> str:
        return f"{self.role} message {self.message_id}"


class StatusChange(models.Model):
    """Every state transition of a task: the status history (AIP `statusHistory`)."""

    # No index of its own: the composite index below begins with task_id and serves every lookup
    # (and the cascade's) by task; a second one was one more entry to write per row. No foreign
    # key: see the module's docstring.
    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, related_name="status_changes", db_index=False, db_constraint=False
    )
    state = ChoiceDomainField(max_length=24, choices=TaskState.choices, domain="tasks_state")
    # The status message, a message of the same task written in the same statement: as
    # Task.status_message, no foreign key and no index.
    message = models.ForeignKey(
        Message,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    reason = models.TextField(blank=True, default="", help_text="Why, when the server itself made the change.")
    timestamp = models.DateTimeField()

    class Meta:
        constraints = []
        indexes = [models.Index(fields=["task", "id"], name="tasks_statuschange_history")]

    def __str__(self) -> str:
        return f"{self.state} at {self.timestamp:%Y-%m-%d %H:%M:%S}"


class Artifact(models.Model):
    """An output of a task (AIP `products`); streamed chunks append to its parts."""

    # No index of its own: the composite index below begins with task_id and serves every lookup
    # (and the cascade's) by task; a second one was one more entry to write per row. No foreign
    # key: see the module's docstring.
    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, related_name="artifacts", db_index=False, db_constraint=False
    )
    artifact_id = models.CharField(max_length=ID_LENGTH)
    name = models.CharField(max_length=NAME_LENGTH, blank=True, default="")
    description = models.TextField(blank=True, default="")
    parts = models.JSONField(default=list)
    metadata = models.JSONField(default=dict, blank=True)
    extensions = models.JSONField(default=list, blank=True)
    complete = models.BooleanField(default=False, help_text="The last chunk has arrived.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "artifact_id"], name="tasks_artifact_unique_per_task"),
        ]

    def __str__(self) -> str:
        return self.name or self.artifact_id


class TaskEvent(models.Model):
    """The per-task event log that streaming, replay and push read, in `seq` order.

    `seq` is allocated under the task's row lock (Task.last_seq + 1), never from a global
    sequence: global sequences commit out of order, and a reader of `id > last` would skip rows.
    """

    # No index of its own: the composite index below begins with task_id and serves every lookup
    # (and the cascade's) by task; a second one was one more entry to write per row. No foreign
    # key: see the module's docstring.
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events", db_index=False, db_constraint=False)
    seq = models.IntegerField()  # at least 1: tasks_taskevent_seq_positive
    kind = ChoiceDomainField(max_length=16, choices=EventKind.choices, domain="tasks_event_kind")
    payload = models.JSONField(help_text="The event in domain form; each dialect encodes it.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "seq"], name="tasks_taskevent_unique_seq"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="tasks_taskevent_seq_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id}#{self.seq} {self.kind}"


class TenantStorage(models.Model):
    """The bytes of messages and task events a tenant has stored, as last counted (`services.
    stored_bytes_count`): what its storage quota is checked against. Kept apart from the
    tenant's row, and written by the counting job alone, so no request writes it."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True, related_name="+")
    stored_bytes = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.tenant_id}: {self.stored_bytes} bytes"


class ActiveTaskCount(models.Model):
    """A tenant's active tasks (a run queued or running), what its caps are checked against
    (`TENANT_MAX_ACTIVE_TASKS`, and `..._ANONYMOUS_TASKS` for the anonymous caller's share).

    Kept by the Postgres trigger `tasks_task_count_active` (migration 0015) in the transaction
    of every insert, state change and delete of a task, by whatever path: counting the tasks
    instead cost each send one index entry per active task, 1,500 of them per send under a
    backlog (measured). A tenant's count is spread over `SLOTS` rows (a task counts in the slot
    its id's last byte picks), so concurrent sends rarely wait for one row's lock; the count is
    their sum. SQLite (the embedded mode) has no trigger: there the tasks are counted."""

    SLOTS = 16

    # Looked up through the unique (tenant, slot) index: no index of its own.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    slot = models.SmallIntegerField()
    active = models.IntegerField(default=0)
    anonymous = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "slot"], name="tasks_activecount_slot")]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.slot}: {self.active} active, {self.anonymous} anonymous"


class RunHolder(models.Model):
    """A process that claims runs (a Celery worker's child; the embedded mode's web process) and
    when it last showed it was alive: it beats every RUN_HEARTBEAT_EVERY seconds, by Postgres's
    clock, from a thread of its own (tasks_app.liveness). A run whose holder fell
    RUN_LIVENESS_TIMEOUT behind is taken from it (`liveness.runs_of_lost_holders_retake`)."""

    id = models.UUIDField(primary_key=True)
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.host}:{self.pid} ({self.id})"


class StorageCount(models.Model):
    """One row: the newest Message and TaskEvent ids the counters include, and when they were
    last recounted in full. Its row lock keeps two counting jobs from counting a row twice."""

    messages_through = models.BigIntegerField(default=0)
    events_through = models.BigIntegerField(default=0)
    recounted_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"messages through #{self.messages_through}, events through #{self.events_through}"
