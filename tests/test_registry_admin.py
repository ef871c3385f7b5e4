"""The curators' admin: the review queue, an entry's page with what changed side by side, the
decision form pinned to the card it showed, and flags. (Which tenant's member sees which entry
is in tests/test_admin_scoping.py.)"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.models import Role
from accounts.services import member_add
from registry import services
from registry.curators import curators_group
from registry.models import Entry, Flag, State
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-tests-only"


@pytest.fixture
def entry(tenant) -> Entry:
    agent = make_agent(tenant, "helper", "echo", description="Helps with <script>alert(1)</script> chores.")
    made = services.hosted_entry_sync(agent_id=agent.pk)
    assert made is not None
    return made


def browser_for(client, name: str, *, curator: bool = False, superuser: bool = False):
    users = get_user_model().objects
    user = users.create_user(name, password=PASSWORD, is_staff=True, is_superuser=superuser)
    if curator:
        user.groups.add(curators_group())
    client.force_login(user)
    return client, user


def test_the_review_queue_lists_pending_entries_oldest_first_for_curators(client, tenant, entry):
    other = services.hosted_entry_sync(agent_id=make_agent(tenant, "second", "echo").pk)
    browser, _ = browser_for(client, "carol", curator=True)
    queue = browser.get("/admin/registry/entry/review/", follow=True)
    html = queue.content.decode()
    assert queue.status_code == 200
    assert html.index(f"/admin/registry/entry/{entry.pk}/change/") < html.index(
        f"/admin/registry/entry/{other.pk}/change/"
    )
    assert "Review queue (2)" in browser.get("/admin/registry/entry/").content.decode()


def test_a_curator_approves_from_the_entry_page_with_a_reason_kept(client, entry):
    browser, carol = browser_for(client, "carol", curator=True)
    page = browser.get(f"/admin/registry/entry/{entry.pk}/change/").content.decode()
    assert 'name="version_hash"' in page and entry.current_version.hash in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    browser.post(
        f"/admin/registry/entry/{entry.pk}/decide/",
        {"to": "approved", "reason": "looks right", "version_hash": entry.current_version.hash},
    )
    entry.refresh_from_db()
    assert entry.state == State.APPROVED and entry.approved_version == entry.current_version
    decision = entry.decisions.first()
    assert decision is not None and (decision.actor, decision.reason) == (carol, "looks right")


def test_a_decision_on_a_card_that_changed_since_the_page_was_shown_is_refused(client, entry):
    browser, _ = browser_for(client, "carol", curator=True)
    shown = entry.current_version.hash
    agent = entry.agent
    agent.description = "Changed behind the curator's back."
    agent.save()
    services.hosted_entry_sync(agent_id=agent.pk)
    answer = browser.post(
        f"/admin/registry/entry/{entry.pk}/decide/", {"to": "approved", "version_hash": shown}, follow=True
    )
    entry.refresh_from_db()
    assert entry.state == State.PENDING and entry.approved_version is None
    assert "changed since it was shown" in answer.content.decode()


def test_the_entry_page_shows_what_changed_since_the_approved_version(client, entry):
    browser, carol = browser_for(client, "carol", curator=True)
    services.entry_decide(entry=entry, to=State.APPROVED, actor=carol, role="curator")
    agent = entry.agent
    agent.description = "Now also <b>translates</b>."
    agent.save()
    services.hosted_entry_sync(agent_id=agent.pk)
    page = browser.get(f"/admin/registry/entry/{entry.pk}/change/").content.decode()
    assert "What changed since the approved version" in page
    assert 'class="diff"' in page and "&lt;b&gt;translates&lt;/b&gt;" in page
    compare = browser.get(f"/admin/registry/entry/{entry.pk}/diff/?a=1&b=2").content.decode()
    assert "version 1" in compare and "version 2" in compare and "translates" in compare


def test_a_tenant_operator_may_deprecate_its_entry_but_not_approve_it(client, tenant, entry):
    browser, user = browser_for(client, "ops")
    member_add(tenant=tenant, user=user, role=Role.OPERATOR)
    page = browser.get(f"/admin/registry/entry/{entry.pk}/change/").content.decode()
    assert 'name="_decide"' not in page  # a pending entry: nothing an owner may do
    browser.post(f"/admin/registry/entry/{entry.pk}/decide/", {"to": "approved"})
    entry.refresh_from_db()
    assert entry.state == State.PENDING
    carol = get_user_model().objects.create_user("carol", is_superuser=True, is_staff=True)
    services.entry_decide(entry=entry, to=State.APPROVED, actor=carol, role="curator")
    browser.post(f"/admin/registry/entry/{entry.pk}/decide/", {"to": "deprecated", "reason": "use v2"})
    entry.refresh_from_db()
    assert entry.state == State.DEPRECATED


def test_a_viewer_may_look_but_not_decide(client, tenant, entry):
    browser, user = browser_for(client, "viewer")
    member_add(tenant=tenant, user=user, role=Role.VIEWER)
    assert browser.get(f"/admin/registry/entry/{entry.pk}/change/").status_code == 200
    assert browser.post(f"/admin/registry/entry/{entry.pk}/decide/", {"to": "pending"}).status_code == 403


def test_curators_resolve_flags_and_members_cannot(client, tenant, entry):
    reporter = get_user_model().objects.create_user("reporter")
    flag = services.entry_flag(entry=entry, user=reporter, reason="spam")
    browser, _ = browser_for(client, "carol", curator=True)
    assert "spam" in browser.get("/admin/registry/flag/").content.decode()
    browser.post("/admin/registry/flag/", {"action": "resolve", "_selected_action": [flag.pk]})
    flag.refresh_from_db()
    assert flag.resolved_at is not None and flag.resolved_by is not None
    assert Flag.objects.filter(resolved_at__isnull=True).count() == 0


def test_another_tenant_s_entry_is_missing_from_its_members_review_pages(client, entry):
    from accounts.services import tenant_ensure

    browser, user = browser_for(client, "spy")
    member_add(tenant=tenant_ensure(slug="globex", name="Globex"), user=user, role=Role.OWNER)
    for path in ("change/", "diff/?a=1&b=1"):
        assert browser.get(f"/admin/registry/entry/{entry.pk}/{path}").status_code == 404, path
    assert browser.post(f"/admin/registry/entry/{entry.pk}/decide/", {"to": "approved"}).status_code == 404
    assert browser.get("/admin/registry/entry/review/").status_code == 403  # curators' only
    entry.refresh_from_db()
    assert entry.state == State.PENDING


_odd = st.text(max_size=40) | st.sampled_from(["\x00", "-1", "99999999999999999999", "approved", "pending", "1"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=_odd, b=_odd, to=_odd, reason=_odd, version_hash=_odd)
def test_no_input_makes_the_review_pages_answer_500_or_break_an_entry(client, entry, a, b, to, reason, version_hash):
    users = get_user_model().objects
    carol = users.filter(username="carol").first() or users.create_user("carol", is_staff=True, is_superuser=True)
    client.force_login(carol)
    for url, query in (
        (f"/admin/registry/entry/{entry.pk}/diff/", {"a": a, "b": b}),
        ("/admin/registry/entry/", {"state": to, "q": reason}),
        ("/admin/registry/entry/review/", {"o": a}),
    ):
        assert client.get(url, query).status_code < 500, (url, query)
    answer = client.post(
        f"/admin/registry/entry/{entry.pk}/decide/", {"to": to, "reason": reason, "version_hash": version_hash}
    )
    assert answer.status_code < 500
    entry.refresh_from_db()
    assert entry.state in State.values
