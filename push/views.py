"""The public keys receivers verify notifications with."""

from __future__ import annotations

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from . import signing


@require_GET
def jwks(request: HttpRequest) -> HttpResponse:
    # A fresh install has no key until something signs; make the one that will sign now, so
    # a receiver that fetches the set before its first notification finds that key in it.
    signing.key_for_signing()
    response = HttpResponse(orjson.dumps(signing.jwks()), content_type="application/jwk-set+json")
    # A key is published PUSH_KEY_PUBLISH_DELAY before it signs; keep caches shorter than that.
    response["Cache-Control"] = f"public, max-age={settings.PUSH_JWKS_MAX_AGE}"
    return response
