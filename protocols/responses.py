"""How the agent edge writes a plain HTTP answer: JSON with the headers the site middleware would
set (agent endpoints run without it: agentserver/asgi.py), and the 404 of the whole site.

Apart from the views so that `protocols.hosts`, which the views import, can answer a bound host
name's unknown path without importing them back."""

from __future__ import annotations

import orjson
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.defaults import page_not_found

from .bindings import Reply


def with_headers(response: HttpResponse | StreamingHttpResponse, headers: dict[str, str]):
    for name, value in headers.items():
        response[name] = value
    return response


def json_response(body: bytes, status: int = 200) -> HttpResponse:
    return with_headers(HttpResponse(body, status=status), Reply(status, body).all_headers())


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404 in JSON under /agents/ (clients there parse JSON); Django's page elsewhere."""
    if request.path.startswith("/agents/"):
        return json_response(orjson.dumps({"error": f"nothing at {request.path}"}), 404)
    return page_not_found(request, exception)
