"""Migrations that move data keep it: tenants, agents and keys made under `registry` are
the same rows, with the same tasks, once `accounts` owns them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.conftest import migrated_back

BEFORE_THE_MOVE = [
    ("accounts", None),
    ("registry", "0004_agent_unique_id_tenant"),
    ("tasks_app", "0007_task_run_retries"),
]
AFTER_THE_MOVE = [("registry", "0005_tenants_agents_and_keys_to_accounts")]


@pytest.mark.django_db(transaction=True)
def test_tenants_agents_and_keys_made_under_registry_are_kept_by_accounts_with_their_tasks():
    with migrated_back(BEFORE_THE_MOVE) as executor:
        old = executor.loader.project_state(BEFORE_THE_MOVE[1:]).apps
        tenant = old.get_model("registry", "Tenant").objects.create(slug="old", name="Old tenant")
        agent = old.get_model("registry", "Agent").objects.create(
            tenant=tenant, slug="kept", name="Kept", description="d", executor="echo"
        )
        old.get_model("registry", "ApiKey").objects.create(
            tenant=tenant, name="k", principal="p", prefix="0123456789ab", key_hash="h" * 64
        )
        task = old.get_model("tasks_app", "Task").objects.create(
            tenant=tenant,
            agent=agent,
            owner="p",
            context_id="c",
            dialect="a2a/1.0",
            status_timestamp="2026-01-01T00:00Z",
        )
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER_THE_MOVE)
        new = executor.loader.project_state(AFTER_THE_MOVE).apps
        moved = new.get_model("accounts", "Agent").objects.get(pk=agent.pk)
        assert (moved.tenant.slug, moved.slug) == ("old", "kept")
        assert new.get_model("accounts", "ApiKey").objects.get(prefix="0123456789ab").principal == "p"
        assert new.get_model("tasks_app", "Task").objects.get(pk=task.pk).agent_id == agent.pk
        content_types = new.get_model("contenttypes", "ContentType").objects
        # The moved models' content types went with them (registry has its own models now).
        assert not content_types.filter(app_label="registry", model__in=["tenant", "agent", "apikey"]).exists()


@pytest.mark.django_db
def test_the_migrations_make_exactly_the_models():
    """A model changed without its migration (or a migration the models do not match) fails
    here, not in a deployment's `migrate`."""
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    assert "No changes detected" in out.getvalue()
