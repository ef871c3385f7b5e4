from django.core.management.base import BaseCommand, CommandError

from accounts.models import Tenant
from registry import services
from registry.models import Entry, Kind, State


class Command(BaseCommand):
    help = (
        "Approve a tenant's hosted agents' pending entries in the directory, as a curator would "
        "(each decision kept with the reason given). For seeding and scripted set-ups; curators "
        "otherwise decide in the admin's review queue."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="tenant slug")
        parser.add_argument("--reason", default="approved by manage.py approve_entries")

    def handle(self, *args, tenant, reason, **options):
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"no tenant {tenant!r}")
        for agent in found.agents.all():
            services.hosted_entry_sync(agent_id=agent.pk)
        approved = []
        for entry in Entry.objects.filter(tenant=found, kind=Kind.HOSTED, state=State.PENDING):
            services.entry_decide(entry=entry, to=State.APPROVED, actor=None, role="curator", reason=reason)
            approved.append(entry.name)
        self.stdout.write(f"approved {len(approved)} entr{'y' if len(approved) == 1 else 'ies'} of {found.slug}")
