"""Rotate the key that signs the directory's attestations (registry/attestations.py).

The new key is in /registry/jwks.json at once and signs after --publish-delay seconds
(PUSH_KEY_PUBLISH_DELAY by default), so verifiers that cache the key set learn it first. The
key(s) it replaces sign until then and stay published REGISTRY_ATTESTATION_LIFETIME seconds
more, until the last attestation they signed has expired; the directory's keys past that are
deleted. Run it on a schedule or when a key may have leaked.
"""

from django.conf import settings

from push.models import KeyPurpose
from push.rotation import RotateKeysCommand


class Command(RotateKeysCommand):
    help = "Create a new directory signing key; it is published now and signs after the publish delay."
    purpose = KeyPurpose.DIRECTORY
    signs = "attestations"
    delay_setting = "PUSH_KEY_PUBLISH_DELAY"

    def kept_for(self) -> float | None:
        return float(settings.REGISTRY_ATTESTATION_LIFETIME)
