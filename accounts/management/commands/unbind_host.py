from django.core.management.base import BaseCommand

from accounts.host_services import host_unbind
from accounts.hosts import host_name
from accounts.models import AgentHost


class Command(BaseCommand):
    help = "Unbind a host name (and drop every pending claim of it): it answers as an unknown name (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("host", help="the host name")

    def handle(self, *args, host, **options):
        name = host_name(host) or host
        dropped = 0
        for binding in AgentHost.objects.filter(host=name):
            host_unbind(binding=binding)
            dropped += 1
        self.stdout.write(f"{name}: {'unbound' if dropped else 'was not bound'}")
