"""`Authorization: Token <token>` for the registry's REST API, against registry.tokens' hashed,
expiring tokens. A TokenAuthentication (its header parsing, its 401 and `WWW-Authenticate:
Token`, its OpenAPI security scheme) whose tokens are looked up by digest."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from .. import tokens
from ..models import ApiToken


class RegistryTokenAuthentication(TokenAuthentication):
    keyword = "Token"
    model = ApiToken

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:
        token = tokens.token_find(key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if token.expires_at <= timezone.now():
            raise exceptions.AuthenticationFailed(
                "The token has expired: get a new one from POST /api/registry/token/."
            )
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return token.user, token
