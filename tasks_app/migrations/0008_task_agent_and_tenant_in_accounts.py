"""Agents and tenants now live in `accounts` (accounts migration 0001 renamed their tables;
the foreign keys followed the tables): only Django's state changes here."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("tasks_app", "0007_task_run_retries"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="task",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="tasks",
                        to="accounts.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="task",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="tasks", to="accounts.tenant"
                    ),
                ),
            ]
        )
    ]
