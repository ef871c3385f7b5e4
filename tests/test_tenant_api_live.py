"""The issue's done-when, across the live stack (daphne + a Celery worker, tests/conftest.py):
from an owner's management key, through the tenant API alone, a webhook agent with its secret
(its endpoint tests/webhook_endpoint.py), a key for a client, a task sent to the agent over
A2A, the task and its timeline read through the API, and a task canceled through the API; a
lost run re-dispatched through the API and finished by the worker. And
the docs page as daphne serves it (every file it loads from this server), and hostile bodies
across daphne (refused in JSON, nothing stored, no traceback in its log)."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from django.utils import timezone

from accounts.selectors import Principal
from accounts.services import api_key_create, tenant_ensure
from protocols import contract
from tasks_app import dispatch, parts, services
from tasks_app.domain import NewMessage
from tasks_app.lifecycle import Dialect
from tasks_app.models import Task
from tests.conftest import make_agent, user_message
from tests.test_api_docs import page_refs, same_origin
from tests.webhook_endpoint import ndjson

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def send(base: str, key: str, text: str) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": user_message(text)}}
    response = httpx.post(
        f"{base}/agents/globex/hook/", json=body, headers={"A2A-Version": "1.0", "X-API-Key": key}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.json()["result"]["task"]


def test_an_owner_s_key_alone_makes_a_webhook_agent_sends_it_a_task_reads_its_timeline_and_cancels_one(
    live, secret, endpoint
):
    tenant = tenant_ensure(slug="globex", name="Globex")
    _, owner_key = api_key_create(tenant=tenant, name="owner", management_role="owner")
    api = httpx.Client(base_url=f"{live.url}/api/v1/tenants/globex", headers={"X-API-Key": owner_key}, timeout=30)

    # The agent, with its secret (written, never read back).
    values = {
        "slug": "hook",
        "name": "Hook",
        "description": "A webhook agent made through the API.",
        "executor": "webhook",
        "settings": {"url": endpoint.url()},
        "secret": secret,
        "input_modes": ["text/plain"],
        "output_modes": ["text/plain"],
    }
    made = api.post("/agents/", json=values)
    assert made.status_code == 201, made.text
    assert made.json()["has_secret"] is True and secret not in made.text
    # A key for the agent's client, shown once.
    client = api.post("/keys/", json={"name": "client", "principal": "client-app", "agents": ["hook"]})
    assert client.status_code == 201, client.text
    client_key = client.json()["key"]

    # A task over A2A, which the endpoint completes (its requests signed with the secret).
    endpoint.answer(
        ndjson(
            {"type": "working", "message": "on it"},
            {"type": "artifact", "text": "the answer", "artifactId": "a1"},
            {"type": "complete", "message": "done"},
        ),
        ndjson({"type": "input-required", "message": "About what?"}),
    )
    task = send(live.url, client_key, "first question")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert endpoint.seen[0].verified

    # The task and its timeline, through the API.
    listed = api.get("/tasks/", params={"agent": "hook", "state": "completed"})
    assert [t["id"] for t in listed.json()["results"]] == [task["id"]]
    read = api.get(f"/tasks/{task['id']}/").json()
    assert read["owner"] == "client-app" and read["state"] == "completed"
    timeline = read["timeline"]
    assert timeline[0]["kind"] == "message" and timeline[0]["payload"]["parts"][0]["text"] == "first question"
    states = [e["payload"]["state"] for e in timeline if e["kind"] == "status"]
    assert states == ["submitted", "working", "completed"]
    assert any(e["kind"] == "artifact" for e in timeline)
    found = api.get("/tasks/", params={"q": "first question"}).json()["results"]
    assert [t["id"] for t in found] == [task["id"]]

    # A second task waits for input; the API cancels it, and its client sees it canceled.
    waiting = send(live.url, client_key, "second question")
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    canceled = api.post(f"/tasks/{waiting['id']}/cancel/", json={"reason": "no longer needed"})
    assert canceled.status_code == 200 and canceled.json()["state"] == "canceled"
    get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": waiting["id"]}}
    seen = httpx.post(
        f"{live.url}/agents/globex/hook/", json=get, headers={"A2A-Version": "1.0", "X-API-Key": client_key}
    ).json()
    assert seen["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    again = api.post(f"/tasks/{waiting['id']}/cancel/")
    assert again.status_code == 409
    # The agent's card is the API's content, served by daphne.
    card = httpx.get(f"{live.url}/agents/globex/hook/.well-known/agent-card.json").json()
    assert card["name"] == "Hook" and card["description"].startswith("A webhook agent made through the API.")


def test_an_operator_s_re_dispatch_of_a_lost_run_reaches_a_worker_that_finishes_the_task(live, monkeypatch):
    tenant = tenant_ensure(slug="umbrella", name="Umbrella")
    agent = make_agent(tenant, "echo", "echo")
    _, operator_key = api_key_create(tenant=tenant, name="operator", management_role="operator")
    # A run a worker claimed a minute ago and never finished (its worker lost): this process
    # sends nothing, and the live stack runs no sweeper.
    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    message = NewMessage(message_id=str(uuid.uuid4()), role="user", parts=[parts.text("lost and found")])
    task = services.message_receive(
        agent=agent, principal=Principal(name="alice"), message=message, follow_up=contract.follow_up(Dialect.A2A_1_0)
    )[0]
    Task.objects.filter(pk=task.pk).update(run_claimed_at=timezone.now() - timedelta(minutes=1))
    lost = Task.objects.get(pk=task.pk)

    api = httpx.Client(base_url=f"{live.url}/api/v1/tenants/umbrella", headers={"X-API-Key": operator_key}, timeout=30)
    sent = api.post(f"/tasks/{task.pk}/redispatch/")
    assert sent.status_code == 200, sent.text
    deadline = time.monotonic() + 30
    while api.get(f"/tasks/{task.pk}/").json()["state"] != "completed":
        assert time.monotonic() < deadline, api.get(f"/tasks/{task.pk}/").text
        time.sleep(0.2)
    done = Task.objects.get(pk=task.pk)
    assert done.run_token != lost.run_token and done.run_retries == lost.run_retries + 1
    # Finished, it has nothing more to send.
    again = api.post(f"/tasks/{task.pk}/redispatch/")
    assert again.status_code == 409 and "completed" in again.json()["detail"]


def test_the_docs_page_as_daphne_serves_it_loads_only_files_of_this_server(live):
    page = httpx.get(f"{live.url}/api/docs/")
    assert page.status_code == 200 and "http://" not in page.text and "https://" not in page.text
    refs = page_refs(page.text)
    assert refs and all(same_origin(url) for url in refs)
    for url in refs:
        asset = httpx.get(f"{live.url}{url}")
        assert asset.status_code == 200 and asset.content, url
        if "script" in urlsplit(url).query:
            schema_url = asset.text.split('url: "', 1)[1].split('"', 1)[0]
            assert httpx.get(f"{live.url}{schema_url}").status_code == 200


def test_hostile_bodies_across_daphne_are_refused_in_json_and_change_nothing(live):
    from tests import hostile

    tenant = tenant_ensure(slug="initech", name="Initech")
    _, owner_key = api_key_create(tenant=tenant, name="owner", management_role="owner")
    headers = {"X-API-Key": owner_key, "Content-Type": "application/json"}
    base = f"{live.url}/api/v1/tenants/initech"
    template = b'{"slug": "x", "name": "X", "executor": "echo"}'
    bodies = [breaker(template) for _, breaker in hostile.BODY_BREAKERS.elements]  # type: ignore[attr-defined]
    bodies = [body for body in bodies if not _an_object(body)]  # those are requests, not hostile ones
    bodies += [b'{"name": "\\u0000"}', b'{"name": "\\ud800"}', b'{"name": ' + b'"x"' * 3 + b"}", b"x" * (70 * 1024)]
    for body in bodies:
        for method, path in (("POST", "/agents/"), ("PATCH", "/"), ("POST", "/members/"), ("PUT", "/issuer/")):
            response = httpx.request(method, f"{base}{path}", content=body, headers=headers, timeout=30)
            assert response.status_code in (400, 413), (method, path, body[:80], response.text[:300])
            assert response.json()["detail"]
    tenant.refresh_from_db()
    assert tenant.name == "Initech" and not tenant.agents.exists() and not tenant.memberships.exists()
    for log in live.logs.glob("web*.log"):
        assert "Traceback" not in log.read_text(errors="replace"), log


def _an_object(body: bytes) -> bool:
    try:
        return isinstance(orjson.loads(body), dict)
    except orjson.JSONDecodeError:
        return False
