"""Submitting someone else's card first holds nothing (issue 43, item 4), through the REST API:
a second submitter of a card whose first draft is unproven gets an entry and a proof token of
their own, whoever proves the domain first takes the card and the other drafts expire; an
unproven draft is never fetched or probed by the liveness checks, and expires by itself."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from registry import drafts, proofs, services
from registry.models import Entry, State
from registry.tasks import check_due_entries
from registry.tokens import token_create
from tests.card_server import CardServer
from tests.registry_factories import card_document

AGENTS = "/api/registry/agents/"
HOST = "agents.example.test"

pytestmark = pytest.mark.django_db


class Api:
    def __init__(self, client, token: str) -> None:
        self.client = client
        self.headers = {"Authorization": f"Token {token}"}

    def get(self, path: str):
        return self.client.get(path, headers=self.headers)

    def post(self, path: str, body: Any):
        return self.client.post(path, data=json.dumps(body), content_type="application/json", headers=self.headers)


@pytest.fixture
def people(client, django_user_model) -> dict[str, Api]:
    made = {}
    for name in ("squatter", "owner", "third", "curator"):
        user = django_user_model.objects.create_user(name)
        if name == "curator":
            user.user_permissions.add(Permission.objects.get(codename="curate_entry"))
        made[name] = Api(client, token_create(user=user)[1])
    return made


@pytest.fixture
def site(dns):
    dns[HOST] = ["127.0.0.1"]
    server = CardServer().start()
    server.serve("/.well-known/agent-card.json", card_document(name="Route Planner", url=server.url("/rpc", host=HOST)))
    yield server
    server.stop()


def _prove(site: CardServer, entry: dict[str, Any]) -> None:
    line = entry["proof"]["instructions"]["http_content"]
    site.serve(proofs.WELL_KNOWN_PATH, line.encode(), Content_Type="text/plain")


def test_a_second_submitter_gets_a_token_of_their_own_and_the_first_to_prove_takes_the_card(people, site):
    url = site.url("/", host=HOST)
    squatted = people["squatter"].post(AGENTS, {"url": url})
    assert squatted.status_code == 201
    squatted = squatted.json()

    # The real owner is not turned away: an entry and a token of their own.
    mine = people["owner"].post(AGENTS, {"url": url})
    assert mine.status_code == 201, mine.content
    mine = mine.json()
    assert mine["id"] != squatted["id"] and mine["state"] == "draft"
    assert mine["proof"]["token"] != squatted["proof"]["token"]
    assert mine["proof"]["expires_at"] and mine["proof"]["verified"] is False
    # ... and neither sees the other's draft.
    assert people["owner"].get(f"{AGENTS}{squatted['id']}/").status_code == 404
    again = people["owner"].post(AGENTS, {"url": url})
    assert again.status_code == 409
    assert f"you submitted this card already (entry {mine['id']})" in again.json()["detail"]

    # Only the one who controls the host can publish their token there.
    _prove(site, mine)
    assert people["squatter"].post(f"{AGENTS}{squatted['id']}/verify/", {"method": "http"}).json()["verified"] is False
    proven = people["owner"].post(f"{AGENTS}{mine['id']}/verify/", {"method": "http"})
    assert proven.status_code == 200 and proven.json() == {**proven.json(), "verified": True, "state": "pending"}

    lost = people["squatter"].get(f"{AGENTS}{squatted['id']}/").json()
    assert lost["state"] == "expired" and lost["allowed_transitions"] == []
    assert lost["decisions"][0]["reason"].startswith(f"another submission of this card (entry {mine['id']})")
    late = people["squatter"].post(f"{AGENTS}{squatted['id']}/verify/", {"method": "http"})
    assert late.status_code == 409 and "expired" in late.json()["detail"]

    taken = people["third"].post(AGENTS, {"url": url})
    assert taken.status_code == 409 and f"in the directory already (entry {mine['id']})" in taken.json()["detail"]
    owned = people["owner"].get(f"{AGENTS}{mine['id']}/").json()
    assert owned["proof"]["expires_at"] is None and owned["allowed_transitions"] == []


def test_an_unproven_draft_is_never_fetched_or_probed_by_the_checks(people, site, settings):
    settings.REGISTRY_CHECK_INTERVAL = 0
    draft = people["squatter"].post(AGENTS, {"url": site.url("/", host=HOST)}).json()
    fetched = len(site.paths())
    assert check_due_entries()["due"] == 0
    assert services.entries_due(now=timezone.now() + timedelta(days=1)) == []
    assert len(site.paths()) == fetched  # nothing read, nothing probed
    assert people["squatter"].get(f"{AGENTS}{draft['id']}/").json()["health"]["checks"] == []

    # Once proven, it is checked like any other entry.
    _prove(site, draft)
    assert people["squatter"].post(f"{AGENTS}{draft['id']}/verify/", {"method": "http"}).json()["verified"]
    assert services.entries_due(now=timezone.now() + timedelta(seconds=1)) == [draft["id"]]


def test_an_unproven_draft_expires_and_is_dropped_later_and_the_card_can_be_submitted_again(people, site, settings):
    url = site.url("/", host=HOST)
    draft = people["squatter"].post(AGENTS, {"url": url}).json()
    lifetime = timedelta(seconds=settings.REGISTRY_DRAFT_LIFETIME)
    assert lifetime == timedelta(days=7)
    assert drafts.drafts_expire(now=timezone.now() + lifetime - timedelta(minutes=1)) == (0, 0)

    later = timezone.now() + lifetime + timedelta(minutes=1)
    assert drafts.drafts_expire(now=later) == (1, 0)
    expired = people["squatter"].get(f"{AGENTS}{draft['id']}/").json()
    assert expired["state"] == "expired"
    assert expired["decisions"][0]["reason"] == "the domain was not proven within 7 days of the submission"
    refused = people["squatter"].post(f"{AGENTS}{draft['id']}/verify/", {"method": "http"})
    assert refused.status_code == 409 and "expired" in refused.json()["detail"]
    curator = people["curator"].post(f"{AGENTS}{draft['id']}/transition/", {"to": "pending"})
    assert curator.status_code == 409

    # Anyone (the squatter too) may submit the card again.
    assert people["owner"].post(AGENTS, {"url": url}).status_code == 201
    assert people["squatter"].post(AGENTS, {"url": url}).status_code == 201

    assert drafts.drafts_expire(now=later + lifetime + timedelta(minutes=2)) == (2, 1)
    assert not Entry.objects.filter(pk=draft["id"]).exists()
    assert people["squatter"].get(f"{AGENTS}{draft['id']}/").status_code == 404
    assert Entry.objects.filter(state=State.EXPIRED).count() == 2


def test_a_user_holds_a_bounded_number_of_unproven_drafts(people, site, settings):
    settings.REGISTRY_OPEN_DRAFTS_PER_USER = 2
    for path in ("/a.json", "/b.json", "/c.json"):
        site.serve(path, card_document(name=f"Agent {path}", url=site.url("/rpc", host=HOST)))
    first, second = (people["squatter"].post(AGENTS, {"url": site.url(p, host=HOST)}) for p in ("/a.json", "/b.json"))
    assert first.status_code == second.status_code == 201
    third = people["squatter"].post(AGENTS, {"url": site.url("/c.json", host=HOST)})
    assert third.status_code == 409 and "you have 2 unproven drafts" in third.json()["detail"]
    assert people["owner"].post(AGENTS, {"url": site.url("/c.json", host=HOST)}).status_code == 201

    _prove(site, first.json())  # a proven entry is no longer a draft
    assert people["squatter"].post(f"{AGENTS}{first.json()['id']}/verify/", {"method": "http"}).json()["verified"]
    assert people["squatter"].post(AGENTS, {"url": site.url("/c.json", host=HOST)}).status_code == 201
