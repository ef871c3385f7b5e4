"""Secrets at rest: push credentials, tokens and signing keys, and agents' secrets (a webhook
agent's signing secret, a fronted agent's upstream credential) are stored Fernet-encrypted.
It sits at the bottom (accounts) because agents' secrets are sealed here and push's above.

The key is `PUSH_CREDENTIALS_KEY` (one or more Fernet keys, comma-separated: the first
encrypts, all decrypt, so keys can be rotated), or else one derived from `SECRET_KEY` with
HKDF, so a deployment is encrypted at rest without extra configuration. Losing the key
loses the sealed values, not the rest of the data.
"""

from __future__ import annotations

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


class Unsealable(Exception):
    """A sealed value that none of the configured keys opens."""


def _derived_key(secret: str) -> bytes:
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"agentserver push secrets v1").derive(
        secret.encode()
    )
    return base64.urlsafe_b64encode(raw)


@lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    material = [k.encode() for k in keys if k] or [_derived_key(secret_key)]
    return MultiFernet([Fernet(k) for k in material])


def _current() -> MultiFernet:
    return _fernet(tuple(settings.PUSH_CREDENTIALS_KEY), settings.SECRET_KEY)


def seal(value: str) -> str:
    """Encrypt `value`; the empty string stays empty (nothing to hide, nothing to decrypt)."""
    return _current().encrypt(value.encode()).decode() if value else ""


def unseal(sealed: str) -> str:
    if not sealed:
        return ""
    try:
        return _current().decrypt(sealed.encode()).decode()
    except InvalidToken:
        raise Unsealable("a sealed secret could not be decrypted with the configured keys") from None
