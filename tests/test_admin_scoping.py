"""The admin, scoped by tenant and role: a member sees only their tenants' data and does only
what their role allows there; superusers see and do everything the admin offers.

Two tenants, acme (A) and globex (B), each with an agent, a key, a task made through the
protocol with its push config, a dead delivery and its attempt, an issuer and a member.
Everything of globex carries "globex" in what the admin shows of it, so a page a member of
acme alone may read must never contain the word.

A later admin page of tenant data is covered by adding it to PAGES.

A test that only looks runs in a transaction rolled back after it and shares one world, made
once for the module. A test that changes the world (a key revoked and announced on commit, an
action that enqueues, a member added, an agent run) is marked `commits` and gets its own.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.db import connection, transaction
from django.test import Client, TestCase
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts import sealing
from accounts.models import Agent, ApiKey, Membership, MembershipInvitation, OidcIssuer, Role, Tenant
from accounts.services import (
    agent_secret_set,
    api_key_create,
    member_add,
    membership_accept,
    membership_invite,
    oidc_issuer_set,
    tenant_ensure,
)
from groups.models import GroupMembership, GroupTask
from push.models import ConfigStatus, DeliveryState, PushAttempt, PushConfig, PushDelivery
from registry import services as registry_services
from registry.models import Entry, Flag
from tasks_app.models import Task, TaskEvent
from tests.conftest import Rpc, as_for_each_test, make_agent

pytestmark = pytest.mark.django_db
commits = pytest.mark.django_db(transaction=True)

PASSWORD = "pw-for-tests-only"


@dataclass
class Side:
    """One tenant's things, as the admin shows them."""

    tenant: Tenant
    agent: Agent
    key: ApiKey
    plaintext: str
    task: Task
    config: PushConfig
    delivery: PushDelivery
    issuer: OidcIssuer
    membership: Membership
    entry: Entry
    flag: Flag
    group_membership: GroupMembership
    invitation: MembershipInvitation

    @property
    def path(self) -> str:
        return self.agent.path


@dataclass
class World:
    a: Side
    b: Side


def _side(rpc, tenant: Tenant, agent_slug: str, member: str) -> Side:
    agent = make_agent(tenant, agent_slug, "echo")
    agent_secret_set(agent=agent, secret=f"whsec-of-{tenant.slug}-in-plain")
    key, plaintext = api_key_create(tenant=tenant, name=f"{tenant.slug}-key", principal=f"{tenant.slug}-principal")
    hook = {"id": f"{tenant.slug}-hook", "url": f"http://127.0.0.1:9/{tenant.slug}-hook"}
    task_id = rpc.send(
        agent.path, f"hello from {tenant.slug}", key=plaintext, configuration={"taskPushNotificationConfig": hook}
    ).result["task"]["id"]
    config = PushConfig.objects.get(task_id=task_id)
    event = TaskEvent.objects.filter(task_id=task_id).order_by("seq").first()
    assert event is not None
    # A delivery that ran out of attempts, as push.delivery leaves one (its run is tested elsewhere).
    delivery = PushDelivery.objects.create(
        config=config,
        event=event,
        seq=event.seq,
        state=DeliveryState.DEAD,
        attempts=4,
        last_status_code=500,
        last_error=f"{tenant.slug}-delivery-error",
    )
    PushConfig.objects.filter(pk=config.pk).update(status=ConfigStatus.DEAD)
    PushAttempt.objects.create(
        delivery=delivery, started_at=timezone.now(), status_code=500, error=f"{tenant.slug}-attempt-error"
    )
    issuer = oidc_issuer_set(
        tenant=tenant,
        issuer=f"https://id.{tenant.slug}.example",
        audience=f"{tenant.slug}-agents",
        jwks_url=f"https://id.{tenant.slug}.example/jwks",
    )
    user = get_user_model().objects.create_user(member, password=PASSWORD)
    entry = registry_services.hosted_entry_sync(agent_id=agent.pk)
    assert entry is not None
    flag = registry_services.entry_flag(entry=entry, user=user, reason=f"{tenant.slug}-flag")
    group_membership = GroupMembership.objects.create(
        agent=agent,
        owner=f"{tenant.slug}-principal",
        group_id=f"{tenant.slug}-group",
        leader_aic=f"{tenant.slug}-leader",
        member_aic=f"{tenant.slug}/{agent_slug}",
        protocol="rabbitmq:4.0",
        host="mq.example.com",
        address="203.0.113.7",
        port=5672,
        vhost="/",
        username=f"{tenant.slug}/{agent_slug}",
        access_token_sealed=sealing.seal(f"{tenant.slug}-group-token-in-plain"),
        exchange=f"{tenant.slug}-exchange",
        queue=f"group_{tenant.slug}-queue",
        connection_name=f"agentserver {tenant.slug}",
        state="active",
    )
    GroupTask.objects.create(membership=group_membership, task_id=task_id)
    return Side(
        tenant=tenant,
        agent=agent,
        key=key,
        plaintext=plaintext,
        task=Task.objects.get(pk=task_id),
        config=config,
        delivery=delivery,
        issuer=issuer,
        membership=member_add(tenant=tenant, user=user, role=Role.OWNER),
        entry=entry,
        flag=flag,
        group_membership=group_membership,
        invitation=membership_invite(tenant=tenant, username=f"{tenant.slug}-invitee", role=Role.VIEWER)[0],
    )


