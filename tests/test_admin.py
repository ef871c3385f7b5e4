"""A superuser inspects tasks and manages keys in the Django admin (what members of a tenant
see and do there: tests/test_admin_scoping.py)."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts.models import ApiKey
from accounts.services import api_key_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def superuser(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-for-tests-only")
    client.force_login(user)
    return client


def test_a_superuser_browses_a_task_with_its_history_and_events(superuser, rpc, writer_agent, alice_key):
    task = rpc.send("/agents/acme/writer/", "a letter about spring", key=alice_key).result["task"]
    listing = superuser.get("/admin/tasks_app/task/")
    assert listing.status_code == 200 and task["id"] in listing.content.decode()
    page = superuser.get(f"/admin/tasks_app/task/{task['id']}/change/").content.decode()
    assert "Planning a letter about spring" in page  # a status message
    assert "letter.txt" in page  # the artifact
    assert "completed" in page  # the status history and the event log


def test_an_api_key_made_in_the_admin_is_shown_once_and_stored_hashed(superuser, tenant, echo_agent, rpc):
    response = superuser.post(
        "/admin/accounts/apikey/add/", {"tenant": tenant.pk, "name": "from-admin", "principal": "dora"}, follow=True
    )
    assert response.status_code == 200
    shown = next(m.message for m in response.context["messages"] if "ask_" in m.message)
    plaintext = shown[shown.index("ask_") :].strip()
    stored = ApiKey.objects.get(name="from-admin")
    assert plaintext not in stored.key_hash and stored.principal == "dora"
    assert rpc("/agents/acme/echo/", "ListTasks", {}, key=plaintext).result["totalSize"] == 0


@pytest.mark.parametrize("name", ["anonymous", "ANONYMOUS", "shared"])
def test_an_api_key_naming_a_principal_the_server_gives_is_not_made_in_the_admin(superuser, tenant, name):
    response = superuser.post(
        "/admin/accounts/apikey/add/", {"tenant": tenant.pk, "name": "sneaky", "principal": name}, follow=True
    )
    assert response.status_code == 200
    assert "anonymous, shared are the server&#x27;s" in response.content.decode()
    assert not ApiKey.objects.filter(name="sneaky").exists()


def test_the_store_is_read_only_in_the_admin_even_for_a_superuser(superuser, rpc, echo_agent, alice_key):
    task = rpc.send("/agents/acme/echo/", "keep me", key=alice_key).result["task"]
    page = superuser.get(f"/admin/tasks_app/task/{task['id']}/change/").content.decode()
    assert 'name="_save"' not in page
    assert superuser.get(f"/admin/tasks_app/task/{task['id']}/delete/").status_code == 403
    assert superuser.get("/admin/tasks_app/task/add/").status_code == 403


def test_a_superuser_sees_a_missing_object_as_not_found(superuser, tenant):
    assert superuser.get("/admin/accounts/tenant/987654321/change/").status_code == 404


def test_a_superuser_grants_a_tenant_installed_executors_on_its_page(superuser, tenant, monkeypatch):
    from tasks_app.executors import REGISTRY, Executor, plugins

    class Shouter(Executor):
        name = "shouter"

    monkeypatch.setitem(REGISTRY, "shouter", Shouter)
    monkeypatch.setattr(plugins, "LOADED", [*plugins.LOADED, plugins.Loaded("shouter", "acme-agents 1.0", "a:S")])
    page = superuser.get(f"/admin/accounts/tenant/{tenant.pk}/change/").content.decode()
    assert 'value="shouter"' in page and 'value="echo"' not in page  # built-in ones need no grant
    data = {"slug": "acme", "name": "Acme", "allowed_executors": ["shouter"]}
    assert superuser.post(f"/admin/accounts/tenant/{tenant.pk}/change/", data).status_code == 302
    tenant.refresh_from_db()
    assert tenant.allowed_executors == ["shouter"]
    del data["allowed_executors"]
    superuser.post(f"/admin/accounts/tenant/{tenant.pk}/change/", data)
    tenant.refresh_from_db()
    assert tenant.allowed_executors == []


def test_an_api_key_made_in_the_admin_without_an_expiry_gets_the_default_lifetime_and_names_its_maker(
    superuser, tenant, settings
):
    settings.API_KEY_DEFAULT_LIFETIME = 3600.0
    superuser.post("/admin/accounts/apikey/add/", {"tenant": tenant.pk, "name": "from-admin"}, follow=True)
    key = ApiKey.objects.get(name="from-admin")
    assert key.made_by == "admin:root"
    assert abs(key.expires_at - key.created_at - timedelta(hours=1)) < timedelta(seconds=5)
    assert "admin:root" in superuser.get(f"/admin/accounts/apikey/{key.pk}/change/").content.decode()


def test_the_admin_gives_no_management_role_to_a_key_limited_to_some_agents(superuser, tenant, echo_agent):
    form = {"tenant": tenant.pk, "name": "eagent-ops", "agents": [echo_agent.pk], "management_role": "operator"}
    response = superuser.post("/admin/accounts/apikey/add/", form, follow=True)
    assert "limited to some agents cannot have a management role" in response.content.decode()
    assert not ApiKey.objects.filter(name="eagent-ops").exists()
    # Nor does a management key become one by limiting it afterwards.
    key, _ = api_key_create(tenant=tenant, name="ops", management_role="operator")
    change = {"name": "ops", "agents": [echo_agent.pk], "expires_at_0": "", "expires_at_1": ""}
    response = superuser.post(f"/admin/accounts/apikey/{key.pk}/change/", change, follow=True)
    assert "limited to some agents cannot have a management role" in response.content.decode()
    assert not key.agents.exists()


def test_the_admin_keeps_an_expiry_within_the_maximum_and_never_removes_one(superuser, tenant, settings):
    settings.API_KEY_MAX_LIFETIME = 30 * 24 * 3600.0
    far = (timezone.now() + timedelta(days=31)).strftime("%Y-%m-%d")
    form = {"tenant": tenant.pk, "name": "long", "expires_at_0": far, "expires_at_1": "00:00:00"}
    response = superuser.post("/admin/accounts/apikey/add/", form, follow=True)
    assert "the expiry is too far away" in response.content.decode()
    assert not ApiKey.objects.filter(name="long").exists()
    key, _ = api_key_create(tenant=tenant, name="short")
    change = {"name": "short", "expires_at_0": "", "expires_at_1": ""}
    response = superuser.post(f"/admin/accounts/apikey/{key.pk}/change/", change, follow=True)
    assert "can be changed, not removed" in response.content.decode()
    key.refresh_from_db()
    assert key.expires_at is not None
