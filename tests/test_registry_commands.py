"""The directory's management commands: approving a tenant's hosted entries for a scripted
set-up, and making a curator."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from registry import selectors
from registry.models import Entry, State
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db


def test_approve_entries_lists_a_tenant_s_hosted_agents_with_the_reason_kept(tenant, capsys):
    make_agent(tenant, "echo", "echo")
    make_agent(tenant, "writer", "writer")
    call_command("approve_entries", "acme", "--reason", "seeded")
    assert "approved 2 entries of acme" in capsys.readouterr().out
    assert sorted(e.name for e in Entry.objects.listed()) == ["Echo", "Writer"]
    assert {d.reason for e in Entry.objects.all() for d in e.decisions.filter(to_state=State.APPROVED)} == {"seeded"}
    call_command("approve_entries", "acme")  # again: nothing pending, nothing changes
    assert "approved 0 entries" in capsys.readouterr().out


def test_approve_entries_names_a_missing_tenant():
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        call_command("approve_entries", "nope")


def test_add_curator_makes_a_staff_curator_and_remove_takes_it_back():
    user = get_user_model().objects.create_user("carol")
    call_command("add_curator", "carol")
    user.refresh_from_db()
    assert user.is_staff and selectors.is_curator(get_user_model().objects.get(pk=user.pk))
    call_command("add_curator", "carol", "--remove")
    assert not selectors.is_curator(get_user_model().objects.get(pk=user.pk))


def test_add_curator_puts_back_a_curators_group_an_operator_deleted():
    from django.contrib.auth.models import Group

    Group.objects.filter(name="Registry curators").delete()
    user = get_user_model().objects.create_user("dave")
    call_command("add_curator", "dave")
    assert selectors.is_curator(get_user_model().objects.get(pk=user.pk))


def test_rotate_directory_keys_publishes_a_new_key_and_keeps_the_old_one_for_an_attestation_s_lifetime(settings):
    from datetime import timedelta

    from push import signing
    from push.models import KeyPurpose, SigningKey

    old = signing.key_for_signing(purpose=KeyPurpose.DIRECTORY)
    push_key = signing.key_for_signing()
    call_command("rotate_directory_keys", "--publish-delay", "60")
    new = SigningKey.objects.filter(purpose=KeyPurpose.DIRECTORY).exclude(pk=old.pk).get()
    old.refresh_from_db()
    assert old.unpublish_at - new.signs_from == timedelta(seconds=settings.REGISTRY_ATTESTATION_LIFETIME)
    kids = {k["kid"] for k in signing.jwks(purpose=KeyPurpose.DIRECTORY)["keys"]}
    assert kids == {old.kid, new.kid}
    push_key.refresh_from_db()
    assert push_key.signs_until is None  # push's key is not touched
