from django.core.management.base import BaseCommand, CommandError

from accounts.agent_services import tenant_executors_set
from accounts.selectors import executors_for
from accounts.services import AccountError

from ._args import dumps, tenant_or_error


class Command(BaseCommand):
    help = (
        "Choose which installed executors (plugins) a tenant's agents may use; every tenant may use the "
        "built-in ones. Names given replace the grant (none: withdraw every one) unless --add or --remove."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="tenant slug")
        parser.add_argument("executors", nargs="*", metavar="NAME", help="installed executors to allow")
        change = parser.add_mutually_exclusive_group()
        change.add_argument("--add", action="store_true", help="add the names to what the tenant has")
        change.add_argument("--remove", action="store_true", help="withdraw the names, keep the others")
        change.add_argument("--show", action="store_true", help="change nothing, print the grant")
        parser.add_argument("--json", action="store_true", help="print a JSON object")

    def handle(self, *args, tenant, executors, add, remove, show, **options):
        found = tenant_or_error(tenant)
        held = list(found.allowed_executors or [])
        if not show:
            if add:
                wanted = held + executors
            elif remove:
                wanted = [name for name in held if name not in executors]
            else:
                wanted = executors
            try:
                found = tenant_executors_set(tenant=found, executors=wanted)
            except AccountError as exc:
                raise CommandError(str(exc)) from None
        shown = {"tenant": found.slug, "allowed": found.allowed_executors, "usable": executors_for(found)}
        if options["json"]:
            self.stdout.write(dumps(shown))
        else:
            self.stdout.write(f"{found.slug} may use: {', '.join(shown['usable']) or 'none'}")
