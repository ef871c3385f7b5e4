from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0011_agent_extended_card_checked"),
    ]

    operations = [
        migrations.AlterField(
            model_name="apikey",
            name="expires_at",
            field=models.DateTimeField(
                blank=True,
                help_text="Refused from this time on, at most API_KEY_MAX_LIFETIME away. A new key made without one expires API_KEY_DEFAULT_LIFETIME after it is made; empty on a stored key: never.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="made_by",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                editable=False,
                help_text="Who made the key: key:<prefix> (a key, through the tenant API), oidc:<issuer>#<subject> (a bearer token, through the tenant API), admin:<username>, or command:<name>; empty: made before this was recorded.",
                max_length=700,
            ),
        ),
    ]
