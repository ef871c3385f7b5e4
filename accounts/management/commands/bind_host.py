from django.core.management.base import BaseCommand, CommandError

from accounts.host_services import host_bind
from accounts.models import Agent, RootCard
from accounts.services import AccountError


class Command(BaseCommand):
    help = (
        "Bind a host name to an agent, as the operator (no proof asked): on that name the agent's card is at "
        "/.well-known/agent-card.json and its endpoints at / (idempotent; docs/tenancy.md)."
    )

    def add_arguments(self, parser):
        parser.add_argument("agent", help="TENANT/AGENT, e.g. demo/conformance")
        parser.add_argument("host", help="the host name (or IP address), without scheme, port or path")
        parser.add_argument(
            "--card",
            default="",
            choices=RootCard.values,
            help="the card a request naming no A2A version gets at the root: '' (the default, 1.0) or 0.3",
        )

    def handle(self, *args, agent, host, card, **options):
        tenant_slug, _, agent_slug = agent.partition("/")
        found = Agent.objects.filter(tenant__slug=tenant_slug, slug=agent_slug).select_related("tenant").first()
        if found is None:
            raise CommandError(f"no agent {agent!r} (TENANT/AGENT)")
        try:
            binding = host_bind(agent=found, host=host, card_version=card)
        except AccountError as exc:
            raise CommandError(str(exc)) from None
        root_card = f", its root's card A2A {binding.card_version}" if binding.card_version else ""
        self.stdout.write(f"{binding.host} -> {found}{root_card}")
