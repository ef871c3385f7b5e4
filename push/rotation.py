"""The one shape of every key-rotation command (push's, the cards', the directory's): a new key
of a purpose, published now and signing after --publish-delay seconds, the keys it replaces kept
published as long as what they signed may still be checked."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from .signing import key_rotate


class RotateKeysCommand(BaseCommand):
    """A subclass names its purpose, what it signs (for the messages), the setting of its
    default delay, and how long a replaced key stays published (None: push's own rule)."""

    purpose: str
    signs: str  # e.g. "push notifications"
    delay_setting: str  # e.g. "PUSH_KEY_PUBLISH_DELAY"

    def kept_for(self) -> float | None:
        return None

    def default_delay(self) -> float:
        from django.conf import settings

        return float(getattr(settings, self.delay_setting))

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--publish-delay",
            type=float,
            default=None,
            help=f"seconds between publishing and signing (default {self.delay_setting}, {self.default_delay():g})",
        )

    def handle(self, *args: Any, publish_delay: float | None, **options: Any) -> None:
        delay = self.default_delay() if publish_delay is None else publish_delay
        if delay < 0:
            self.stderr.write("--publish-delay must not be negative")
            raise SystemExit(2)
        key, deleted = key_rotate(publish_delay=delay, purpose=self.purpose, kept_for=self.kept_for())
        self.stdout.write(
            f"new {self.purpose} key {key.kid}: published now, signs {self.signs} from {key.signs_from.isoformat()}"
            + (f"; deleted {deleted} expired key(s)" if deleted else "")
        )
