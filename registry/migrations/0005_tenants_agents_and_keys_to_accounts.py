"""Tenants, agents and API keys belong to `accounts` now (its migration 0001 took over their
tables): they leave this app's state, and no table is dropped."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0004_agent_unique_id_tenant"),
        ("accounts", "0001_initial"),
        ("tasks_app", "0008_task_agent_and_tenant_in_accounts"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="apikey", name="tenant"),
                migrations.RemoveField(model_name="agent", name="tenant"),
                migrations.DeleteModel(name="Agent"),
                migrations.DeleteModel(name="ApiKey"),
                migrations.DeleteModel(name="Tenant"),
            ]
        )
    ]
