"""The admin's overview counts the last hour's and day's tasks by state and by agent: an index
on status_timestamp that carries tenant, state and agent, so each count is an index-only range
scan of the newest entries, never a scan of the table."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tasks_app", "0009_tenant_limits"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                fields=["status_timestamp"], include=["tenant", "state", "agent"], name="tasks_task_recent"
            ),
        ),
    ]
