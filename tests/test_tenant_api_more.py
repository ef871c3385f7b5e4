"""What the tenant API offers beyond tests/test_tenant_api.py's resources, each as the admin
offers it: re-dispatching a stuck task's run (operators), a task's file as a download, an
agent's host names (owners claim, verify and remove; the proof found by a real loopback
nameserver, tests/dns_server.py), and the AIP group memberships (read-only, never the
Leader's access token). Roles and the 404-for-foreign rule are checked for these routes by the
route table (tests/tenant_api_world.py) in tests/test_tenant_api.py and
tests/test_isolation_tenant_api.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts import host_services
from accounts.host_services import DomainProof, ProofOutcome
from accounts.hosts import host_name
from accounts.models import AgentHost
from groups.models import GroupMembership
from tasks_app import parts
from tasks_app.lifecycle import TaskState
from tasks_app.models import Message, Task
from tasks_app.services import task_transition
from tests.dns_server import DnsServer
from tests.host_spellings import RESERVED
from tests.tenant_api_world import API, FILE, api, build, host_of


@pytest.fixture
def world(db, client, django_user_model):
    return build(client, django_user_model)


@pytest.fixture
def runs(monkeypatch) -> list[dict[str, Any]]:
    """Runs the workers are sent, recorded instead of run."""
    from tasks_app import dispatch

    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: sent.append(kw))
    return sent


def url(world, rest: str) -> str:
    return f"{API}/{world.a.slug}/{rest}"


# --- re-dispatch ----------------------------------------------------------------------------


def test_a_lost_run_is_re_dispatched_with_a_fresh_token_and_enqueued(
    client, world, runs, settings, django_capture_on_commit_callbacks
):
    settings.AGENT_TIME_LIMIT = 30
    task_id = world.a.task_id
    task_transition(task_id=task_id, state=TaskState.WORKING, parts=[parts.text("working on it")])
    Task.objects.filter(pk=task_id).update(run_claimed_at=timezone.now() - timedelta(seconds=31))
    lost = Task.objects.get(pk=task_id)
    with django_capture_on_commit_callbacks(execute=True):
        status, body = api(client, "POST", url(world, f"tasks/{task_id}/redispatch/"), world.a.keys["operator"])
    assert status == 200, body
    assert (body["id"], body["state"]) == (task_id, "working")
    fresh = Task.objects.get(pk=task_id)
    assert fresh.run_token != lost.run_token and fresh.run_claimed_at is None and fresh.run_retries == 1
    assert runs == [{"task_id": fresh.pk, "run_token": fresh.run_token}]


def test_a_run_no_worker_claimed_is_sent_again_with_its_own_token(
    client, world, runs, django_capture_on_commit_callbacks
):
    waiting = Task.objects.get(pk=world.a.task_id)
    assert waiting.run_token is not None and waiting.run_claimed_at is None
    with django_capture_on_commit_callbacks(execute=True):
        status, _ = api(client, "POST", url(world, f"tasks/{waiting.pk}/redispatch/"), world.a.keys["operator"])
    assert status == 200
    assert runs == [{"task_id": waiting.pk, "run_token": waiting.run_token}]
    assert Task.objects.get(pk=waiting.pk).run_requested_at > waiting.run_requested_at


def test_nothing_to_re_dispatch_is_409_saying_why_and_sends_nothing(
    client, world, runs, settings, django_capture_on_commit_callbacks
):
    settings.AGENT_TIME_LIMIT = 30
    task_id = world.a.task_id
    operator = world.a.keys["operator"]
    path = url(world, f"tasks/{task_id}/redispatch/")

    def refused() -> str:
        before = Task.objects.values_list("run_token", "run_requested_at", "run_retries").get(pk=task_id)
        with django_capture_on_commit_callbacks(execute=True):
            status, body = api(client, "POST", path, operator)
        assert status == 409, body
        assert Task.objects.values_list("run_token", "run_requested_at", "run_retries").get(pk=task_id) == before
        return body["detail"]

    task_transition(task_id=task_id, state=TaskState.WORKING, parts=[parts.text("working on it")])
    Task.objects.filter(pk=task_id).update(run_claimed_at=timezone.now())
    assert "within the agents' time limit (30 s)" in refused()
    task_transition(task_id=task_id, state=TaskState.INPUT_REQUIRED, parts=[parts.text("which one?")])
    assert "waiting for its client" in refused()
    api(client, "POST", url(world, f"tasks/{task_id}/cancel/"), operator, {})
    assert refused() == "nothing to re-dispatch: the task is canceled: it has no run to send"
    assert runs == []


def test_the_admin_re_dispatches_through_the_same_service_and_says_why_it_did_not(admin_client, world, runs, settings):
    settings.AGENT_TIME_LIMIT = 30
    task_id = world.a.task_id
    task_transition(task_id=task_id, state=TaskState.WORKING, parts=[parts.text("working on it")])
    Task.objects.filter(pk=task_id).update(run_claimed_at=timezone.now())
    page = admin_client.post(f"/admin/tasks_app/task/{task_id}/redispatch/", follow=True).content.decode()
    assert "not stuck: a worker claimed its run" in page and "within the agents&#x27; time limit" in page


# --- a task's files -------------------------------------------------------------------------


def test_a_viewer_downloads_a_task_s_file_with_exactly_the_admin_s_headers(client, admin_client, world):
    rest = f"tasks/{world.a.task_id}/files/message/{world.a.message_pk}/1/"
    response = client.get(url(world, rest), HTTP_X_API_KEY=world.a.keys["viewer"])
    assert response.status_code == 200
    assert response.content == FILE
    assert response["Content-Type"] == "text/plain"
    assert response["Content-Disposition"] == 'attachment; filename="ta-notes.txt"'
    assert response["X-Content-Type-Options"] == "nosniff"
    admin = admin_client.get(f"/admin/tasks_app/task/{world.a.task_id}/file/message/{world.a.message_pk}/1/")
    assert admin.content == response.content
    for header in ("Content-Type", "Content-Disposition", "X-Content-Type-Options"):
        assert admin[header] == response[header]


def test_a_file_s_media_type_is_sent_only_when_plain_and_a_nameless_file_is_named_by_where_it_is(client, world):
    odd = parts.file_bytes(b"<script>1</script>", media_type="text/html; charset=utf-8\r\nX-Evil: 1")
    Message.objects.filter(pk=world.a.message_pk).update(parts=[parts.text("hi"), odd])
    rest = f"tasks/{world.a.task_id}/files/message/{world.a.message_pk}/1/"
    response = client.get(url(world, rest), HTTP_X_API_KEY=world.a.keys["viewer"], HTTP_ACCEPT="text/html")
    assert response.status_code == 200 and response.content == b"<script>1</script>"
    assert response["Content-Type"] == "application/octet-stream"
    name = f"task-{world.a.task_id}-message-{world.a.message_pk}-1"
    assert response["Content-Disposition"] == f'attachment; filename="{name}"'
    assert "X-Evil" not in response


@pytest.mark.parametrize(
    "where",
    ["message/{m}/0/", "message/{m}/2/", "event/1/0/", "elsewhere/{m}/1/", "message/{big}/1/", "event/{big}/{big}/"],
)
def test_what_is_no_stored_file_of_the_task_is_404_in_json(client, world, where):
    rest = f"tasks/{world.a.task_id}/files/" + where.format(m=world.a.message_pk, big="9" * 30)
    response = client.get(url(world, rest), HTTP_X_API_KEY=world.a.keys["viewer"], HTTP_ACCEPT="image/png")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert orjson.loads(response.content)["detail"]


# --- host names -----------------------------------------------------------------------------

HOST = "agent.example.test"


@pytest.fixture
def dns_server(settings):
    """A loopback nameserver the proofs ask (and nothing else)."""
    server = DnsServer().start()
    settings.REGISTRY_DNS_NAMESERVERS = [server.nameserver]
    yield server
    server.stop()


def test_an_owner_claims_a_host_name_and_is_told_what_to_publish(client, world):
    status, body = api(
        client, "POST", url(world, "agents/echo/hosts/"), world.a.keys["owner"], {"host": "Agent.Example.TEST."}
    )
    assert status == 201, body
    claim = AgentHost.objects.get(host=HOST)
    line = f"agentserver-verification={claim.proof_token}"
    assert body["host"] == HOST and body["state"] == "pending" and body["proof"] == "" and body["proven_at"] is None
    assert body["instructions"]["dns_name"] == f"_agentserver-verification.{HOST}"
    assert body["instructions"]["dns_value"] == body["instructions"]["http_content"] == line
    assert body["instructions"]["http_url"] == f"https://{HOST}/.well-known/agentserver-verification.txt"
    status, listed = api(client, "GET", url(world, "agents/echo/hosts/"), world.a.keys["viewer"])
    assert [h["host"] for h in listed["results"]] == [host_of("ta"), HOST]
    assert api(client, "GET", url(world, f"agents/echo/hosts/{HOST.upper()}/"), world.a.keys["viewer"])[1] == body


@pytest.mark.parametrize("host", ["localhost", "testserver", "not a host", "https://a.example/", "a" * 300])
def test_a_name_that_cannot_be_claimed_is_400_naming_the_host(client, world, host):
    status, body = api(client, "POST", url(world, "agents/echo/hosts/"), world.a.keys["owner"], {"host": host})
    assert status == 400 and "host" in body["errors"], body
    assert AgentHost.objects.count() == 2  # the world's two claims


def test_a_claim_is_bound_once_its_txt_record_is_found_and_the_agent_answers_there(client, world, dns_server):
    owner = world.a.keys["owner"]
    _, claim = api(client, "POST", url(world, "agents/echo/hosts/"), owner, {"host": HOST, "card_version": "0.3"})
    verify = url(world, f"agents/echo/hosts/{HOST}/verify/")
    status, body = api(client, "POST", verify, owner, {"method": "dns"})
    assert status == 200 and body["bound"] is False and body["host"]["state"] == "pending", body
    assert HOST in body["detail"]
    dns_server.records[f"_agentserver-verification.{HOST}"] = [claim["instructions"]["dns_value"]]
    status, body = api(client, "POST", verify, owner, {"method": "dns"})
    assert status == 200 and body["bound"] is True, body
    assert body["detail"] == f"found the token in a TXT record at _agentserver-verification.{HOST}"
    assert (body["host"]["state"], body["host"]["proof"], body["host"]["instructions"]) == ("bound", "dns", {})
    card = client.get("/.well-known/agent-card.json", HTTP_HOST=HOST)
    assert card.status_code == 200 and orjson.loads(card.content)["name"] == "Echo"
    # Verifying a bound name again finds it bound; removing it serves nothing there any more.
    assert api(client, "POST", verify, owner, {"method": "http"})[1]["bound"] is True
    assert api(client, "DELETE", url(world, f"agents/echo/hosts/{HOST}/"), owner)[0] == 204
    assert not AgentHost.objects.filter(host=HOST).exists()
    assert client.get("/.well-known/agent-card.json", HTTP_HOST=HOST).status_code != 200


def test_a_name_another_tenant_proved_first_is_theirs_and_their_agent_is_not_named(client, world, dns_server):
    a, b = url(world, "agents/echo/hosts/"), f"{API}/tb/agents/echo/hosts/"
    _, theirs = api(client, "POST", b, world.b.keys["owner"], {"host": HOST})
    _, mine = api(client, "POST", a, world.a.keys["owner"], {"host": HOST})
    assert theirs["instructions"]["dns_value"] != mine["instructions"]["dns_value"]
    dns_server.records[f"_agentserver-verification.{HOST}"] = [theirs["instructions"]["dns_value"]]
    status, body = api(client, "POST", f"{b}{HOST}/verify/", world.b.keys["owner"], {"method": "dns"})
    assert (status, body["bound"]) == (200, True)
    # A's claim was dropped: the name is B's, and A is not told which agent holds it.
    assert api(client, "GET", f"{a}{HOST}/", world.a.keys["owner"])[0] == 404
    status, body = api(client, "POST", a, world.a.keys["owner"], {"host": HOST})
    assert status == 400 and body["errors"]["host"] == [f"{HOST} is bound to another agent, of another tenant"]
    assert "tb" not in orjson.dumps(body).decode()


def test_binding_without_proof_is_not_offered(client, world):
    schema = orjson.loads(client.get("/api/schema/?format=json").content)
    claim = schema["paths"]["/api/v1/tenants/{slug}/agents/{agent}/hosts/"]["post"]
    ref = claim["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(schema["components"]["schemas"][ref]["properties"]) == {"host", "card_version"}
    body = {"host": HOST, "proof": "operator", "proven_at": "2020-01-01T00:00:00Z"}
    status, answer = api(client, "POST", url(world, "agents/echo/hosts/"), world.a.keys["owner"], body)
    assert status == 201 and answer["state"] == "pending"


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(host=st.text(max_size=80) | st.from_regex(r"[A-Za-z0-9-]{1,20}(\.[A-Za-z0-9-]{1,20}){0,3}\.?", fullmatch=True))
def test_any_name_is_claimed_as_the_name_it_stands_for_or_refused_with_a_400(client, world, host):
    status, body = api(client, "POST", url(world, "agents/echo/hosts/"), world.a.keys["owner"], {"host": host})
    assert status in (201, 400), body
    if status == 201:
        assert body["host"] == host_name(host)
    else:
        assert body["detail"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(host=RESERVED)
def test_no_spelling_of_a_special_address_or_of_localhost_can_be_claimed(client, world, host):
    status, body = api(client, "POST", url(world, "agents/echo/hosts/"), world.a.keys["owner"], {"host": host})
    assert status == 400 and body["errors"]["host"], (host, body)
    assert AgentHost.objects.count() == 2  # the world's two claims


def test_every_name_allowed_hosts_matches_is_the_server_s_wildcards_included(client, world, settings):
    settings.ALLOWED_HOSTS = ["testserver", ".platform.example"]
    for host in ("platform.example", "x.platform.example", "X.Platform.Example.:443", "a.b.platform.example"):
        status, body = api(client, "POST", url(world, "agents/echo/hosts/"), world.a.keys["owner"], {"host": host})
        assert status == 400 and "this server's own names" in body["errors"]["host"][0], (host, body)
    status, body = api(
        client, "POST", url(world, "agents/echo/hosts/"), world.a.keys["owner"], {"host": "xplatform.example"}
    )
    assert status == 201, body


def test_with_every_host_allowed_the_public_base_url_s_name_and_loopback_stay_the_server_s(client, world, settings):
    settings.ALLOWED_HOSTS = ["*"]
    settings.PUBLIC_BASE_URL = "https://agents.platform.example"
    for host in (
        "agents.platform.example",
        "AGENTS.Platform.Example.",
        "localhost",
        "[::1]:8000",
        "[::ffff:127.0.0.1]",
    ):
        status, body = api(client, "POST", url(world, "agents/echo/hosts/"), world.a.keys["owner"], {"host": host})
        assert status == 400, (host, body)
    status, body = api(
        client, "POST", url(world, "agents/echo/hosts/"), world.a.keys["owner"], {"host": "tenant.example"}
    )
    assert status == 201, body


def test_a_public_ipv6_claim_is_verified_by_its_name_and_409_only_when_another_proved_it(client, world, monkeypatch):
    found = {"ok": False}
    proof = DomainProof(
        check=lambda host, token, method: ProofOutcome(found["ok"], f"looked at {host}"), instructions=lambda h, t: {}
    )
    monkeypatch.setattr(host_services, "_proof", proof)
    owner, name = world.a.keys["owner"], "2606:4700:4700::1111"
    status, body = api(client, "POST", url(world, "agents/echo/hosts/"), owner, {"host": f"[{name.upper()}]:443"})
    assert (status, body["host"]) == (201, name), body
    verify = url(world, f"agents/echo/hosts/{name}/verify/")
    status, body = api(client, "POST", verify, owner, {"method": "http"})
    assert (status, body["bound"], body["detail"]) == (200, False, f"looked at {name}"), body
    found["ok"] = True
    status, body = api(client, "POST", verify, owner, {"method": "http"})
    assert (status, body["bound"], body["host"]["host"]) == (200, True, name), body
    assert api(client, "GET", url(world, f"agents/echo/hosts/[{name}]/"), owner)[0] == 200


def test_a_claim_withdrawn_while_it_is_verified_is_404_not_another_agent_s_409(client, world, monkeypatch):
    def withdrawn_meanwhile(host: str, token: str, method: str) -> ProofOutcome:
        AgentHost.objects.filter(host=host).delete()  # its owner removed it while the proof was looked for
        return ProofOutcome(False, "nothing found")

    proof = DomainProof(check=withdrawn_meanwhile, instructions=lambda h, t: {})
    monkeypatch.setattr(host_services, "_proof", proof)
    owner = world.a.keys["owner"]
    api(client, "POST", url(world, "agents/echo/hosts/"), owner, {"host": HOST})
    status, body = api(client, "POST", url(world, f"agents/echo/hosts/{HOST}/verify/"), owner, {"method": "dns"})
    assert status == 404 and "another agent" not in orjson.dumps(body).decode(), body


# --- AIP group memberships ------------------------------------------------------------------


def test_a_viewer_reads_the_group_memberships_with_their_tasks_never_the_access_token(client, world):
    viewer = world.a.keys["viewer"]
    listed = client.get(url(world, "group-memberships/"), HTTP_X_API_KEY=viewer)
    detail = client.get(url(world, f"group-memberships/{world.a.membership_pk}/"), HTTP_X_API_KEY=viewer)
    assert listed.status_code == detail.status_code == 200
    sealed = GroupMembership.objects.get(pk=world.a.membership_pk).access_token_sealed
    for raw in (listed.content, detail.content):
        text = raw.decode()
        assert "leader-token-of-ta" not in text and sealed not in text and "access_token" not in text
        assert "rate_identity" not in text and "group-of-tb" not in text
    [one] = orjson.loads(listed.content)["results"]
    assert (one["id"], one["agent"], one["group_id"], one["state"]) == (
        world.a.membership_pk,
        "echo",
        "group-of-ta",
        "active",
    )
    assert (one["credential"], one["api_key"], one["oidc_issuer"]) == ("key", world.a.key_prefix, None)
    body = orjson.loads(detail.content)
    assert {k: v for k, v in body.items() if k not in ("tasks", "tasks_page", "tasks_pages")} == one
    assert [(t["task"], t["published_seq"], t["done"]) for t in body["tasks"]] == [(world.a.task_id, 1, False)]
    assert (body["tasks_page"], body["tasks_pages"]) == (1, 1)


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("", 1),
        ("?state=active", 1),
        ("?state=left", 0),
        ("?agent=echo", 1),
        ("?agent=other", 0),
        ("?credential=key", 1),
        ("?credential=bearer", 0),
        ("?muted=false", 1),
        ("?muted=true", 0),
        ("?q=aic:leader-of-ta", 1),
        ("?q=group-of-tb", 0),
    ],
)
def test_group_memberships_are_filtered_as_in_the_admin(client, world, query, found):
    status, body = api(client, "GET", url(world, f"group-memberships/{query}"), world.a.keys["viewer"])
    assert status == 200 and len(body["results"]) == found


def test_no_role_changes_a_group_membership(client, world):
    for method in ("POST", "PATCH", "PUT", "DELETE"):
        for path in ("group-memberships/", f"group-memberships/{world.a.membership_pk}/"):
            status, _ = api(client, method, url(world, path), world.a.keys["owner"], {"state": "left"})
            assert status == 405, (method, path)
    assert GroupMembership.objects.get(pk=world.a.membership_pk).state == "active"
