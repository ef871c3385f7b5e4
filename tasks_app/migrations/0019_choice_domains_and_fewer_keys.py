"""The store's choice columns held by Postgres domains instead of CHECK constraints, and no
foreign keys but the one that states an invariant (a task's agent is of its tenant, 0005):
tasks_app/models.py and accounts/domains.py say why.

The active-task count's triggers (0015) name the state in their conditions, and Postgres does
not change the type of a column a trigger names: they are dropped around the change and made
again as they were.

Each domain is made empty first, so that the columns turn into it without their tables being
rewritten; its words are then added, which Postgres validates in one read of each column.
The words are those of tasks_app.lifecycle today, written here as migrations must be fixed.
"""

import django.db.models.deletion
from django.db import migrations, models

import accounts.domains
from accounts.domains import CreateChoiceDomain, SetChoiceDomainWords

STATES = [
    "submitted",
    "working",
    "input-required",
    "auth-required",
    "awaiting-completion",
    "completed",
    "canceled",
    "failed",
    "rejected",
]
DIALECTS = ["a2a/1.0", "a2a/0.3", "a2a/0.1", "aip/1.0"]
FAILURES = [
    "",
    "agent-error",
    "invalid-response",
    "time-limit",
    "worker-lost",
    "misconfigured",
    "store-unavailable",
    "products-too-large",
]
ROLES = ["user", "agent"]
EVENT_KINDS = ["status", "artifact", "message"]
DOMAINS = [
    ("tasks_state", 24, STATES),
    ("tasks_dialect", 16, DIALECTS),
    ("tasks_failure", 24, FAILURES),
    ("tasks_role", 8, ROLES),
    ("tasks_event_kind", 16, EVENT_KINDS),
]

# As migration 0015 made them.
TRIGGERS = """
CREATE TRIGGER tasks_task_count_active_insert AFTER INSERT ON tasks_app_task FOR EACH ROW
    WHEN (NEW.state IN ('submitted', 'working')) EXECUTE FUNCTION tasks_task_count_active();
CREATE TRIGGER tasks_task_count_active_update AFTER UPDATE OF state ON tasks_app_task FOR EACH ROW
    WHEN ((OLD.state IN ('submitted', 'working')) IS DISTINCT FROM (NEW.state IN ('submitted', 'working')))
    EXECUTE FUNCTION tasks_task_count_active();
CREATE TRIGGER tasks_task_count_active_delete AFTER DELETE ON tasks_app_task FOR EACH ROW
    WHEN (OLD.state IN ('submitted', 'working')) EXECUTE FUNCTION tasks_task_count_active();
"""
NO_TRIGGERS = """
DROP TRIGGER tasks_task_count_active_insert ON tasks_app_task;
DROP TRIGGER tasks_task_count_active_update ON tasks_app_task;
DROP TRIGGER tasks_task_count_active_delete ON tasks_app_task;
"""


