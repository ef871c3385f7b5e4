"""What the schemathesis runs over the one OpenAPI document (/api/schema/) share: the
application they call in-process, the document's part each one tests, and the checks every
answer must pass (tests/test_registry_schemathesis.py, tests/test_tenant_api_schemathesis.py)."""

from __future__ import annotations

import schemathesis
from django.core.wsgi import get_wsgi_application
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

application = get_wsgi_application()

# No answer is a server error, and every answer has a documented status, content type and shape.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def operations_under(path_regex: str):  # type: ignore[no-untyped-def]
    """The document's operations whose path matches `path_regex`."""
    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", application).include(path_regex=path_regex)
