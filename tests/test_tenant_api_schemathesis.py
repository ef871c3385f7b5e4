"""The tenant API against the OpenAPI document (/api/schema/), as tests/test_registry_schemathesis.py
runs the registry's part: schemathesis sends every operation under /api/v1/ the requests the
document allows (and some it does not), as an owner, a viewer, a key without a management role
and nobody, to the WSGI application in-process: no answer is a server error, and every answer
has a documented status, content type and shape.

Path parameters mostly name objects that exist (tenant A's, tenant B's), so that not every
answer is a 404. The requests run in autocommit (transactional_db)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings

from tests.api_schema import CHECKS, operations_under
from tests.tenant_api_world import build, host_of

schema = operations_under("^/api/v1/")

_turns = itertools.count()


def test_the_document_holds_every_operation_of_the_tenant_api():
    operations = {(op.method.upper(), op.path) for result in schema.get_all_operations() for op in [result.ok()]}
    assert len(operations) == 41
    assert ("POST", "/api/v1/tenants/{slug}/keys/revoke/") in operations
    assert ("POST", "/api/v1/tenants/{slug}/tasks/{task_id}/cancel/") in operations
    assert ("POST", "/api/v1/tenants/{slug}/deliveries/{id}/retry/") in operations
    assert ("POST", "/api/v1/tenants/{slug}/tasks/{task_id}/redispatch/") in operations
    assert ("GET", "/api/v1/tenants/{slug}/tasks/{task_id}/files/{source}/{ref}/{index}/") in operations
    assert ("POST", "/api/v1/tenants/{slug}/agents/{agent}/hosts/{host}/verify/") in operations
    assert ("GET", "/api/v1/tenants/{slug}/group-memberships/{id}/") in operations
    assert ("DELETE", "/api/v1/tenants/{slug}/invitations/{id}/") in operations


@pytest.fixture
def world(transactional_db, client, django_user_model, settings):
    # A host's DNS proof asks the test settings' loopback nameserver, which answers nothing.
    settings.REGISTRY_PROOF_TIMEOUT = 0.2
    return build(client, django_user_model)


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_request_gets_a_server_error_or_an_answer_the_document_does_not_describe(case, world):
    turn = next(_turns)
    side = world.a if turn % 3 else world.b
    params = dict(case.path_parameters or {})
    if turn % 4:
        known = {
            "slug": side.slug,
            "task_id": side.task_id,
            "prefix": side.key_prefix,
            "username": "vera",
            "agent": "echo",
            "id": (
                side.delivery_pk
                if "/deliveries/" in case.path
                else side.membership_pk
                if "/group-memberships/" in case.path
                else side.invitation_pk
                if "/invitations/" in case.path
                else side.config_pk
            ),
            "host": host_of(side.slug),
            "source": "message",
            "ref": side.message_pk,
            "index": 1,
        }
        params.update({name: known[name] for name in params if name in known})
        case.path_parameters = params
    callers = [
        {"X-API-Key": world.a.keys["owner"]},
        {"X-API-Key": world.a.keys["viewer"]},
        {"X-API-Key": world.a.keys[""]},
        {},
    ]
    for headers in callers:
        response = case.call(headers=headers)
        case.validate_response(response, checks=CHECKS, headers=headers)
