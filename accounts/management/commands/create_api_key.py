from django.core.management.base import BaseCommand, CommandError

from accounts.models import Agent
from accounts.services import AccountError, api_key_create, made_by_command

from ._args import dumps, tenant_or_error, when


class Command(BaseCommand):
    help = "Create an API key for a tenant and print it once (only its hash and prefix are stored)."

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="tenant slug")
        parser.add_argument("--name", default="cli", help="a label for the key")
        parser.add_argument(
            "--principal",
            help="who the key acts as; keys naming the same principal share their tasks "
            "(default: the key is its own principal, key:<prefix>)",
        )
        parser.add_argument(
            "--agent", action="append", default=[], metavar="SLUG", help="limit the key to this agent (repeatable)"
        )
        lifetime = parser.add_mutually_exclusive_group()
        lifetime.add_argument(
            "--expires",
            help="when it stops working: 30d, 12h, 90m, or an ISO 8601 time, at most API_KEY_MAX_LIFETIME away "
            "(default: API_KEY_DEFAULT_LIFETIME from now)",
        )
        lifetime.add_argument(
            "--no-expiry", action="store_true", help="the key never expires (only this command makes such a key)"
        )
        parser.add_argument(
            "--management-role",
            default="",
            choices=["", "viewer", "operator", "owner"],
            help="the key also manages the tenant through its API (/api/v1/) with this role "
            "(default: none, it calls agents only)",
        )
        parser.add_argument("--json", action="store_true", help="print a JSON object")

    def handle(self, *args, tenant, name, principal, agent, expires, no_expiry, management_role, **options):
        found = tenant_or_error(tenant)
        agents = list(Agent.objects.filter(tenant=found, slug__in=agent))
        missing = sorted(set(agent) - {a.slug for a in agents})
        if missing:
            raise CommandError(f"{found.slug} has no agent {', '.join(missing)}")
        try:
            key, plaintext = api_key_create(
                tenant=found,
                name=name,
                principal=principal,
                agents=agents,
                expires_at=when(expires) if expires else None,
                never_expires=no_expiry,
                management_role=management_role,
                made_by=made_by_command("create_api_key"),
            )
        except AccountError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            summary = {
                "tenant": found.slug,
                "prefix": key.prefix,
                "principal": key.principal,
                "agents": sorted(a.slug for a in agents),
                "expires_at": key.expires_at,
                "management_role": key.management_role,
                "made_by": key.made_by,
                "api_key": plaintext,
            }
            self.stdout.write(dumps(summary))
        else:
            self.stdout.write(plaintext)
