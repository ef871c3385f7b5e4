from django.core.management.base import BaseCommand

from accounts.services import tenant_ensure

from ._args import dumps


class Command(BaseCommand):
    help = "Create a tenant (idempotent: an existing tenant is left as it is) and print its slug."

    def add_arguments(self, parser):
        parser.add_argument("slug", help="the first path segment of its agents' URLs")
        parser.add_argument("--name", help="its display name (default: the slug)")
        parser.add_argument("--json", action="store_true", help="print a JSON object")

    def handle(self, *args, slug, name, **options):
        tenant = tenant_ensure(slug=slug, name=name or slug)
        self.stdout.write(dumps({"tenant": tenant.slug, "name": tenant.name}) if options["json"] else tenant.slug)
