from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.models import Role
from accounts.services import AccountError, member_add

from ._args import dumps, tenant_or_error


class Command(BaseCommand):
    help = "Make a user a member of a tenant with a role, or change their role (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="tenant slug")
        parser.add_argument("username")
        parser.add_argument("--role", choices=Role.values, default=Role.VIEWER)
        parser.add_argument(
            "--create-user",
            action="store_true",
            help="create the user if there is none (without a password: set one with changepassword)",
        )
        parser.add_argument("--email", default="")
        parser.add_argument("--json", action="store_true", help="print a JSON object")

    def handle(self, *args, tenant, username, role, create_user, email, **options):
        found = tenant_or_error(tenant)
        users = get_user_model().objects
        user = users.filter(username=username).first()
        if user is None:
            if not create_user:
                raise CommandError(f"no user {username!r} (add --create-user to create one)")
            user = users.create_user(username=username, email=email)
        try:
            membership = member_add(tenant=found, user=user, role=role)
        except AccountError as exc:
            raise CommandError(str(exc)) from None
        summary = {"tenant": found.slug, "user": user.get_username(), "role": membership.role}
        self.stdout.write(dumps(summary) if options["json"] else f"{user.get_username()} is {role} of {found.slug}")
