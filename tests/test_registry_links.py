"""Every URL the registry prints leads somewhere: the API's answers, the directory's pages and
the admin's entry page name the hosted agents' cards, endpoints, pages and versions, and each
of them, fetched from this server, answers 200 (an endpoint to the call it takes, a JSON-RPC
POST; anything else to a GET, its redirects followed: the server's own root leads to the
directory). URLs of other hosts (a card's extension URIs) are not fetched:
no test sends traffic off this machine."""

from __future__ import annotations

import importlib
import io
import json
import re
from html import unescape
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection

from registry import services
from registry.models import Entry, Kind
from tests import registry_factories
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db

fresh_cache = registry_factories.fresh_cache  # the fixture

OUR_HOSTS = {"testserver", "localhost", "127.0.0.1"}
URL_IN_TEXT = re.compile(r"""https?://[^\s"'<>]+""")
HREF = re.compile(r'href="([^"]+)"')


@pytest.fixture
def demo(fresh_cache) -> dict[str, Any]:
    """The demo tenant as `make run` leaves it: its agents listed in the directory."""
    out = io.StringIO()
    call_command("seed_demo", "--json", "--approve", "listed for the test", stdout=out, stderr=out)
    return json.loads(out.getvalue().splitlines()[0])


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _urls_in_json(value: Any) -> set[str]:
    return {s for s in _strings(value) if s.startswith(("http://", "https://"))}


def _urls_in_page(html: str) -> set[str]:
    found = {unescape(h) for h in HREF.findall(html)}
    found |= set(URL_IN_TEXT.findall(unescape(html)))  # the card's JSON, a URL shown as text
    return {u for u in found if not u.startswith("#")}


def _ours(url: str) -> bool:
    parts = urlsplit(url)
    return not parts.scheme or (parts.hostname or "") in OUR_HOSTS


def _endpoints(card: dict[str, Any]) -> set[str]:
    return {i["url"] for i in card.get("supportedInterfaces") or []}


def _answer(client, url: str, *, endpoints: set[str], key: str) -> int:
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    host = {"HTTP_HOST": parts.netloc} if parts.netloc else {}
    if url in endpoints:
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        headers = {"A2A-Version": "1.0", "X-API-Key": key}
        answer = client.post(target, json.dumps(body), content_type="application/json", headers=headers, **host)
        return answer.status_code
    return client.get(target, follow=True, **host).status_code


def test_every_url_the_registry_prints_of_the_hosted_agents_answers_200(client, admin_client, demo):
    hosted = list(Entry.objects.filter(kind=Kind.HOSTED).order_by("pk"))
    assert len(hosted) == 3 and all(e.is_listed for e in hosted)
    public: set[str] = set()  # what anyone reads, followed as anyone
    curated: set[str] = set()  # the admin's entry page, followed as its superuser
    endpoints: set[str] = set()

    search = client.get("/api/registry/agents/")
    assert search.status_code == 200
    public |= _urls_in_json(search.json())
    for entry in hosted:
        detail = client.get(f"/api/registry/agents/{entry.pk}/").json()
        public |= _urls_in_json(detail)
        endpoints |= _endpoints(detail["card"])
        public |= _urls_in_json(client.get(f"/api/registry/agents/{entry.pk}/versions/1/").json())
        public |= _urls_in_page(client.get(f"/registry/{entry.pk}/").content.decode())
        curated |= _urls_in_page(admin_client.get(f"/admin/registry/entry/{entry.pk}/change/").content.decode())
    public |= _urls_in_page(client.get("/registry/").content.decode())

    # What the bug broke, and what a newcomer follows first: each hosted agent's card and endpoint.
    for entry in hosted:
        assert entry.card_url == f"http://localhost:8000{entry.agent.path}.well-known/agent-card.json"
        assert entry.card_url in public and entry.card_url in curated
        assert f"http://localhost:8000{entry.agent.path}" in endpoints & public
    answers = {
        url: _answer(reader, url, endpoints=endpoints, key=demo["api_key"])
        for reader, urls in ((client, public), (admin_client, curated - public))
        for url in sorted(u for u in urls if _ours(u))
    }
    assert {url: status for url, status in answers.items() if status != 200} == {}
    assert len(answers) > 20  # the API's own links, pages, versions, cards, endpoints, the site's links


def test_a_hosted_entry_follows_the_url_its_card_is_served_at(settings, tenant):
    agent = make_agent(tenant, "helper", "echo")
    entry = services.hosted_entry_sync(agent_id=agent.pk)
    assert entry is not None and entry.card_url == f"http://localhost:8000{agent.path}.well-known/agent-card.json"
    settings.PUBLIC_BASE_URL = "https://agents.example.test"
    services.hosted_entry_sync(agent_id=agent.pk)
    entry.refresh_from_db()
    assert entry.card_url == f"https://agents.example.test{agent.path}.well-known/agent-card.json"
    assert entry.domain == "agents.example.test"


def test_the_migration_mends_the_card_url_of_hosted_entries_made_with_two_slashes(tenant):
    agent = make_agent(tenant, "helper", "echo")
    entry = services.hosted_entry_sync(agent_id=agent.pk)
    assert entry is not None
    broken = f"http://localhost:8000{agent.path}/.well-known/agent-card.json"
    Entry.objects.filter(pk=entry.pk).update(card_url=broken)
    migration = importlib.import_module("registry.migrations.0011_hosted_card_url_single_slash")
    with connection.schema_editor() as editor:
        migration.single_slash(apps, editor)
    entry.refresh_from_db()
    assert entry.card_url == f"http://localhost:8000{agent.path}.well-known/agent-card.json"
