"""Rotate the key that signs the agent cards (protocols/card_signing.py).

The new key is in the card key set at once and starts signing after --publish-delay seconds
(CARD_KEY_PUBLISH_DELAY by default), so clients that cache the key set learn it before they
meet a card it signed. The key(s) it replaces sign until then and stay published while a card
they signed may still be cached (AGENT_CARD_MAX_AGE + CARD_JWKS_MAX_AGE + a minute); keys past
that are deleted. Every card's signature, and so its ETag, changes when the new key starts
signing. Run it on a schedule (e.g. yearly) or at once when a key may have leaked (then with a
short delay, accepting that some clients refetch the key set).
"""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from protocols.card_signing import kept_for
from push.models import KeyPurpose
from push.signing import key_rotate


class Command(BaseCommand):
    help = "Create a new card signing key; it is published now and signs cards after the publish delay."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--publish-delay",
            type=float,
            default=None,
            help=f"seconds between publishing and signing (default CARD_KEY_PUBLISH_DELAY, "
            f"{settings.CARD_KEY_PUBLISH_DELAY:g})",
        )

    def handle(self, *args, publish_delay: float | None, **options) -> None:
        delay = settings.CARD_KEY_PUBLISH_DELAY if publish_delay is None else publish_delay
        if delay < 0:
            self.stderr.write("--publish-delay must not be negative")
            raise SystemExit(2)
        key, deleted = key_rotate(publish_delay=delay, purpose=KeyPurpose.CARD, kept_for=kept_for())
        self.stdout.write(
            f"new card key {key.kid}: published now, signs cards from {key.signs_from.isoformat()}"
            + (f"; deleted {deleted} expired key(s)" if deleted else "")
        )
