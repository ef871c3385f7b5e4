import json
import sys

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from accounts import agent_kinds
from accounts.models import Agent, Tenant
from accounts.services import AccountError, agent_ensure, agent_secret_check, agent_secret_generate, agent_secret_set
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
}


class Command(BaseCommand):
    # Here rather than in accounts: it checks the executor's name against the executors this
    # install has, which live above accounts.
    help = "Create a tenant's agent, or bring an existing one up to the given options (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="tenant slug")
        parser.add_argument("slug", help="the agent's path segment")
        parser.add_argument("--executor", required=True, help="the agent's logic: " + ", ".join(executors.REGISTRY))
        parser.add_argument("--name", help="its display name (default: the slug)")
        parser.add_argument("--description", default="", help="the card's description")
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
        secret = parser.add_mutually_exclusive_group()
        secret.add_argument(
            "--generate-secret", action="store_true", help="give the agent a new secret and print it (once)"
        )
        secret.add_argument("--secret-stdin", action="store_true", help="read the agent's secret from stdin")
        parser.add_argument("--json", action="store_true", help="print a JSON object")

    def handle(self, *args, tenant, slug, executor, name, description, public, sandbox, executor_settings, **options):
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"no tenant {tenant!r} (create_tenant makes one)")
        if executor not in executors.REGISTRY:
            raise CommandError(f"no executor {executor!r}; this install has {', '.join(sorted(executors.REGISTRY))}")
        try:
            parsed = json.loads(executor_settings)
        except ValueError as exc:
            raise CommandError(f"--executor-settings is not JSON: {exc}") from None
        problems = agent_kinds.settings_problems(executor, parsed)
        if problems:
            raise CommandError("--executor-settings: " + "; ".join(problems))
        defaults = {
            "name": name or slug,
            "description": description or f"The {slug} agent.",
            "executor": executor,
            "settings": parsed,
            "is_public": public,
            "shared_sandbox": sandbox,
            **self._card(options),
        }
        self._check(found, slug, defaults)
        secret = self._secret(options)
        agent = agent_ensure(tenant=found, slug=slug, defaults=defaults)
        if secret is not None:
            agent_secret_set(agent=agent, secret=secret)
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
        return values

    def _check(self, tenant: Tenant, slug: str, defaults: dict) -> None:
        """The model's own validation, before anything is written: a bad link or list is
        refused saying which, not stored."""
        existing = Agent.objects.filter(tenant=tenant, slug=slug).first()
        candidate = existing or Agent(tenant=tenant, slug=slug)
        for field, value in defaults.items():
            setattr(candidate, field, value)
        try:
            candidate.full_clean(validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{field}: {' '.join(errors)}" for field, errors in exc.message_dict.items())
            ) from None

    def _secret(self, options) -> str | None:
        if options["generate_secret"]:
            return agent_secret_generate()
        if not options["secret_stdin"]:
            return None
        try:
            return agent_secret_check(sys.stdin.readline().rstrip("\r\n"))
        except AccountError as exc:
            raise CommandError(f"--secret-stdin: {exc}") from None
