"""The full-text index of entries (Postgres only: the embedded SQLite mode searches with LIKE),
and the group curators join: its members hold registry.curate_entry."""

from django.db import migrations

CURATORS = "Registry curators"


def search_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("CREATE INDEX IF NOT EXISTS registry_entry_search ON registry_entry USING gin (search)")


def drop_search_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS registry_entry_search")


def curators_group(apps, schema_editor):
    # Django makes permissions after migrate (post_migrate); this group needs its one now,
    # so it is made here the way Django would (the same content type and codename).
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    entry_type, _ = ContentType.objects.get_or_create(app_label="registry", model="entry")
    permission, _ = Permission.objects.get_or_create(
        content_type=entry_type,
        codename="curate_entry",
        defaults={"name": "Can review, approve, reject and suspend registry entries"},
    )
    group, _ = Group.objects.get_or_create(name=CURATORS)
    group.permissions.add(permission)


def drop_curators_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=CURATORS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0006_entries"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(search_index, drop_search_index),
        migrations.RunPython(curators_group, drop_curators_group),
    ]
