"""An agent's host names in its admin page (accounts.admin_hosts): a superuser binds a name at
once, an owner claims one and sees the token to publish, the list's action verifies claims,
and every change goes through accounts.host_services."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from accounts import host_services
from accounts.host_services import DomainProof, ProofOutcome, host_claim
from accounts.models import AgentHost, Role
from accounts.services import member_add
from tests.host_spellings import RESERVED
from tests.test_hosted_agent_config import form_for, hosts_inline

pytestmark = pytest.mark.django_db

HOST = "agent.example.com"


@pytest.fixture
def owner(client, tenant):
    user = get_user_model().objects.create_user("owner", "owner@example.com", "pw-for-tests-only")
    member_add(tenant=tenant, user=user, role=Role.OWNER)
    client.force_login(user)
    return client


def post_hosts(browser, agent, *rows, initial=0, existing=()):
    form = form_for(agent)
    data = {k: ("" if v is None else v) for k, v in form.data.items()}
    data["tenant"] = agent.tenant_id
    data.update(hosts_inline(*rows, initial=initial))
    for i, binding in enumerate(existing):
        data[f"hosts-{i}-id"] = binding.pk
        data[f"hosts-{i}-agent"] = agent.pk
    return browser.post(f"/admin/accounts/agent/{agent.pk}/change/", data, follow=True)


def test_a_superuser_binds_a_name_at_once(admin_client, echo_agent):
    page = post_hosts(admin_client, echo_agent, {"host": "Agent.Example.com", "card_version": "0.3"})
    assert page.status_code == 200
    binding = AgentHost.objects.get()
    assert (binding.host, binding.card_version, binding.proof, binding.is_bound) == (HOST, "0.3", "operator", True)


def test_an_owner_claims_a_name_and_sees_the_token_to_publish(owner, echo_agent):
    post_hosts(owner, echo_agent, {"host": HOST, "card_version": ""})
    claim = AgentHost.objects.get()
    assert not claim.is_bound and claim.bound_by.username == "owner"
    page = owner.get(f"/admin/accounts/agent/{echo_agent.pk}/change/").content.decode()
    assert f"agentserver-verification={claim.proof_token}" in page and f"_agentserver-verification.{HOST}" in page


def test_the_servers_own_name_is_refused_in_the_form(admin_client, echo_agent):
    page = post_hosts(admin_client, echo_agent, {"host": "localhost", "card_version": ""})
    assert "one of this server&#x27;s own names" in page.content.decode()
    assert not AgentHost.objects.exists()


@hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(host=RESERVED)
def test_an_owner_claims_no_spelling_of_a_special_address_or_of_localhost(owner, echo_agent, host):
    page = post_hosts(owner, echo_agent, {"host": host, "card_version": ""}).content.decode()
    assert "cannot be claimed" in page or "can be claimed" in page or "own names" in page, host
    assert not AgentHost.objects.exists()


def test_a_superuser_binds_a_loopback_address_but_never_a_name_allowed_hosts_matches(
    admin_client, echo_agent, settings
):
    settings.ALLOWED_HOSTS = ["testserver", ".platform.example"]
    page = post_hosts(admin_client, echo_agent, {"host": "X.Platform.Example.", "card_version": ""})
    assert "x.platform.example is one of this server&#x27;s own names" in page.content.decode()
    assert not AgentHost.objects.exists()
    post_hosts(admin_client, echo_agent, {"host": "[::ffff:127.0.0.2]", "card_version": ""})
    assert AgentHost.objects.get().host == "127.0.0.2"  # the operator's machine, the operator's choice


def test_a_name_is_unbound_by_deleting_its_row(admin_client, echo_agent):
    binding = host_services.host_bind(agent=echo_agent, host=HOST)
    post_hosts(
        admin_client, echo_agent, {"host": HOST, "card_version": "", "DELETE": "on"}, initial=1, existing=[binding]
    )
    assert not AgentHost.objects.exists()


def test_the_action_binds_a_claim_whose_token_is_found(owner, echo_agent, monkeypatch):
    claim = host_claim(agent=echo_agent, host=HOST)
    found = DomainProof(check=lambda host, token, method: ProofOutcome(method == "http", method), instructions=dict)
    monkeypatch.setattr(host_services, "_proof", found)
    owner.post(
        "/admin/accounts/agent/", {"action": "verify_pending_hosts", "_selected_action": [echo_agent.pk]}, follow=True
    )
    claim.refresh_from_db()
    assert claim.is_bound and claim.proof == "http"


def test_an_owner_cannot_claim_for_another_tenants_agent(owner, tenant):
    from accounts.services import tenant_ensure
    from tests.conftest import make_agent

    theirs = make_agent(tenant_ensure(slug="other", name="Other"), "bot", "echo")
    page = post_hosts(owner, theirs, {"host": HOST, "card_version": ""})
    assert page.status_code == 404 and not AgentHost.objects.exists()
