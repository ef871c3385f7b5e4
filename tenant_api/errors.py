"""Refusals in the registry API's one JSON shape (registry.api.errors): `detail`, a sentence,
and for a refused body or query `errors`, field -> messages. A service's AccountError is the
caller's mistake: 400 under the field it is about."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rest_framework import exceptions, status

from accounts.services import AccountError
from registry.api.errors import StrictJSONParser, not_found
from registry.api.errors import exception_handler as registry_exception_handler

__all__ = ["Conflict", "StrictJSONParser", "exception_handler", "field_errors", "not_found"]


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "the request conflicts with the object's state"


@contextmanager
def field_errors(field: str) -> Iterator[None]:
    """A service's refusal (AccountError) as a 400 naming `field`."""
    try:
        yield
    except AccountError as exc:
        raise exceptions.ValidationError({field: [str(exc)]}) from None


def problems_error(problems: dict[str, list[str]]) -> exceptions.ValidationError:
    """Itemised problems (field -> messages; "__all__" for the whole) as a 400."""
    errors = {("non_field_errors" if k == "__all__" else k): [str(m) for m in v] for k, v in problems.items()}
    return exceptions.ValidationError(errors or {"non_field_errors": ["the values are not valid"]})


def exception_handler(exc: Exception, context: dict[str, Any]) -> Any:
    if isinstance(exc, AccountError):
        exc = exceptions.ValidationError({"non_field_errors": [str(exc)]})
    return registry_exception_handler(exc, context)