def _on_postgres(statements: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(statements, None)  # several statements: no parameters

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0010_tenant_api_roles_executors"),
        ("tasks_app", "0018_runs_index_and_hot_claims"),
    ]

    operations = [
        *(CreateChoiceDomain(name, length) for name, length, _ in DOMAINS),
        migrations.RunPython(_on_postgres(NO_TRIGGERS), _on_postgres(TRIGGERS)),
        migrations.RemoveConstraint(
            model_name="message",
            name="tasks_message_role_valid",
        ),
        migrations.RemoveConstraint(
            model_name="statuschange",
            name="tasks_statuschange_state_valid",
        ),
        migrations.RemoveConstraint(
            model_name="task",
            name="tasks_task_state_valid",
        ),
        migrations.RemoveConstraint(
            model_name="task",
            name="tasks_task_dialect_valid",
        ),
        migrations.RemoveConstraint(
            model_name="task",
            name="tasks_task_failure_valid",
        ),
        migrations.RemoveConstraint(
            model_name="taskevent",
            name="tasks_taskevent_kind_valid",
        ),
        migrations.AlterField(
            model_name="artifact",
            name="task",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="artifacts",
                to="tasks_app.task",
            ),
        ),
        migrations.AlterField(
            model_name="message",
            name="role",
            field=accounts.domains.ChoiceDomainField(
                choices=[("user", "User"), ("agent", "Agent")], domain="tasks_role", max_length=8
            ),
        ),
        migrations.AlterField(
            model_name="message",
            name="task",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="messages",
                to="tasks_app.task",
            ),
        ),
        migrations.AlterField(
            model_name="statuschange",
            name="message",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="tasks_app.message",
            ),
        ),
        migrations.AlterField(
            model_name="statuschange",
            name="state",
            field=accounts.domains.ChoiceDomainField(
                choices=[
                    ("submitted", "Submitted"),
                    ("working", "Working"),
                    ("input-required", "Input Required"),
                    ("auth-required", "Auth Required"),
                    ("awaiting-completion", "Awaiting Completion"),
                    ("completed", "Completed"),
                    ("canceled", "Canceled"),
                    ("failed", "Failed"),
                    ("rejected", "Rejected"),
                ],
                domain="tasks_state",
                max_length=24,
            ),
        ),
        migrations.AlterField(
            model_name="statuschange",
            name="task",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="status_changes",
                to="tasks_app.task",
            ),
        ),
        migrations.AlterField(
            model_name="task",
            name="agent",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="tasks",
                to="accounts.agent",
            ),
        ),
        migrations.AlterField(
            model_name="task",
            name="dialect",
            field=accounts.domains.ChoiceDomainField(
                choices=[
                    ("a2a/1.0", "A2A 1.0"),
                    ("a2a/0.3", "A2A 0.3"),
                    ("a2a/0.1", "A2A 0.1"),
                    ("aip/1.0", "ACPs AIP 1.0"),
                ],
                domain="tasks_dialect",
                help_text="The dialect that created it.",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="task",
            name="failure",
            field=accounts.domains.ChoiceDomainField(
                blank=True,
                choices=[
                    ("", "-"),
                    ("agent-error", "the agent raised an error"),
                    ("invalid-response", "the agent broke the executor contract"),
                    ("time-limit", "the agent exceeded its time limit"),
                    ("worker-lost", "the worker running the agent was lost"),
                    ("misconfigured", "the agent is misconfigured"),
                    ("store-unavailable", "the task store was unavailable while the agent ran"),
                    ("products-too-large", "the agent's products exceeded the size the client allowed"),
                ],
                default="",
                domain="tasks_failure",
                max_length=24,
            ),
        ),
        migrations.AlterField(
            model_name="task",
            name="state",
            field=accounts.domains.ChoiceDomainField(
                choices=[
                    ("submitted", "Submitted"),
                    ("working", "Working"),
                    ("input-required", "Input Required"),
                    ("auth-required", "Auth Required"),
                    ("awaiting-completion", "Awaiting Completion"),
                    ("completed", "Completed"),
                    ("canceled", "Canceled"),
                    ("failed", "Failed"),
                    ("rejected", "Rejected"),
                ],
                default="submitted",
                domain="tasks_state",
                max_length=24,
            ),
        ),
        migrations.AlterField(
            model_name="task",
            name="status_message",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="tasks_app.message",
            ),
        ),
        migrations.AlterField(
            model_name="task",
            name="tenant",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="tasks",
                to="accounts.tenant",
            ),
        ),
        migrations.AlterField(
            model_name="taskevent",
            name="kind",
            field=accounts.domains.ChoiceDomainField(
                choices=[("status", "Status"), ("artifact", "Artifact"), ("message", "Message")],
                domain="tasks_event_kind",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="taskevent",
            name="seq",
            field=models.IntegerField(),
        ),
        migrations.AlterField(
            model_name="taskevent",
            name="task",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="tasks_app.task",
            ),
        ),
        migrations.RunPython(_on_postgres(TRIGGERS), _on_postgres(NO_TRIGGERS)),
        *(SetChoiceDomainWords(name, words) for name, _, words in DOMAINS),
    ]
