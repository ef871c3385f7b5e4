"""Tenants, agents and API keys move here from `registry` (which becomes the directory of
agents): the models enter this app's state on the tables registry made, then the tables,
their constraints and content types take this app's names. No row is copied."""

import django.core.validators
import django.db.models.deletion
import re
from django.db import migrations, models


RENAMED_CONSTRAINTS = [
    ("registry_agent_unique_tenant_slug", "accounts_agent_unique_tenant_slug"),
    ("registry_agent_unique_id_tenant", "accounts_agent_unique_id_tenant"),
]
MODELS = ["tenant", "agent", "apikey"]


def _rename(schema_editor, pairs):
    # SQLite keeps constraints in the table's definition and Django rebuilds the table (with
    # the state's names) whenever it alters one: there is nothing to rename there.
    if schema_editor.connection.vendor == "postgresql":
        for old, new in pairs:
            schema_editor.execute(f"ALTER TABLE accounts_agent RENAME CONSTRAINT {old} TO {new}")


def rename_constraints(apps, schema_editor):
    _rename(schema_editor, RENAMED_CONSTRAINTS)


def rename_constraints_back(apps, schema_editor):
    _rename(schema_editor, [(new, old) for old, new in RENAMED_CONSTRAINTS])


def content_types_move(apps, schema_editor):
    # Permissions and admin log entries point at the content type: they follow it.
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="registry", model__in=MODELS).update(app_label="accounts")


def content_types_back(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="accounts", model__in=MODELS).update(app_label="registry")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("registry", "0004_agent_unique_id_tenant"),
        # Earlier migrations of tasks_app name registry's tables: they run before the rename.
        ("tasks_app", "0007_task_run_retries"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
            migrations.CreateModel(
                name='Tenant',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('slug', models.SlugField(max_length=64, unique=True, validators=[django.core.validators.RegexValidator(re.compile('^[-a-zA-Z0-9_]+\\Z'), 'Enter a valid “slug” consisting of letters, numbers, underscores or hyphens.', 'invalid')])),
                    ('name', models.CharField(max_length=200)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                ],
                options={
                    'db_table': 'registry_tenant',
                    'ordering': ['slug'],
                },
            ),
            migrations.CreateModel(
                name='ApiKey',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=100)),
                    ('principal', models.CharField(help_text='Who the caller is: tasks created with this key belong to this principal.', max_length=150)),
                    ('prefix', models.CharField(editable=False, max_length=16, unique=True)),
                    ('key_hash', models.CharField(editable=False, max_length=64)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('revoked_at', models.DateTimeField(blank=True, null=True)),
                    ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_keys', to='accounts.tenant')),
                ],
                options={
                    'verbose_name': 'API key',
                    'db_table': 'registry_apikey',
                    'ordering': ['-created_at'],
                },
            ),
            migrations.CreateModel(
                name='Agent',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('slug', models.SlugField(max_length=64, validators=[django.core.validators.RegexValidator(re.compile('^[-a-zA-Z0-9_]+\\Z'), 'Enter a valid “slug” consisting of letters, numbers, underscores or hyphens.', 'invalid')])),
                    ('name', models.CharField(max_length=200)),
                    ('description', models.TextField()),
                    ('version', models.CharField(default='1.0.0', max_length=50)),
                    ('skills', models.JSONField(blank=True, default=list, help_text='A2A skills: [{"id", "name", "description", "tags", "examples", "inputModes", "outputModes"}]')),
                    ('input_modes', models.JSONField(blank=True, default=list, help_text='Media types the agent accepts.')),
                    ('output_modes', models.JSONField(blank=True, default=list, help_text='Media types the agent produces.')),
                    ('executor', models.CharField(help_text='Name of a registered executor (tasks_app.executors).', max_length=64)),
                    ('settings', models.JSONField(blank=True, default=dict, help_text='Executor settings.')),
                    ('extensions', models.JSONField(blank=True, default=list, help_text='A2A extensions: [{"uri", "description", "required", "params"}]. A request that does not activate a required one (A2A-Extensions header) is refused with ExtensionSupportRequired.')),
                    ('has_extended_card', models.BooleanField(default=False, help_text='Declare an extended card for authenticated callers (GetExtendedAgentCard).')),
                    ('extended_card', models.JSONField(blank=True, help_text='Card members that authenticated callers see in addition, e.g. {"skills": [...]}.', null=True)),
                    ('streaming', models.BooleanField(default=True, help_text='Offer live streams (SendStreamingMessage, SubscribeToTask) over SSE.')),
                    ('push_notifications', models.BooleanField(default=True, help_text='Offer push notifications (push config methods and inline configs).')),
                    ('is_public', models.BooleanField(default=False, help_text='Public agents need no API key.')),
                    ('is_active', models.BooleanField(default=True)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                    ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='agents', to='accounts.tenant')),
                ],
                options={
                    'db_table': 'registry_agent',
                    'ordering': ['tenant__slug', 'slug'],
                    'constraints': [models.UniqueConstraint(fields=('tenant', 'slug'), name='registry_agent_unique_tenant_slug'), models.UniqueConstraint(fields=('id', 'tenant'), name='registry_agent_unique_id_tenant')],
                },
            ),
            ],
        ),
        migrations.AlterModelTable(name="tenant", table=None),
        migrations.AlterModelTable(name="apikey", table=None),
        migrations.AlterModelTable(name="agent", table=None),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="agent", name=old)
                for old, _ in RENAMED_CONSTRAINTS
            ]
            + [
                migrations.AddConstraint(model_name="agent", constraint=constraint)
                for constraint in (
                    models.UniqueConstraint(fields=("tenant", "slug"), name="accounts_agent_unique_tenant_slug"),
                    models.UniqueConstraint(fields=("id", "tenant"), name="accounts_agent_unique_id_tenant"),
                )
            ],
            database_operations=[migrations.RunPython(rename_constraints, rename_constraints_back)],
        ),
        migrations.RunPython(content_types_move, content_types_back),
    ]
