import json

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Tenant
from accounts.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key for a tenant and print it (only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="tenant slug")
        parser.add_argument("--name", default="cli", help="a label for the key")
        parser.add_argument("--principal", help="who the key acts as (default: the name)")
        parser.add_argument("--json", action="store_true", help="print a JSON object")

    def handle(self, *args, tenant, name, principal, **options):
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"no tenant {tenant!r}")
        key, plaintext = api_key_create(tenant=found, name=name, principal=principal)
        if options["json"]:
            self.stdout.write(json.dumps({"tenant": tenant, "principal": key.principal, "api_key": plaintext}))
        else:
            self.stdout.write(plaintext)
