"""The registry REST API's tokens: made by the token endpoint (or `manage.py registry_token`),
shown once, kept only as a SHA-256 digest, and refused after REGISTRY_TOKEN_LIFETIME."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .models import ApiToken

# "rgt_" then 256 random bits: the prefix tells a registry token apart in a leaked log or a
# secret scanner's findings.
TOKEN_PREFIX = "rgt_"
SHOWN_PREFIX_LENGTH = 12


def digest_of(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def token_create(*, user: Any) -> tuple[ApiToken, str]:
    """A new token for `user`: the row and the token (shown once; not kept). The user's expired
    tokens are dropped, and the oldest past REGISTRY_TOKENS_PER_USER."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = timezone.now()
    with transaction.atomic():
        made = ApiToken.objects.create(
            user=user,
            prefix=secret[:SHOWN_PREFIX_LENGTH],
            digest=digest_of(secret),
            created_at=now,
            expires_at=now + timedelta(seconds=settings.REGISTRY_TOKEN_LIFETIME),
        )
        mine = ApiToken.objects.filter(user=user)
        mine.filter(expires_at__lte=now).delete()
        keep = max(1, settings.REGISTRY_TOKENS_PER_USER)
        surplus = list(mine.order_by("-created_at", "-id").values_list("pk", flat=True)[keep:])
        if surplus:
            ApiToken.objects.filter(pk__in=surplus).delete()
    return made, secret


def token_find(token: str) -> ApiToken | None:
    """The token's row with its user (one query), expired or not; None for an unknown token."""
    return ApiToken.objects.select_related("user").filter(digest=digest_of(token)).first()