def _world(rpc: Rpc, acme: Tenant) -> World:
    return World(
        a=_side(rpc, acme, "echo", "acme-founder"),
        b=_side(rpc, tenant_ensure(slug="globex", name="Globex"), "globex-spy", "globex-founder"),
    )


# The kept world lives in a transaction open for the module's tests that only look, each of
# them a savepoint rolled back after it, and rolled back after the last: nothing of it is ever
# committed, so the tests after this module find the database as the migrations left it.
# pytest-django runs every test that only looks before any that commits; pytest keeps a module
# fixture until the module's last test, and when this module runs alone that is one of these,
# so the first of them ends the world's transaction.
_kept: dict[str, Any] = {}


def _end_the_kept_world() -> None:
    atomic = _kept.pop("atomic", None)
    if atomic is not None:
        transaction.set_rollback(True)
        atomic.__exit__(None, None, None)


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker) -> Iterator[World]:
    """The world made once for the tests that only look (about 0.6 s a test saved, 200 tests).
    A module fixture is set up before a test's own transaction begins, which nests in this one.
    What its requests leave to run after commit (the agents' runs) runs when they are made."""
    with django_db_blocker.unblock():
        _kept["atomic"] = atomic = transaction.atomic()
        atomic.__enter__()
        try:
            with as_for_each_test(), TestCase.captureOnCommitCallbacks(execute=True):
                made = _world(Rpc(Client()), tenant_ensure(slug="acme", name="Acme"))
            yield made
        finally:
            _end_the_kept_world()


@pytest.fixture
def own_world(transactional_db, rpc, tenant) -> World:
    """A world for one test that changes it (`commits`)."""
    if _kept:
        _end_the_kept_world()
        tenant = tenant_ensure(slug="acme", name="Acme")
    return _world(rpc, tenant)


# --- who is looking ----------------------------------------------------------------------

# A-only members by role, one owner of A who only views B, a staff user of no tenant, a superuser.
USERS = ("viewer", "operator", "owner", "owner-of-a-viewer-of-b", "no-tenant", "superuser")
MEMBERS_OF_A_ONLY = ("viewer", "operator", "owner")


def _make_user(name: str, world: World):
    users = get_user_model().objects
    if name == "superuser":
        return users.create_superuser(name, f"{name}@example.com", PASSWORD)
    user = users.create_user(name, password=PASSWORD, is_staff=True)
    if name in (Role.VIEWER, Role.OPERATOR, Role.OWNER):
        member_add(tenant=world.a.tenant, user=user, role=name)
    elif name == "owner-of-a-viewer-of-b":
        member_add(tenant=world.a.tenant, user=user, role=Role.OWNER)
        member_add(tenant=world.b.tenant, user=user, role=Role.VIEWER)
    return user


@pytest.fixture
def as_user(request) -> Callable[[str], Client]:
    """A browser logged in to the admin as one of USERS, of the test's world."""
    named = "own_world" if "own_world" in request.fixturenames else "world"
    assert named in request.fixturenames, "a test of the admin names its world: built here, it would not commit"
    world = request.getfixturevalue(named)

    def login(name: str) -> Client:
        browser = Client()
        browser.force_login(_make_user(name, world))
        return browser

    return login


# --- the pages ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """An admin page of tenant data: where it is, which object of a tenant it shows and what
    of that object its listing shows, and which roles may add, change and delete there."""

    path: str
    pk: Callable[[Side], Any]
    listed: Callable[[Side], str]
    add: frozenset[str] = frozenset()
    change: frozenset[str] = frozenset()
    delete: frozenset[str] = frozenset()
    view_role: str = Role.VIEWER  # the least role that sees the page at all

    def seen_by(self, role: str) -> bool:
        """Whether a member with `role` (in the tenant) sees the page's objects."""
        return role == SUPERUSER or _RANK[role] >= _RANK[self.view_role]

    def changelist(self) -> str:
        return f"/admin/{self.path}/"

    def change_url(self, pk: Any) -> str:
        return f"/admin/{self.path}/{pk}/change/"


OWNER = frozenset({Role.OWNER})
SUPERUSER = "superuser"
_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.OWNER: 2}

