"""Rotate the key that signs push notifications.

The new key is in the JWKS at once and starts signing after --publish-delay seconds
(PUSH_KEY_PUBLISH_DELAY by default), so receivers that cache the JWKS learn it first. The
key(s) it replaces sign until then and stay published until their last signature expires;
keys past that are deleted. Run it on a schedule (e.g. monthly) or when a key may have leaked
(then with a short delay, accepting that some receivers refetch the JWKS).
"""

from push.models import KeyPurpose
from push.rotation import RotateKeysCommand


class Command(RotateKeysCommand):
    help = "Create a new push signing key; it is published now and signs after the publish delay."
    purpose = KeyPurpose.PUSH
    signs = "push notifications"
    delay_setting = "PUSH_KEY_PUBLISH_DELAY"
