from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from registry import tokens


class Command(BaseCommand):
    help = (
        "Make a registry API token for a user and print it (shown this once: only its SHA-256 is kept); "
        "it expires after REGISTRY_TOKEN_LIFETIME."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, username, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        token, secret = tokens.token_create(user=user)
        self.stdout.write(f"{secret}\n(expires {token.expires_at:%Y-%m-%d %H:%M} UTC)")