PAGES = {
    "tenants": Page(
        "accounts/tenant",
        lambda s: s.tenant.pk,
        lambda s: s.tenant.slug,
        add=frozenset({SUPERUSER}),
        change=frozenset({SUPERUSER}),
        delete=frozenset({SUPERUSER}),
    ),
    "agents": Page(
        "accounts/agent",
        lambda s: s.agent.pk,
        lambda s: str(s.agent),
        add=frozenset({SUPERUSER}),
        change=OWNER | {SUPERUSER},
        delete=frozenset({SUPERUSER}),
    ),
    "api keys": Page(
        "accounts/apikey",
        lambda s: s.key.pk,
        lambda s: s.key.prefix,
        add=OWNER | {SUPERUSER},
        change=OWNER | {SUPERUSER},
        delete=frozenset({SUPERUSER}),  # members revoke keys; only a superuser removes one
    ),
    "memberships": Page(
        "accounts/membership",
        lambda s: s.membership.pk,
        lambda s: s.membership.user.username,
        change=OWNER | {SUPERUSER},
        delete=OWNER | {SUPERUSER},
    ),
    # Members are invited here (and become members by accepting); owners only, as the usernames
    # they typed are theirs. Revoked by an action, never deleted.
    "invitations": Page(
        "accounts/membershipinvitation",
        lambda s: s.invitation.pk,
        lambda s: s.invitation.username,
        add=OWNER | {SUPERUSER},
        view_role=Role.OWNER,
    ),
    "issuers": Page(
        "accounts/oidcissuer",
        lambda s: s.issuer.pk,
        lambda s: s.issuer.issuer,
        add=OWNER | {SUPERUSER},
        change=OWNER | {SUPERUSER},
        delete=OWNER | {SUPERUSER},
    ),
    # Protocol data: read-only for everyone.
    "tasks": Page("tasks_app/task", lambda s: s.task.pk, lambda s: str(s.task.pk)),
    "push configs": Page("push/pushconfig", lambda s: s.config.pk, lambda s: s.config.config_id),
    "push deliveries": Page("push/pushdelivery", lambda s: s.delivery.pk, lambda s: s.delivery.event_id_text),
    # The directory: entries change by decisions (tests/test_registry_admin.py), never by a form.
    "registry entries": Page(
        "registry/entry", lambda s: s.entry.pk, lambda s: s.entry.name, delete=frozenset({SUPERUSER})
    ),
    "registry flags": Page("registry/flag", lambda s: s.flag.pk, lambda s: s.flag.reason),
    "group memberships": Page(
        "groups/groupmembership", lambda s: s.group_membership.pk, lambda s: s.group_membership.member_aic
    ),
}


def nothing_of_globex_in(html: str, world: World) -> bool:
    return "globex" not in html.lower() and str(world.b.task.pk) not in html


def absent_pk(page: Page, world: World) -> Any:
    return uuid.uuid4() if isinstance(page.pk(world.a), uuid.UUID) else 987654321


# --- seeing ------------------------------------------------------------------------------


@pytest.mark.parametrize("member", MEMBERS_OF_A_ONLY)
@pytest.mark.parametrize("page_name", PAGES)
def test_a_member_of_one_tenant_lists_its_objects_and_nothing_of_another(page_name, member, world, as_user):
    page, browser = PAGES[page_name], as_user(member)
    listing = browser.get(page.changelist())
    if not page.seen_by(member):
        assert listing.status_code == 403
        return
    assert listing.status_code == 200
    html = listing.content.decode()
    assert page.listed(world.a) in html
    assert nothing_of_globex_in(html, world)


@pytest.mark.parametrize("member", MEMBERS_OF_A_ONLY)
@pytest.mark.parametrize("page_name", PAGES)
def test_another_tenants_object_answers_404_exactly_as_one_that_does_not_exist(page_name, member, world, as_user):
    page, browser = PAGES[page_name], as_user(member)
    own = browser.get(page.change_url(page.pk(world.a)))
    if page.seen_by(member):
        assert own.status_code == 200 and page.listed(world.a) in own.content.decode()
    else:
        assert own.status_code == 404
    foreign = browser.get(page.change_url(page.pk(world.b)))
    missing = browser.get(page.change_url(absent_pk(page, world)))
    assert foreign.status_code == missing.status_code == 404
    assert foreign.content == missing.content
    assert nothing_of_globex_in(foreign.content.decode(), world)
    # Nor through its history, its delete page, or a POST.
    for suffix in ("history/", "delete/"):
        assert browser.get(f"/admin/{page.path}/{page.pk(world.b)}/{suffix}").status_code == 404
    assert browser.post(page.change_url(page.pk(world.b)), {}).status_code == 404


@pytest.mark.parametrize("page_name", PAGES)
def test_a_member_of_two_tenants_sees_both_and_a_superuser_sees_everything(page_name, world, as_user):
    page = PAGES[page_name]
    for name in ("owner-of-a-viewer-of-b", "superuser"):
        html = as_user(name).get(page.changelist()).content.decode()
        assert page.listed(world.a) in html
        # B's only as far as viewing B's lets them.
        assert (page.listed(world.b) in html) == (name == SUPERUSER or page.seen_by(Role.VIEWER))


