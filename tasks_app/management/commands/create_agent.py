import json
import sys

from django.core.management.base import BaseCommand, CommandError

from accounts.agent_services import SECRET, AgentInvalid, agent_save
from accounts.models import Agent, Tenant
from accounts.services import agent_secret_generate
from tasks_app import executors

# Card content the command sets, by option: (model field, parse as JSON).
CARD_OPTIONS = {
    "skills": ("skills", True),
    "input_modes": ("input_modes", True),
    "output_modes": ("output_modes", True),
    "provider_organization": ("provider_organization", False),
    "provider_url": ("provider_url", False),
    "icon_url": ("icon_url", False),
    "documentation_url": ("documentation_url", False),
    "extended_card": ("extended_card", True),
}


class Command(BaseCommand):
    # Here rather than in accounts: its help lists the executors this install has, which live
    # above accounts.
    help = "Create a tenant's agent, or bring an existing one up to the given options (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="tenant slug")
        parser.add_argument("slug", help="the agent's path segment")
        parser.add_argument("--executor", required=True, help="the agent's logic: " + ", ".join(executors.REGISTRY))
        parser.add_argument(
            "--name",
            help="its display name (default: a fronted agent's upstream's, else the slug; kept when not given)",
        )
        parser.add_argument(
            "--description",
            default="",
            help="the card's description (default: a fronted agent's upstream's, else 'The <slug> agent.')",
        )
        parser.add_argument("--public", action="store_true", help="anonymous callers may use it")
        parser.add_argument(
            "--sandbox", action="store_true", help="a shared sandbox: every caller sees every task (its card says so)"
        )
        parser.add_argument("--executor-settings", default="{}", help="the executor's settings, a JSON object")
        card = parser.add_argument_group("the card's content (left as it is when not given)")
        card.add_argument("--skills", help='a JSON list of A2A skills: [{"id", "name", "description", "tags", ...}]')
        card.add_argument("--input-modes", help='a JSON list of media types, e.g. ["text/plain"]')
        card.add_argument("--output-modes", help="a JSON list of media types")
        card.add_argument("--provider-organization", help="the provider's name (empty: the tenant's)")
        card.add_argument("--provider-url", help="the provider's URL (empty: this server's)")
        card.add_argument("--icon-url")
        card.add_argument("--documentation-url")
        card.add_argument(
            "--extended-card",
            help='what authenticated callers see in addition, a JSON object: {"skills": [...], "description", '
            '"documentationUrl", "iconUrl"} (declared on the card; null removes it)',
        )
        secret = parser.add_mutually_exclusive_group()
        secret.add_argument(
            "--generate-secret", action="store_true", help="give the agent a new secret and print it (once)"
        )
        secret.add_argument("--secret-stdin", action="store_true", help="read the agent's secret from stdin")
        parser.add_argument("--json", action="store_true", help="print a JSON object")

    def handle(self, *args, tenant, slug, executor, name, description, public, sandbox, executor_settings, **options):
        # Checked and written by the one agent service, as the admin's form and the tenant API
        # are: the same input gets the same answer. This process reads the same settings module
        # as the server, from its own environment: a refusal names the setting that decides it.
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"no tenant {tenant!r} (create_tenant makes one)")
        try:
            parsed = json.loads(executor_settings)
        except ValueError as exc:
            raise CommandError(f"--executor-settings is not JSON: {exc}") from None
        values = {
            "executor": executor,
            "settings": parsed,
            "is_public": public,
            "shared_sandbox": sandbox,
            **({"name": name} if name else {}),
            **({"description": description} if description else {}),
            **self._card(options),
        }
        secret = self._secret(options)
        existing = Agent.objects.filter(tenant=found, slug=slug).first()
        try:
            agent = agent_save(tenant=found, slug=slug, values=values, secret=secret, agent=existing)
        except AgentInvalid as exc:
            hint = " (give --generate-secret or --secret-stdin)" if SECRET in exc.problems else ""
            raise CommandError(f"{exc}{hint}") from None
        shown = {"tenant": found.slug, "agent": agent.slug, "path": agent.path}
        if options["generate_secret"]:
            shown["secret"] = secret or ""
        if options["json"]:
            self.stdout.write(json.dumps(shown))
        else:
            self.stdout.write(agent.path)
            if options["generate_secret"]:
                self.stdout.write(f"secret (copy it now, it is not shown again): {secret}")

    def _card(self, options) -> dict:
        values = {}
        for option, (field, as_json) in CARD_OPTIONS.items():
            given = options.get(option)
            if given is None:
                continue
            if as_json:
                try:
                    given = json.loads(given)
                except ValueError as exc:
                    raise CommandError(f"--{option.replace('_', '-')} is not JSON: {exc}") from None
            values[field] = given
        if "extended_card" in values:
            values["has_extended_card"] = values["extended_card"] is not None
        return values

    def _secret(self, options) -> str | None:
        if options["generate_secret"]:
            return agent_secret_generate()
        if not options["secret_stdin"]:
            return None
        return sys.stdin.readline().rstrip("\r\n")  # checked by the service, as any secret
