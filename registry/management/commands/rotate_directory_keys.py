"""Rotate the key that signs the directory's attestations (registry/attestations.py).

The new key is in /registry/jwks.json at once and signs after --publish-delay seconds
(PUSH_KEY_PUBLISH_DELAY by default), so verifiers that cache the key set learn it first. The
key(s) it replaces sign until then and stay published REGISTRY_ATTESTATION_LIFETIME seconds
more, until the last attestation they signed has expired; the directory's keys past that are
deleted. Run it on a schedule or when a key may have leaked.
"""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from push.models import KeyPurpose
from push.signing import key_rotate


class Command(BaseCommand):
    help = "Create a new directory signing key; it is published now and signs after the publish delay."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--publish-delay",
            type=float,
            default=None,
            help=f"seconds between publishing and signing (default PUSH_KEY_PUBLISH_DELAY, "
            f"{settings.PUSH_KEY_PUBLISH_DELAY:g})",
        )

    def handle(self, *args, publish_delay: float | None, **options) -> None:
        delay = settings.PUSH_KEY_PUBLISH_DELAY if publish_delay is None else publish_delay
        if delay < 0:
            self.stderr.write("--publish-delay must not be negative")
            raise SystemExit(2)
        key, deleted = key_rotate(
            publish_delay=delay, purpose=KeyPurpose.DIRECTORY, kept_for=settings.REGISTRY_ATTESTATION_LIFETIME
        )
        self.stdout.write(
            f"new directory key {key.kid}: published now, signs from {key.signs_from.isoformat()}"
            + (f"; deleted {deleted} expired key(s)" if deleted else "")
        )