@pytest.mark.parametrize("page_name", PAGES)
def test_a_staff_user_of_no_tenant_sees_nothing(page_name, world, as_user):
    page, browser = PAGES[page_name], as_user("no-tenant")
    assert browser.get(page.changelist()).status_code == 403
    assert browser.get(page.change_url(page.pk(world.a))).status_code == 404
    index = browser.get("/admin/").content.decode()
    assert "permission to view or edit anything" in index
    assert page.changelist() not in index


def test_the_index_offers_a_member_only_what_they_may_see(world, as_user):
    index = as_user("viewer").get("/admin/").content.decode()
    for page in PAGES.values():
        assert (page.changelist() in index) == page.seen_by(Role.VIEWER)
    assert "/admin/push/signingkey/" not in index and "/admin/auth/user/" not in index


def test_the_sites_signing_keys_and_users_are_for_superusers_only(world, as_user):
    for member in ("owner", "owner-of-a-viewer-of-b"):
        browser = as_user(member)
        assert browser.get("/admin/push/signingkey/").status_code == 403
        assert browser.get("/admin/auth/user/").status_code == 403
    assert as_user("superuser").get("/admin/push/signingkey/").status_code == 200


def test_a_task_page_shows_the_members_messages_events_and_attempts_of_its_own_tenant(world, as_user):
    browser = as_user("viewer")
    task_page = browser.get(PAGES["tasks"].change_url(world.a.task.pk)).content.decode()
    assert "hello from acme" in task_page  # a message
    assert "TASK_STATE_COMPLETED" in task_page or "completed" in task_page  # status changes and events
    delivery_page = browser.get(PAGES["push deliveries"].change_url(world.a.delivery.pk)).content.decode()
    assert "acme-attempt-error" in delivery_page


def test_list_filters_offer_only_the_members_tenants_and_agents(world, as_user):
    html = as_user("owner-of-a-viewer-of-b").get("/admin/tasks_app/task/").content.decode()
    assert f"tenant__id__exact={world.b.tenant.pk}" in html  # both tenants: a filter to choose
    html = as_user("superuser").get("/admin/tasks_app/task/").content.decode()
    assert f"agent__id__exact={world.b.agent.pk}" in html
    # One tenant, one agent: nothing to choose, and never the other tenant's.
    owner = as_user("owner")
    html = owner.get("/admin/tasks_app/task/").content.decode()
    assert f"tenant__id__exact={world.b.tenant.pk}" not in html and f"agent__id__exact={world.b.agent.pk}" not in html
    filtered = owner.get(f"/admin/tasks_app/task/?tenant__id__exact={world.b.tenant.pk}")
    assert nothing_of_globex_in(filtered.content.decode(), world)


# --- doing -------------------------------------------------------------------------------

ROLES_AND_SUPERUSER = (Role.VIEWER, Role.OPERATOR, Role.OWNER, SUPERUSER)


@pytest.mark.parametrize("who", ROLES_AND_SUPERUSER)
@pytest.mark.parametrize("page_name", PAGES)
def test_each_role_adds_changes_and_deletes_only_where_it_may(page_name, who, world, as_user):
    page, browser = PAGES[page_name], as_user(who)
    pk = page.pk(world.a)
    assert browser.get(f"/admin/{page.path}/add/").status_code == (200 if who in page.add else 403)
    change_page = browser.get(page.change_url(pk))
    if not page.seen_by(who):
        assert change_page.status_code == browser.get(f"/admin/{page.path}/{pk}/delete/").status_code == 404
        return
    assert change_page.status_code == 200
    assert ('name="_save"' in change_page.content.decode()) == (who in page.change)
    if who not in page.change:
        assert browser.post(page.change_url(pk), {}).status_code == 403
    assert browser.get(f"/admin/{page.path}/{pk}/delete/").status_code == (200 if who in page.delete else 403)


def _run_action(browser: Client, page: Page, action: str, *pks: Any):
    return browser.post(page.changelist(), {"action": action, "_selected_action": [str(pk) for pk in pks]}, follow=True)


@commits
@pytest.mark.parametrize(("who", "may"), [(Role.VIEWER, False), (Role.OPERATOR, True), (Role.OWNER, True)])
def test_operators_and_owners_retry_dead_deliveries_and_viewers_cannot(who, may, own_world, as_user, push_jobs):
    browser, page = as_user(who), PAGES["push deliveries"]
    push_jobs.clear()  # the jobs the world's configs queued
    assert ("retry_dead" in browser.get(page.changelist()).content.decode()) == may
    _run_action(browser, page, "retry_dead", own_world.a.delivery.pk)
    own_world.a.delivery.refresh_from_db()
    assert own_world.a.delivery.state == (DeliveryState.PENDING if may else DeliveryState.DEAD)
    assert [config_pk for config_pk, _ in push_jobs] == ([own_world.a.config.pk] if may else [])
    logged = LogEntry.objects.filter(object_id=str(own_world.a.delivery.pk), action_flag=CHANGE, user__username=who)
    assert logged.exists() == may


