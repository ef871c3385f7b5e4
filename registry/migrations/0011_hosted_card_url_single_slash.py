"""Hosted entries made before the fix named their card `…/agents/<tenant>/<agent>//.well-known/
agent-card.json` (two slashes), which answers 404: each gets the URL the server serves it at."""

from django.db import migrations

WRONG = "//.well-known/agent-card.json"
RIGHT = "/.well-known/agent-card.json"


def single_slash(apps, schema_editor):
    Entry = apps.get_model("registry", "Entry")
    for entry in Entry.objects.filter(kind="hosted", card_url__endswith=WRONG).only("pk", "card_url"):
        entry.card_url = entry.card_url[: -len(WRONG)] + RIGHT
        entry.save(update_fields=["card_url"])


class Migration(migrations.Migration):
    dependencies = [("registry", "0010_drafts_expire_and_yield")]

    operations = [migrations.RunPython(single_slash, migrations.RunPython.noop, elidable=True)]
