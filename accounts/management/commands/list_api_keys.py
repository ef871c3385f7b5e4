from django.core.management.base import BaseCommand
from django.db.models import Prefetch
from django.utils import timezone

from accounts.models import Agent, ApiKey

from ._args import dumps, tenant_or_error


class Command(BaseCommand):
    help = "List a tenant's API keys: prefix, name, principal, agents, times and state (never a secret or hash)."

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="tenant slug")
        parser.add_argument("--all", action="store_true", help="include revoked and expired keys")
        parser.add_argument("--made-by", metavar="MAKER", help="only the keys this maker made (exactly, as made_by)")
        parser.add_argument("--json", action="store_true", help="print one JSON object per line")

    def handle(self, *args, tenant, made_by, **options):
        found = tenant_or_error(tenant)
        now = timezone.now()
        keys = ApiKey.objects.filter(tenant=found).prefetch_related(
            Prefetch("agents", queryset=Agent.objects.only("id", "slug"))
        )
        if made_by is not None:
            keys = keys.filter(made_by=made_by)
        for key in keys:
            state = "revoked" if key.revoked_at else "expired" if key.expires_at and key.expires_at <= now else "active"
            if state != "active" and not options["all"]:
                continue
            row = {
                "prefix": key.prefix,
                "name": key.name,
                "principal": key.principal,
                "agents": sorted(a.slug for a in key.agents.all()) or "all",
                "created_at": key.created_at,
                "expires_at": key.expires_at,
                "last_used_at": key.last_used_at,
                "made_by": key.made_by,
                "state": state,
            }
            if options["json"]:
                self.stdout.write(dumps(row))
            else:
                agents = row["agents"] if row["agents"] == "all" else ",".join(row["agents"])
                last = key.last_used_at.isoformat(timespec="seconds") if key.last_used_at else "never"
                self.stdout.write(
                    f"{key.prefix}  {state:8} {key.name:20} {key.principal:24} agents={agents}  last used {last}"
                    f"  made by {key.made_by or 'unknown'}"
                )