@commits
def test_a_member_retries_only_in_the_tenants_where_they_operate(own_world, as_user):
    _run_action(
        as_user("owner-of-a-viewer-of-b"),
        PAGES["push deliveries"],
        "retry_dead",
        own_world.a.delivery.pk,
        own_world.b.delivery.pk,
    )
    assert PushDelivery.objects.get(pk=own_world.a.delivery.pk).state == DeliveryState.PENDING
    assert PushDelivery.objects.get(pk=own_world.b.delivery.pk).state == DeliveryState.DEAD


@commits
@pytest.mark.parametrize(("who", "may"), [(Role.VIEWER, False), (Role.OPERATOR, False), (Role.OWNER, True)])
def test_only_owners_revoke_keys(who, may, own_world, as_user):
    browser, page = as_user(who), PAGES["api keys"]
    assert ('value="revoke"' in browser.get(page.changelist()).content.decode()) == may
    _run_action(browser, page, "revoke", own_world.a.key.pk)
    own_world.a.key.refresh_from_db()
    assert (own_world.a.key.revoked_at is not None) == may


@commits
def test_a_key_revoked_in_the_admin_fails_on_the_next_request(own_world, as_user, rpc, auth_caches):
    assert rpc(own_world.a.path, "ListTasks", {}, key=own_world.a.plaintext).status == 200  # now cached
    response = _run_action(as_user("owner"), PAGES["api keys"], "revoke", own_world.a.key.pk)
    assert "Revoked 1 key(s)." in response.content.decode()
    assert rpc(own_world.a.path, "ListTasks", {}, key=own_world.a.plaintext).status == 401
    assert LogEntry.objects.filter(object_id=str(own_world.a.key.pk), change_message="Revoked.").exists()


@commits
def test_an_owner_of_one_tenant_revokes_only_its_keys(own_world, as_user, rpc):
    response = _run_action(
        as_user("owner-of-a-viewer-of-b"), PAGES["api keys"], "revoke", own_world.a.key.pk, own_world.b.key.pk
    )
    assert "Revoked 1 key(s). 1 not yours to revoke" in response.content.decode()
    assert rpc(own_world.a.path, "ListTasks", {}, key=own_world.a.plaintext).status == 401
    assert rpc(own_world.b.path, "ListTasks", {}, key=own_world.b.plaintext).status == 200


# --- API keys made in the admin ----------------------------------------------------------


def _add_key(browser: Client, **fields: Any):
    return browser.post("/admin/accounts/apikey/add/", fields, follow=True)


def _shown_plaintext(response) -> str:
    shown = next(m.message for m in response.context["messages"] if "ask_" in m.message)
    return shown[shown.index("ask_") :].strip()


@commits
def test_a_key_made_by_an_owner_is_shown_once_stored_hashed_and_calls_only_its_agents(own_world, as_user, rpc):
    other = make_agent(own_world.a.tenant, "other", "echo")
    browser = as_user("owner")
    response = _add_key(browser, tenant=own_world.a.tenant.pk, name="ci", agents=[own_world.a.agent.pk])
    plaintext = _shown_plaintext(response)
    key = ApiKey.objects.get(name="ci")
    assert key.key_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    assert not any(plaintext in str(value) for value in vars(key).values())
    assert key.principal == f"key:{key.prefix}"  # no principal given: the key is its own
    for page in (PAGES["api keys"].changelist(), PAGES["api keys"].change_url(key.pk)):
        html = browser.get(page).content.decode()
        assert plaintext not in html and key.key_hash not in html  # the secret once, its hash never
    assert rpc(own_world.a.path, "ListTasks", {}, key=plaintext).status == 200
    assert rpc(other.path, "ListTasks", {}, key=plaintext).status == 403
    assert LogEntry.objects.filter(object_id=str(key.pk), action_flag=ADDITION, user__username="owner").exists()


@commits
def test_the_key_form_offers_only_the_tenants_and_agents_the_member_owns(own_world, as_user):
    browser = as_user("owner-of-a-viewer-of-b")
    form = browser.get("/admin/accounts/apikey/add/").content.decode()
    assert f'<option value="{own_world.a.tenant.pk}"' in form and f'<option value="{own_world.a.agent.pk}"' in form
    assert nothing_of_globex_in(form, own_world)
    response = _add_key(browser, tenant=own_world.b.tenant.pk, name="sneaky")
    assert "Select a valid choice" in response.content.decode()
    response = _add_key(browser, tenant=own_world.a.tenant.pk, name="sneaky", agents=[own_world.b.agent.pk])
    assert "Select a valid choice" in response.content.decode()
    assert not ApiKey.objects.filter(name="sneaky").exists()


@commits
@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"principal": "oidc:someone"}, "must not contain"),  # accounts.services.api_key_check
        ({"expires_at_0": "2001-01-01", "expires_at_1": "00:00:00"}, "the expiry is in the past"),
    ],
)
def test_a_key_the_services_refuse_is_a_form_error(fields, error, own_world, as_user):
    response = _add_key(as_user("owner"), tenant=own_world.a.tenant.pk, name="refused", **fields)
    assert response.status_code == 200 and error in response.content.decode()
    assert not ApiKey.objects.filter(name="refused").exists()


