"""The directory's curators: the group whose members hold `registry.curate_entry` (review,
approve, reject and suspend entries). Migration 0007 makes it; `curators_group` makes it again
if an operator deleted it, so that naming a curator never fails on a missing group."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType

from .models import Entry

CURATORS = "Registry curators"


def curators_group() -> Group:
    """The curators' group, with its one permission (made, or put back, as the migration does)."""
    group, made = Group.objects.get_or_create(name=CURATORS)
    if made or not group.permissions.filter(codename="curate_entry").exists():
        permission, _ = Permission.objects.get_or_create(
            content_type=ContentType.objects.get_for_model(Entry),
            codename="curate_entry",
            defaults={"name": "Can review, approve, reject and suspend registry entries"},
        )
        group.permissions.add(permission)
    return group
