"""A task's tenant is its agent's: a foreign key on (agent_id, tenant_id) to the agent's
(id, tenant_id). Django models cannot declare a composite foreign key, so it is SQL, on
Postgres only (the embedded SQLite mode goes without). Moving an agent to another tenant
carries its tasks along (ON UPDATE CASCADE) rather than leaving them behind."""

from django.db import migrations

CONSTRAINT = "tasks_task_agent_of_its_tenant"


def add(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    task, agent = apps.get_model("tasks_app", "Task")._meta.db_table, apps.get_model("registry", "Agent")._meta.db_table
    schema_editor.execute(
        f"ALTER TABLE {task} ADD CONSTRAINT {CONSTRAINT} FOREIGN KEY (agent_id, tenant_id) "
        f"REFERENCES {agent} (id, tenant_id) ON UPDATE CASCADE ON DELETE NO ACTION"
    )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    task = apps.get_model("tasks_app", "Task")._meta.db_table
    schema_editor.execute(f"ALTER TABLE {task} DROP CONSTRAINT IF EXISTS {CONSTRAINT}")


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0004_agent_unique_id_tenant"),
        ("tasks_app", "0004_task_dialect_and_failure_valid"),
    ]

    operations = [migrations.RunPython(add, drop, elidable=False)]