@commits
def test_an_existing_keys_principal_and_tenant_do_not_change(own_world, as_user):
    browser = as_user("owner")
    expires = timezone.localtime(own_world.a.key.expires_at)  # kept as it is: an expiry is never removed
    browser.post(
        PAGES["api keys"].change_url(own_world.a.key.pk),
        {
            "name": "renamed",
            "principal": "someone-else",
            "tenant": own_world.b.tenant.pk,
            "expires_at_0": expires.strftime("%Y-%m-%d"),
            "expires_at_1": expires.strftime("%H:%M:%S"),
        },
    )
    own_world.a.key.refresh_from_db()
    assert own_world.a.key.name == "renamed"
    assert own_world.a.key.principal == "acme-principal" and own_world.a.key.tenant_id == own_world.a.tenant.pk


# --- members, agents, issuers, tenants ---------------------------------------------------


@commits
def test_a_tenant_keeps_an_owner(own_world, as_user):
    browser = as_user("owner")
    founder, mine = own_world.a.membership, Membership.objects.get(user__username="owner")
    browser.post(PAGES["memberships"].change_url(founder.pk), {"role": Role.VIEWER})
    assert Membership.objects.get(pk=founder.pk).role == Role.VIEWER
    refused = browser.post(PAGES["memberships"].change_url(mine.pk), {"role": Role.VIEWER})
    assert "last owner stays an owner" in refused.content.decode()
    assert browser.get(f"/admin/accounts/membership/{mine.pk}/delete/").status_code == 403
    assert Membership.objects.get(pk=mine.pk).role == Role.OWNER


@commits
def test_deleting_members_in_bulk_spares_the_tenants_the_member_only_views(own_world, as_user):
    def delete(who: str, membership: Membership):
        confirmed = {"action": "delete_selected", "_selected_action": [membership.pk], "post": "yes"}
        return as_user(who).post(PAGES["memberships"].changelist(), confirmed, follow=True)

    refused = delete("owner-of-a-viewer-of-b", own_world.b.membership)
    assert refused.status_code == 403  # Django's delete_selected refuses the whole selection
    assert Membership.objects.filter(pk=own_world.b.membership.pk).exists()
    assert delete("owner", own_world.a.membership).status_code == 200
    assert not Membership.objects.filter(pk=own_world.a.membership.pk).exists()


def _invite(browser: Client, tenant: Tenant, username: str, role: str = Role.VIEWER):
    return browser.post(
        f"{PAGES['invitations'].changelist()}add/",
        {"tenant": tenant.pk, "username": username, "role": role},
        follow=True,
    )


def _link_in(response) -> str:
    """The path of the invitation's link the admin showed once."""
    found = re.search(r"https?://[^/\s]+(/invitations/[^/\s]+/)", response.content.decode())
    assert found, response.content.decode()[:2000]
    return found.group(1)


@commits
def test_an_owner_invites_a_member_who_sees_the_tenant_only_once_they_accept(own_world, as_user):
    newcomer = get_user_model().objects.create_user("newcomer", password=PASSWORD)
    response = _invite(as_user("owner"), own_world.a.tenant, "newcomer")
    assert response.status_code == 200
    assert LogEntry.objects.filter(user__username="owner", action_flag=ADDITION).exists()
    link = _link_in(response)
    newcomer.refresh_from_db()
    assert not newcomer.is_staff and not Membership.objects.filter(user=newcomer).exists()
    browser = Client()
    browser.force_login(newcomer)
    assert browser.get("/admin/tasks_app/task/").status_code == 302  # to the admin's login: not staff
    assert "Acme" in browser.get(link).content.decode()
    accepted = browser.post(link, {"answer": "accept"})
    assert accepted.status_code == 302 and accepted["Location"] == "/admin/"
    newcomer.refresh_from_db()
    assert newcomer.is_staff and Membership.objects.get(user=newcomer).role == Role.VIEWER
    assert str(own_world.a.task.pk) in browser.get("/admin/tasks_app/task/").content.decode()


@commits
def test_inviting_a_name_no_user_has_answers_exactly_as_inviting_one_who_exists(own_world, as_user):
    get_user_model().objects.create_user("newcomer", password=PASSWORD)
    browser = as_user("owner")

    def page(username: str) -> tuple[int, str, list[str]]:
        browser.get(PAGES["invitations"].changelist())  # the messages before are shown and gone
        response = browser.post(
            f"{PAGES['invitations'].changelist()}add/",
            {"tenant": own_world.a.tenant.pk, "username": username, "role": Role.VIEWER},
        )
        said = [
            re.sub(r"/invitations/[^/\s]+/", "/invitations/TOKEN/", str(m).replace(username, "NAME"))
            for m in get_messages(response.wsgi_request)
        ]
        return response.status_code, response["Location"], said

    assert page("newcomer") == page("nobody-of-that-name")
    listed = browser.get(PAGES["invitations"].changelist()).content.decode()
    assert "newcomer" in listed and "nobody-of-that-name" in listed


