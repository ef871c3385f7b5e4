from django.core.management.base import BaseCommand, CommandError

from accounts.models import ApiKey
from accounts.services import AccountError, api_key_revoke, api_key_revoke_made_by

from ._args import tenant_or_error


class Command(BaseCommand):
    help = (
        "Revoke an API key by its prefix (the part after ask_), or with --made-by every key one maker made; "
        "they fail on the next request (idempotent)."
    )

    def add_arguments(self, parser):
        parser.add_argument("prefix", nargs="?", help="the key's prefix, as list_api_keys shows it, or the whole key")
        parser.add_argument("--tenant", help="only a key of this tenant (needed with --made-by)")
        parser.add_argument(
            "--made-by",
            metavar="MAKER",
            help="instead of one key, every key of --tenant this maker made (as list_api_keys shows made_by), "
            "and the keys those keys made",
        )

    def handle(self, *args, prefix, tenant, made_by, **options):
        if made_by is not None:
            if prefix or not tenant:
                raise CommandError("--made-by takes --tenant and no prefix")
            found = tenant_or_error(tenant)
            try:
                revoked = api_key_revoke_made_by(tenant=found, made_by=made_by)
            except AccountError as exc:
                raise CommandError(str(exc)) from None
            for key in revoked:
                self.stdout.write(f"revoked {key.prefix} ({key.name}, {found.slug})")
            self.stdout.write(f"{len(revoked)} key(s) revoked")
            return
        if not prefix:
            raise CommandError("name a key's prefix, or --made-by with --tenant")
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
