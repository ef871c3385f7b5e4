import json

from django.core.management.base import BaseCommand, CommandError

from accounts import agent_kinds
from accounts.models import Tenant
from accounts.services import agent_ensure, agent_secret_generate, agent_secret_set
from tasks_app import executors


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
        parser.add_argument(
            "--new-secret",
            action="store_true",
            help="give the agent a new secret (Standard Webhooks form, whsec_...) and print it: a webhook "
            "agent signs its requests with it; it is shown this once",
        )
        parser.add_argument("--json", action="store_true", help="print a JSON object")

    def handle(
        self,
        *args,
        tenant,
        slug,
        executor,
        name,
        description,
        public,
        sandbox,
        executor_settings,
        new_secret,
        **options,
    ):
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
        agent = agent_ensure(
            tenant=found,
            slug=slug,
            defaults={
                "name": name or slug,
                "description": description or f"The {slug} agent.",
                "executor": executor,
                "settings": parsed,
                "is_public": public,
                "shared_sandbox": sandbox,
            },
        )
        secret = ""
        if new_secret:
            secret = agent_secret_generate()
            agent_secret_set(agent=agent, secret=secret)
        if options["json"]:
            shown = {"tenant": found.slug, "agent": agent.slug, "path": agent.path}
            self.stdout.write(json.dumps({**shown, "secret": secret} if secret else shown))
        else:
            self.stdout.write(agent.path)
            if secret:
                self.stdout.write(f"secret: {secret}")
