from django.core.management.base import BaseCommand, CommandError

from accounts.models import ApiKey
from accounts.services import api_key_revoke

from ._args import tenant_or_error


class Command(BaseCommand):
    help = "Revoke an API key by its prefix (the part after ask_); it fails on the next request (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("prefix", help="the key's prefix, as list_api_keys shows it, or the whole key")
        parser.add_argument("--tenant", help="only a key of this tenant")

    def handle(self, *args, prefix, tenant, **options):
        parts = prefix.split("_", 2)
        prefix = parts[1] if len(parts) == 3 and parts[0] == "ask" else prefix  # the whole key was pasted
        keys = ApiKey.objects.filter(prefix=prefix)
        if tenant:
            keys = keys.filter(tenant=tenant_or_error(tenant))
        key = keys.first()
        if key is None:
            raise CommandError(f"no API key with prefix {prefix!r}")
        if api_key_revoke(key=key):
            self.stdout.write(f"revoked {key.prefix} ({key.name}, {key.tenant.slug})")
        else:
            self.stdout.write(f"{key.prefix} was already revoked at {key.revoked_at.isoformat()}")
