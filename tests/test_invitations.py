"""The invited user's pages (accounts.invitation_views): signing in at /sign-in/ (any active
user, not only staff), the list of their pending invitations at /invitations/ and one by its
link; accepting makes them a member and staff, declining changes nothing else; anything not
theirs to answer is one 404. The tenant API's side is tests/test_tenant_api.py's."""

from __future__ import annotations

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.models import InvitationAnswer, Membership, MembershipInvitation, Role
from accounts.services import membership_invite, tenant_ensure

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests-only"


@pytest.fixture
def tenant():
    return tenant_ensure(slug="acme", name="Acme")


@pytest.fixture
def kim(django_user_model):
    return django_user_model.objects.create_user("kim", password=PASSWORD)


def test_a_user_who_is_not_staff_signs_in_and_is_taken_back_to_the_invitation(client, tenant, kim):
    _, token = membership_invite(tenant=tenant, username="kim", role=Role.OPERATOR)
    link = f"/invitations/{token}/"
    asked = client.get(link)
    assert asked.status_code == 302 and asked["Location"].startswith("/sign-in/?next=")
    signed_in = client.post(asked["Location"], {"username": "kim", "password": PASSWORD, "next": link})
    assert signed_in.status_code == 302 and signed_in["Location"] == link
    page = client.get(link).content.decode()
    assert "Acme" in page and "operator" in page and 'value="accept"' in page


def test_a_wrong_password_at_sign_in_is_refused_and_counted(client, kim, settings):
    settings.LOGIN_FAILURES_PER_USERNAME = 2
    for _ in range(2):
        refused = client.post("/sign-in/", {"username": "kim", "password": "wrong"})
        assert refused.status_code == 200 and not refused.wsgi_request.user.is_authenticated
    locked = client.post("/sign-in/", {"username": "kim", "password": PASSWORD})
    assert "Too many failed sign-ins" in locked.content.decode()


def test_a_user_accepts_from_the_list_of_their_invitations(client, tenant, kim):
    other = tenant_ensure(slug="globex", name="Globex")
    mine, _ = membership_invite(tenant=tenant, username="kim", role=Role.VIEWER)
    membership_invite(tenant=other, username="someone-else", role=Role.OWNER)
    client.force_login(kim)
    listing = client.get("/invitations/").content.decode()
    assert "Acme" in listing and "Globex" not in listing
    accepted = client.post("/invitations/", {"invitation": mine.pk, "answer": "accept"})
    assert accepted["Location"] == "/admin/"
    kim.refresh_from_db()
    assert kim.is_staff and Membership.objects.get(user=kim, tenant=tenant).role == Role.VIEWER
    assert "You are a member of Acme" in client.get("/admin/").content.decode()


def test_a_user_declines_and_stays_as_they_were(client, tenant, kim):
    invitation, token = membership_invite(tenant=tenant, username="kim", role=Role.OWNER)
    client.force_login(kim)
    declined = client.post(f"/invitations/{token}/", {"answer": "decline"}, follow=True)
    assert "You declined the invitation to Acme" in declined.content.decode()
    kim.refresh_from_db()
    assert not kim.is_staff and not Membership.objects.filter(user=kim).exists()
    assert MembershipInvitation.objects.get(pk=invitation.pk).answer == InvitationAnswer.DECLINED
    assert client.post(f"/invitations/{token}/", {"answer": "accept"}).status_code == 404  # answered


def test_an_answer_that_is_neither_is_a_400_and_changes_nothing(client, tenant, kim):
    invitation, token = membership_invite(tenant=tenant, username="kim", role=Role.OWNER)
    client.force_login(kim)
    assert client.post(f"/invitations/{token}/", {"answer": "maybe"}).status_code == 400
    assert MembershipInvitation.objects.get(pk=invitation.pk).answer == InvitationAnswer.PENDING


def test_an_inactive_user_cannot_accept(client, tenant, kim):
    _, token = membership_invite(tenant=tenant, username="kim", role=Role.OWNER)
    client.force_login(kim)
    kim.is_active = False
    kim.save()
    client.post(f"/invitations/{token}/", {"answer": "accept"})
    assert not Membership.objects.filter(user=kim).exists()


def test_someone_elses_invitation_from_the_list_is_the_same_404_as_none(client, tenant, kim):
    theirs, _ = membership_invite(tenant=tenant, username="lee", role=Role.OWNER)
    client.force_login(kim)
    answers = [client.post("/invitations/", {"invitation": pk, "answer": "accept"}) for pk in (theirs.pk, 987654321)]
    assert answers[0].status_code == answers[1].status_code == 404
    assert answers[0].content == answers[1].content
    assert not Membership.objects.exists()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    token=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/?#%"), max_size=300),
    chosen=st.text(max_size=40),
    answer=st.text(max_size=20),
)
def test_no_token_or_form_a_user_makes_up_is_an_error(tenant, kim, token, chosen, answer):
    browser = Client()
    browser.force_login(kim)
    for response in (
        browser.get(f"/invitations/{token}/"),
        browser.post(f"/invitations/{token}/", {"answer": answer}),
        browser.post("/invitations/", {"invitation": chosen.replace("\x00", ""), "answer": answer}),
    ):
        assert response.status_code in (404, 400), response.status_code
    assert not Membership.objects.exists()