@commits
def test_an_existing_member_is_not_invited(own_world, as_user):
    response = _invite(as_user("owner"), own_world.a.tenant, "acme-founder", Role.OWNER)
    assert "Already a member of this tenant" in response.content.decode()
    assert not MembershipInvitation.objects.filter(username="acme-founder").exists()


@commits
def test_a_member_is_not_invited_to_a_tenant_the_owner_only_views(own_world, as_user):
    response = _invite(as_user("owner-of-a-viewer-of-b"), own_world.b.tenant, "newcomer", Role.OWNER)
    assert "Select a valid choice" in response.content.decode()
    assert not MembershipInvitation.objects.filter(username="newcomer").exists()


@commits
def test_an_owner_revokes_only_its_tenants_invitations_and_a_revoked_one_cannot_be_accepted(own_world, as_user):
    invitee = get_user_model().objects.create_user("acme-invitee", password=PASSWORD)
    _run_action(
        as_user("owner-of-a-viewer-of-b"),
        PAGES["invitations"],
        "revoke",
        own_world.a.invitation.pk,
        own_world.b.invitation.pk,
    )
    answers = dict(MembershipInvitation.objects.values_list("username", "answer"))
    assert answers == {"acme-invitee": "revoked", "globex-invitee": ""}
    browser = Client()
    browser.force_login(invitee)
    assert (
        browser.post("/invitations/", {"invitation": own_world.a.invitation.pk, "answer": "accept"}).status_code == 404
    )
    assert not Membership.objects.filter(user=invitee).exists()


@commits
def test_removing_a_users_last_membership_in_the_admin_takes_back_only_the_staff_membership_gave(own_world, as_user):
    users = get_user_model().objects
    invited = users.create_user("invited", password=PASSWORD)
    made_staff = users.create_user("made-staff", password=PASSWORD, is_staff=True)  # by a superuser
    for user in (invited, made_staff):
        invitation, _ = membership_invite(tenant=own_world.a.tenant, username=user.username, role=Role.VIEWER)
        membership_accept(invitation=invitation, user=user)
    assert users.get(username="invited").is_staff
    browser = as_user("owner")
    for user in (invited, made_staff):
        membership = Membership.objects.get(user=user)
        confirmed = {"action": "delete_selected", "_selected_action": [membership.pk], "post": "yes"}
        assert browser.post(PAGES["memberships"].changelist(), confirmed, follow=True).status_code == 200
    assert not Membership.objects.filter(user__in=[invited, made_staff]).exists()
    assert not users.get(username="invited").is_staff
    assert users.get(username="made-staff").is_staff


@commits
def test_an_owner_changes_a_members_role_and_nothing_else(own_world, as_user):
    as_user("owner").post(
        PAGES["memberships"].change_url(own_world.a.membership.pk),
        {"role": Role.VIEWER, "tenant": own_world.b.tenant.pk, "user": own_world.b.membership.user.pk},
    )
    own_world.a.membership.refresh_from_db()
    assert own_world.a.membership.role == Role.VIEWER
    assert (
        own_world.a.membership.tenant == own_world.a.tenant and own_world.a.membership.user.username == "acme-founder"
    )


@commits
def test_an_owner_edits_its_agent_which_stays_in_its_tenant(own_world, as_user, rpc):
    agent = own_world.a.agent
    form = {
        "slug": agent.slug,
        "name": "Renamed",
        "description": agent.description,
        "version": "2.0.0",
        "skills": "[]",
        "input_modes": '["text/plain"]',
        "output_modes": '["text/plain"]',
        "executor": agent.executor,
        "settings": "{}",
        "extensions": "[]",
        "extended_card": "null",
        "streaming": "on",
        "push_notifications": "on",
        "is_active": "on",
        "tenant": own_world.b.tenant.pk,
        # The page's inline of host names (accounts.admin_hosts), left empty.
        "hosts-TOTAL_FORMS": "0",
        "hosts-INITIAL_FORMS": "0",
    }
    response = as_user("owner").post(PAGES["agents"].change_url(agent.pk), form)
    assert response.status_code == 302, response.context["adminform"].form.errors
    agent.refresh_from_db()
    assert agent.name == "Renamed" and agent.version == "2.0.0" and agent.tenant == own_world.a.tenant
    assert LogEntry.objects.filter(object_id=str(agent.pk), action_flag=CHANGE, user__username="owner").exists()


@pytest.mark.parametrize("who", ("owner", SUPERUSER))
def test_no_page_shows_a_group_s_access_token_sealed_or_not(who, world, as_user):
    browser = as_user(who)
    page = PAGES["group memberships"]
    membership = world.a.group_membership
    listed, shown = browser.get(page.changelist()), browser.get(page.change_url(membership.pk))
    assert listed.status_code == shown.status_code == 200
    assert membership.queue in shown.content.decode(), "the page shows the membership"
    for html in (listed.content.decode(), shown.content.decode()):
        assert "acme-group-token-in-plain" not in html and membership.access_token_sealed not in html


