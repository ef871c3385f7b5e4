"""The directory's filter counts (registry/listing_cache.py): kept in each process for a while,
and dropped at once, in every process, by a decision about an entry that is or becomes listed,
so that a curator's approval is counted on the next page whichever process serves it."""

from __future__ import annotations

import re
import time

import pytest
import redis
from django.conf import settings as django_settings

from accounts import changes
from registry import services
from registry.models import State
from registry.views import FACETS
from tests import registry_factories

pytestmark = pytest.mark.django_db

fresh_cache = registry_factories.fresh_cache  # the fixture
TAG = "zeppelin"


@pytest.fixture(autouse=True)
def _fresh(fresh_cache):
    yield
    FACETS.clear()


def tag_count(client) -> int | None:
    """The count the directory's filter form shows beside the tag, or None if it offers none."""
    html = client.get("/registry/").content.decode()
    found = re.search(rf'value="{TAG}">\s*<label for="f-tag-\d+">{TAG} <span class="count">\((\d+)\)', html)
    return int(found.group(1)) if found else None


def approve(entry, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        services.entry_decide(entry=entry, to=State.APPROVED, actor=None, role="curator")


def test_without_a_decision_the_counts_are_kept_for_a_while(client):
    registry_factories.make_entry(tags=[TAG])
    assert tag_count(client) == 1
    registry_factories.make_entry(tags=[TAG])  # written straight to the table: nothing announced
    assert tag_count(client) == 1


def test_an_approval_is_counted_in_the_filters_at_once(client, django_capture_on_commit_callbacks):
    registry_factories.make_entry(tags=[TAG])
    waiting = registry_factories.make_entry(tags=[TAG], state=State.PENDING)
    assert tag_count(client) == 1
    approve(waiting, django_capture_on_commit_callbacks)
    assert tag_count(client) == 2


def test_suspending_a_listed_entry_drops_it_from_the_counts_at_once(client, django_capture_on_commit_callbacks):
    listed = registry_factories.make_entry(tags=[TAG])
    registry_factories.make_entry(tags=[TAG])
    assert tag_count(client) == 2
    with django_capture_on_commit_callbacks(execute=True):
        services.entry_decide(entry=listed, to=State.SUSPENDED, actor=None, role="curator", reason="spam")
    assert tag_count(client) == 1


def test_a_decision_is_announced_to_every_process_once_it_commits(django_capture_on_commit_callbacks):
    waiting = registry_factories.make_entry(tags=[TAG], state=State.PENDING)
    listener = redis.Redis.from_url(django_settings.REDIS_URL).pubsub()
    listener.subscribe(changes.channel())
    try:
        assert listener.get_message(timeout=2)["type"] == "subscribe"
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            services.entry_decide(entry=waiting, to=State.APPROVED, actor=None, role="curator")
        assert listener.get_message(timeout=0.2) is None  # nothing before the commit
        for callback in callbacks:
            callback()
        heard = listener.get_message(timeout=2)
        assert heard is not None and heard["type"] == "message"
    finally:
        listener.close()


def test_another_process_s_announcement_drops_the_counts_this_one_kept(client):
    registry_factories.make_entry(tags=[TAG])
    assert tag_count(client) == 1
    registry_factories.make_entry(tags=[TAG])
    # What another process's decision sends: this process's listener thread hears it.
    publisher = redis.Redis.from_url(django_settings.REDIS_URL)
    try:
        publisher.publish(changes.channel(), b"1")
    finally:
        publisher.close()
    deadline = time.monotonic() + 5
    while tag_count(client) != 2:
        assert time.monotonic() < deadline, "the announcement never dropped the kept counts"
        time.sleep(0.05)


def test_a_decision_about_an_entry_never_listed_announces_nothing(django_capture_on_commit_callbacks):
    draft = registry_factories.make_entry(tags=[TAG], state=State.PENDING)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.entry_decide(entry=draft, to=State.REJECTED, actor=None, role="curator", reason="not an agent")
    assert changes.announce not in callbacks


def test_without_redis_nothing_is_kept(client, settings):
    settings.REDIS_URL = ""  # the embedded mode: a shell's approve_entries could not tell this process
    registry_factories.make_entry(tags=[TAG])
    assert tag_count(client) == 1
    registry_factories.make_entry(tags=[TAG])
    assert tag_count(client) == 2
