"""Rotate the key that signs the agent cards (protocols/card_signing.py).

The new key is in the card key set at once and starts signing after --publish-delay seconds
(CARD_KEY_PUBLISH_DELAY by default), so clients that cache the key set learn it before they
meet a card it signed. The key(s) it replaces sign until then and stay published while a card
they signed may still be cached (AGENT_CARD_MAX_AGE + CARD_JWKS_MAX_AGE + a minute); keys past
that are deleted. Every card's signature, and so its ETag, changes when the new key starts
signing. Run it on a schedule (e.g. yearly) or at once when a key may have leaked (then with a
short delay, accepting that some clients refetch the key set).
"""

from protocols.card_signing import kept_for
from push.models import KeyPurpose
from push.rotation import RotateKeysCommand


class Command(RotateKeysCommand):
    help = "Create a new card signing key; it is published now and signs cards after the publish delay."
    purpose = KeyPurpose.CARD
    signs = "cards"
    delay_setting = "CARD_KEY_PUBLISH_DELAY"

    def kept_for(self) -> float | None:
        return kept_for()
