"""What every answer of the API has in common when it refuses: a JSON body with `detail` (a
sentence), plus `errors` (field -> messages) for a refused request body or query, or `problems`
(path, message) for a refused card; and the strict reading of a request body."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.parsers import BaseParser
from rest_framework.views import exception_handler as drf_exception_handler

from accounts import storable

from .. import services

# A body here is a URL, a reason or a state: a few kilobytes at most.
MAX_BODY = 64 * 1024
MAX_REASON = 2000

# RegistryError.code -> HTTP status.
STATUS_OF = {
    "invalid": status.HTTP_400_BAD_REQUEST,
    "forbidden": status.HTTP_403_FORBIDDEN,
    "conflict": status.HTTP_409_CONFLICT,
    "unavailable": status.HTTP_502_BAD_GATEWAY,
}
NOT_FOUND = "no entry with this id (or not one you may see)"


class Refused(exceptions.APIException):
    """A RegistryError as an answer: its status by its code, its problems itemised."""

    def __init__(self, error: services.RegistryError) -> None:
        super().__init__(detail=str(error))
        self.status_code = STATUS_OF.get(error.code, status.HTTP_400_BAD_REQUEST)
        self.problems = [{"path": p.path, "message": p.message} for p in error.problems]


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = f"the request body is larger than {MAX_BODY} bytes"


class StrictJSONParser(BaseParser):
    """JSON as the task store reads it (accounts.storable): UTF-8, no NaN, no member named
    twice, no U+0000 or lone surrogate (Postgres cannot store them), at most 64 levels deep.
    At most MAX_BODY bytes are read: a larger body is 413, never read whole."""

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        if stream is None:
            return {}
        body = stream.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            raise BodyTooLarge()
        try:
            value = storable.loads(body)
            storable.check(value, where="the body")
        except (storable.Malformed, storable.Refused) as exc:
            raise exceptions.ParseError(f"the body is not usable JSON: {exc}") from None
        return value


def _first_message(errors: Any, path: str = "") -> str:
    """The first of a ValidationError's messages, with the field it is about."""
    if isinstance(errors, dict):
        for key, value in errors.items():
            where = key if key != "non_field_errors" else ""
            return _first_message(value, f"{path}.{where}" if path and where else where or path)
    if isinstance(errors, list) and errors:
        return _first_message(errors[0], path)
    return f"{path}: {errors}" if path else str(errors)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Any:
    """DRF's handler, with every body an object holding `detail`."""
    if isinstance(exc, services.RegistryError):
        exc = Refused(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"detail": _first_message(data) or "the request is not valid", "errors": _as_dict(data)}
    elif not (isinstance(data, dict) and "detail" in data):
        response.data = {"detail": str(data)}
    if isinstance(exc, Refused) and exc.problems:
        response.data["problems"] = exc.problems
    return response


def _as_dict(data: Any) -> dict[str, Any]:
    if isinstance(data, dict):
        return data
    return {"non_field_errors": data if isinstance(data, list) else [str(data)]}


@csrf_exempt  # nothing is here to protect: a POST is answered 404 in JSON, not 403 in HTML
def not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """Any other path under /api/: a 404 in JSON (with a hint when a slash is missing)."""
    hint = "" if request.path.endswith("/") else " (paths of this API end with a slash)"
    return JsonResponse({"detail": f"nothing at {request.path[:200]}{hint}"}, status=404)
