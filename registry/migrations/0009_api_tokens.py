"""The registry's own API tokens (hashed, expiring), replacing rest_framework.authtoken's,
which were kept in plaintext and never expired.

The old tokens are *converted*: each becomes one of ours (the SHA-256 of its key, its first 8
characters shown), expiring REGISTRY_TOKEN_LIFETIME after this migration, so the programs
using one keep working until then; then authtoken's table (the plaintext) is dropped and its
migrations forgotten, as the app is no longer installed. Going back drops nothing more: the
plaintext cannot be restored."""

import hashlib
from datetime import timedelta

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.utils import timezone

OLD_TABLE = "authtoken_token"


def convert_plaintext_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if OLD_TABLE not in connection.introspection.table_names():
        return  # a database made after authtoken was dropped
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {schema_editor.quote_name('key')}, user_id FROM {OLD_TABLE}")
        rows = cursor.fetchall()
    ApiToken = apps.get_model("registry", "ApiToken")
    now = timezone.now()
    expires = now + timedelta(seconds=settings.REGISTRY_TOKEN_LIFETIME)
    ApiToken.objects.bulk_create(
        ApiToken(
            user_id=user_id,
            prefix=key[:8],
            digest=hashlib.sha256(key.encode()).hexdigest(),
            created_at=now,
            expires_at=expires,
        )
        for key, user_id in rows
    )
    schema_editor.execute(schema_editor.sql_delete_table % {"table": schema_editor.quote_name(OLD_TABLE)})
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM django_migrations WHERE app = %s", ["authtoken"])


class Migration(migrations.Migration):

    dependencies = [
        ('registry', '0008_entry_recent_nulls_last'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('prefix', models.CharField(help_text="The token's first characters (not secret).", max_length=16)),
                ('digest', models.CharField(help_text='sha256 of the token, hex.', max_length=64, unique=True)),
                ('created_at', models.DateTimeField()),
                ('expires_at', models.DateTimeField()),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='registry_tokens', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'API token',
                'ordering': ['user', '-created_at'],
                'indexes': [models.Index(fields=['user', '-created_at'], name='registry_apitoken_user')],
            },
        ),
        migrations.RunPython(convert_plaintext_tokens, migrations.RunPython.noop, elidable=True),
    ]
