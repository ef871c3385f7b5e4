"""The newest-first index in the order search lists entries in: (listed_at DESC NULLS LAST,
id DESC), on Postgres. The index it replaces was NULLS FIRST, so Postgres sorted every row
instead; SQLite cannot declare NULLS LAST in an index and goes without."""

from django.db import migrations


def recent_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE INDEX IF NOT EXISTS registry_entry_recent ON registry_entry (listed_at DESC NULLS LAST, id DESC)"
        )


def drop_recent_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS registry_entry_recent")


class Migration(migrations.Migration):
    dependencies = [("registry", "0007_entry_search_index_and_curators")]

    operations = [
        migrations.RemoveIndex(model_name="entry", name="registry_entry_recent"),
        migrations.RunPython(recent_index, drop_recent_index),
    ]
