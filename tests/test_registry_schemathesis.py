"""The registry API against its own OpenAPI schema (/api/schema/): the schema validates, and
schemathesis sends every operation the requests the schema allows (and some it does not),
signed in and not, to the WSGI application in-process: no answer is a server error, and every
answer has a documented status, content type and shape.

The requests run in autocommit (transactional_db): Django's WSGI handler closes connections
that are inside a transaction at each request's start."""

from __future__ import annotations

import itertools
from io import StringIO

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, settings

from registry.models import State
from registry.tokens import token_create
from tests.api_schema import CHECKS, operations_under
from tests.registry_factories import add_checks, make_entries, new_version

# The document is the tenant API's too (tests/test_tenant_api_schemathesis.py runs that part).
schema = operations_under("^/api/registry/")

_turns = itertools.count()


def test_the_schema_validates_with_no_warnings():
    out = StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", stdout=out)
    assert '"/api/registry/agents/"' in out.getvalue()


def test_the_schema_documents_every_operation_of_the_api():
    operations = {(op.method.upper(), op.path) for result in schema.get_all_operations() for op in [result.ok()]}
    assert operations == {
        ("GET", "/api/registry/agents/"),
        ("POST", "/api/registry/agents/"),
        ("GET", "/api/registry/agents/{id}/"),
        ("GET", "/api/registry/agents/{id}/versions/{number}/"),
        ("POST", "/api/registry/agents/{id}/verify/"),
        ("POST", "/api/registry/agents/{id}/transition/"),
        ("POST", "/api/registry/agents/{id}/flag/"),
        ("GET", "/api/registry/agents/{id}/attestation/"),
        ("POST", "/api/registry/token/"),
    }


@pytest.fixture
def world(transactional_db, django_user_model, settings):
    """A few entries in several states, some the caller's; the caller's token."""
    settings.REGISTRY_PROOF_TIMEOUT = 0.2
    settings.REGISTRY_CARD_FETCH_TIMEOUT = 0.5
    user = django_user_model.objects.create_user("fuzz", "fuzz@example.test", "pw-fuzz-fuzz-fuzz")
    entries = make_entries(
        [
            {"name": "Weather", "tags": ["forecast"], "capabilities": ["streaming"], "signed_kid": "k1"},
            {"name": "Deprecated", "state": State.DEPRECATED},
            {"name": "Mine, approved", "submitted_by": user, "health": "healthy"},
            {"name": "Mine, a draft", "state": State.DRAFT, "submitted_by": user},
            {"name": "Someone's draft", "state": State.DRAFT},
        ]
    )
    add_checks(entries[0], [True, False, True])
    new_version(entries[2], name="Mine, approved", description="changed")
    return {"ids": [e.pk for e in entries], "token": token_create(user=user)[1]}


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_request_gets_a_server_error_or_an_answer_the_schema_does_not_document(case, world):
    # Most cases name an entry that exists (each in turn: several states, the caller's and not),
    # so that not every answer is a 404. (Hypothesis seeds `random` alike for every example.)
    turn = next(_turns)
    if "id" in (case.path_parameters or {}) and turn % 4:
        case.path_parameters = {**case.path_parameters, "id": world["ids"][turn % len(world["ids"])]}
        if "number" in case.path_parameters:
            case.path_parameters["number"] = 1 + turn % 2
    callers = [{"Authorization": f"Token {world['token']}"}]
    if case.method.upper() == "GET":
        callers.append({})
    for headers in callers:
        response = case.call(headers=headers)
        case.validate_response(response, checks=CHECKS, headers=headers)