@pytest.mark.parametrize("who", USERS)
def test_no_page_shows_an_agent_s_secret_to_anyone(who, world, as_user):
    browser = as_user(who)
    for side in (world.a, world.b):
        sealed = Agent.objects.get(pk=side.agent.pk).secret_sealed
        for path in (PAGES["agents"].changelist(), PAGES["agents"].change_url(side.agent.pk)):
            html = browser.get(path).content.decode()
            assert f"whsec-of-{side.tenant.slug}-in-plain" not in html and sealed not in html


@pytest.mark.parametrize("who", ["viewer", "operator", "owner-of-a-viewer-of-b"])
def test_only_an_owner_of_the_agent_s_tenant_changes_its_secret(who, world, as_user):
    side = world.b if who == "owner-of-a-viewer-of-b" else world.a
    before = Agent.objects.get(pk=side.agent.pk).secret_sealed
    form = {"slug": side.agent.slug, "name": "x", "description": "x", "executor": "echo", "secret_action": "clear"}
    response = as_user(who).post(PAGES["agents"].change_url(side.agent.pk), form)
    assert response.status_code == 403
    assert Agent.objects.get(pk=side.agent.pk).secret_sealed == before


@commits
def test_an_owner_sets_its_tenants_issuer_and_no_other(own_world, as_user):
    OidcIssuer.objects.filter(tenant=own_world.a.tenant).delete()
    browser = as_user("owner-of-a-viewer-of-b")
    issuer = {"issuer": "https://login.acme.example", "audience": "acme", "jwks_url": "https://login.acme.example/k"}
    browser.post("/admin/accounts/oidcissuer/add/", {"tenant": own_world.a.tenant.pk, "is_active": "on", **issuer})
    assert OidcIssuer.objects.get(tenant=own_world.a.tenant).issuer == "https://login.acme.example"
    browser.post(PAGES["issuers"].change_url(own_world.b.issuer.pk), {"tenant": own_world.b.tenant.pk, **issuer})
    assert OidcIssuer.objects.get(tenant=own_world.b.tenant).issuer == "https://id.globex.example"


def test_no_member_creates_a_tenant_or_changes_its_limits(world, as_user):
    browser = as_user("owner")
    assert browser.post("/admin/accounts/tenant/add/", {"slug": "mine", "name": "Mine"}).status_code == 403
    changed = browser.post(
        PAGES["tenants"].change_url(world.a.tenant.pk), {"slug": "acme", "name": "Acme", "max_active_tasks": 999}
    )
    assert changed.status_code == 403
    assert Tenant.objects.get(pk=world.a.tenant.pk).max_active_tasks is None
    assert not Tenant.objects.filter(slug="mine").exists()


# --- cost --------------------------------------------------------------------------------


def _queries(browser: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert browser.get(url).status_code == 200
    return len(queries)


@commits
@pytest.mark.parametrize("page_name", PAGES)
def test_a_listing_costs_the_same_queries_however_many_rows_it_shows(page_name, own_world, as_user, rpc):
    page, browser = PAGES[page_name], as_user("owner-of-a-viewer-of-b")
    before = _queries(browser, page.changelist())
    # A third tenant's worth of rows, which this member also sees.
    third = tenant_ensure(slug="initech", name="Initech")
    _side(rpc, third, "initech-bot", "initech-founder")
    member_add(tenant=third, user=get_user_model().objects.get(username="owner-of-a-viewer-of-b"), role=Role.VIEWER)
    after = _queries(browser, page.changelist())
    assert page.listed(own_world.a) in browser.get(page.changelist()).content.decode()
    assert after == before


@pytest.mark.parametrize("page_name", PAGES)
@pytest.mark.parametrize("query", [{"state": "\x00"}, {"q": "a\x00b"}, {"tenant__id__exact": "\x00"}, {"\x00": "1"}])
def test_a_nul_in_a_list_s_query_is_an_incorrect_lookup_not_an_error(page_name, query, world, as_user):
    answer = as_user("superuser").get(PAGES[page_name].changelist(), query)
    assert answer.status_code == 302 and answer["Location"].endswith("?e=1")


@pytest.mark.parametrize("page_name", PAGES)
@pytest.mark.parametrize(
    "selected", [["not-a-key"], ["\x00"], ["9" * 40], ["-1", ""]], ids=["word", "nul", "huge", "odd"]
)
def test_a_selection_no_key_can_be_makes_no_action_answer_500(page_name, selected, world, as_user):
    """Whatever a list's action form carries: the action runs on what it names, or Django says
    nothing was selected; never a failed query."""
    browser = as_user("superuser")
    page = browser.get(PAGES[page_name].changelist())
    for action in re.findall(r'<option value="(\w+)">', page.content.decode().split('name="action"', 1)[-1])[:4]:
        answer = browser.post(
            PAGES[page_name].changelist(), {"action": action, "index": "0", "_selected_action": selected}
        )
        assert answer.status_code in (200, 302), (action, answer.status_code)
