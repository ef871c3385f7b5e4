"""Agents at their own host names (accounts.hosts, accounts.host_services, protocols.hosts):
on a bound name the agent's card is at the root and its endpoints answer there, cards name
the URL the request came by, nothing else of the server answers there, and unknown names
keep today's behaviour."""

from __future__ import annotations

import orjson
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import given, settings
from hypothesis import strategies as st

from accounts import host_services
from accounts.host_services import DomainProof, ProofOutcome, host_bind, host_claim, host_unbind, host_verify
from accounts.hosts import host_name
from accounts.models import AgentHost
from accounts.services import AccountError, api_key_create, tenant_ensure
from tests.conftest import asgi_get, make_agent, run_async

HOST = "agent.example.com"
JSON = "application/json"


def on(host: str) -> dict[str, str]:
    return {"HTTP_HOST": host}


def rpc_body(method: str, params: dict) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def send_v1(text: str = "hello") -> bytes:
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}]}
    # The routing is under test, not the run: the answer need not wait for it.
    return rpc_body("SendMessage", {"message": message, "configuration": {"returnImmediately": True}})


@pytest.fixture
def bound(echo_agent):
    return host_bind(agent=echo_agent, host=HOST)


# --- the name a request carries ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("Agent.Example.COM", "agent.example.com"),
        ("agent.example.com:8443", "agent.example.com"),
        ("agent.example.com.", "agent.example.com"),
        ("bücher.example", "xn--bcher-kva.example"),
        ("127.0.0.2:8000", "127.0.0.2"),
        ("[::1]:8000", "::1"),
        ("conformance.localhost", "conformance.localhost"),
    ],
)
def test_a_host_header_names_its_host_lower_cased_without_port_and_idna_encoded(raw, name):
    assert host_name(raw) == name


@pytest.mark.parametrize(
    "raw", ["", ":80", "a..b", "-a.example", "a.example:port", "[::1", "[nope]:80", "x" * 300, "a b", "1.2.3", "a/b"]
)
def test_what_is_no_host_name_names_nothing(raw):
    assert host_name(raw) is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_a_host_name_or_nothing_never_an_error(raw):
    name = host_name(raw)
    assert name is None or (name == name.lower() and len(name) <= 253)


# --- binding -------------------------------------------------------------------------------------


def test_the_operator_binds_any_name_at_once_and_again_changes_nothing(echo_agent):
    first = host_bind(agent=echo_agent, host="Agent.Example.com:443")
    again = host_bind(agent=echo_agent, host=HOST)
    assert first.pk == again.pk and again.is_bound and again.proof == "operator" and again.host == HOST


def test_a_name_bound_to_one_agent_is_refused_to_another(tenant, echo_agent, bound):
    other = make_agent(tenant_ensure(slug="other", name="Other"), "bot", "echo")
    with pytest.raises(AccountError, match="bound to another agent"):
        host_bind(agent=other, host=HOST)
    with pytest.raises(AccountError, match="bound to another agent"):
        host_claim(agent=other, host=HOST)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "testserver", "not a host", "https://a.example/"])
def test_the_servers_own_names_and_what_is_no_name_cannot_be_bound(echo_agent, host):
    with pytest.raises(AccountError):
        host_bind(agent=echo_agent, host=host)


class FakeProof:
    def __init__(self, found: bool) -> None:
        self.found, self.asked = found, []

    def check(self, host, token, method) -> ProofOutcome:
        self.asked.append((host, token, method))
        return ProofOutcome(self.found, "found" if self.found else "no TXT record")


@pytest.fixture
def proof(monkeypatch):
    def install(found: bool) -> FakeProof:
        fake = FakeProof(found)
        monkeypatch.setattr(
            host_services, "_proof", DomainProof(check=fake.check, instructions=lambda h, t: {"dns_value": t})
        )
        return fake

    return install


def test_a_tenants_claim_serves_nothing_until_its_token_is_found_on_the_name(client, echo_agent, proof):
    claim = host_claim(agent=echo_agent, host=HOST)
    assert not claim.is_bound and len(claim.proof_token) >= 32
    assert client.get("/.well-known/agent-card.json", **on(HOST)).status_code == 400  # an unknown name

    missing = proof(False)
    assert not host_verify(binding=claim, method="dns").ok and missing.asked == [(HOST, claim.proof_token, "dns")]
    claim.refresh_from_db()
    assert not claim.is_bound

    proof(True)
    assert host_verify(binding=claim, method="dns").ok
    assert claim.is_bound and claim.proof == "dns"
    assert client.get("/.well-known/agent-card.json", **on(HOST)).status_code == 200


def test_the_first_claim_proven_takes_the_name_and_the_others_are_dropped(tenant, echo_agent, proof):
    other = make_agent(tenant_ensure(slug="other", name="Other"), "bot", "echo")
    mine, theirs = host_claim(agent=echo_agent, host=HOST), host_claim(agent=other, host=HOST)
    proof(True)
    host_verify(binding=theirs, method="http")
    assert not AgentHost.objects.filter(pk=mine.pk).exists()
    with pytest.raises(AccountError):
        host_claim(agent=echo_agent, host=HOST)


def test_a_claim_is_verified_by_dns_or_http_only(echo_agent, proof):
    proof(True)
    with pytest.raises(AccountError, match="method"):
        host_verify(binding=host_claim(agent=echo_agent, host=HOST), method="telepathy")


def test_the_registry_lends_its_domain_proof(echo_agent):
    claim = host_claim(agent=echo_agent, host=HOST)
    steps = host_services.host_instructions(claim)
    assert steps["dns_name"] == f"_agentserver-verification.{HOST}"
    assert steps["dns_value"] == f"agentserver-verification={claim.proof_token}"
    assert steps["http_url"] == f"https://{HOST}/.well-known/agentserver-verification.txt"


def test_the_commands_bind_and_unbind_a_name(client, echo_agent, capsys):
    call_command("bind_host", "acme/echo", HOST, "--card", "0.3")
    assert f"{HOST} -> acme/echo" in capsys.readouterr().out
    assert client.get("/.well-known/agent-card.json", **on(HOST)).json()["protocolVersion"] == "0.3.0"
    call_command("unbind_host", HOST)
    assert not AgentHost.objects.exists()
    with pytest.raises(CommandError, match="no agent"):
        call_command("bind_host", "acme/nobody", HOST)


# --- serving at the root ----------------------------------------------------------------------------


def test_the_card_is_at_the_root_and_names_the_root(client, bound):
    card = client.get("/.well-known/agent-card.json", **on(f"{HOST}:8443")).json()
    assert {i["url"] for i in card["supportedInterfaces"]} == {f"http://{HOST}:8443/"}


def test_the_0_3_and_0_1_cards_name_the_root_too(client, bound):
    v03 = client.get("/.well-known/agent-card.json", HTTP_A2A_VERSION="0.3", **on(HOST)).json()
    assert v03["url"] == f"http://{HOST}/" and v03["additionalInterfaces"][0]["url"] == f"http://{HOST}/"
    v01 = client.get("/.well-known/agent.json", **on(HOST)).json()
    assert v01["url"] == f"http://{HOST}/?A2A-Version=0.1"


def test_a_name_may_give_the_0_3_card_to_a_request_naming_no_version(client, echo_agent):
    host_bind(agent=echo_agent, host=HOST, card_version="0.3")
    assert client.get("/.well-known/agent-card.json", **on(HOST)).json()["protocolVersion"] == "0.3.0"
    v1 = client.get("/.well-known/agent-card.json", HTTP_A2A_VERSION="1.0", **on(HOST)).json()
    assert "supportedInterfaces" in v1
    # The path-based card stays the default's, whatever the name's root gives, on any name.
    assert "supportedInterfaces" in client.get("/agents/acme/echo/.well-known/agent-card.json").json()
    by_path = client.get("/agents/acme/echo/.well-known/agent-card.json", **on(HOST)).json()
    assert by_path["supportedInterfaces"][0]["url"] == f"http://{HOST}/agents/acme/echo/"


def test_the_agents_own_path_answers_on_its_name_and_names_that_path(client, bound):
    card = client.get("/agents/acme/echo/.well-known/agent-card.json", **on(HOST)).json()
    assert card["supportedInterfaces"][0]["url"] == f"http://{HOST}/agents/acme/echo/"


def test_json_rpc_answers_at_the_root(client, bound, alice_key):
    answer = client.post(
        "/", send_v1(), content_type=JSON, HTTP_A2A_VERSION="1.0", HTTP_X_API_KEY=alice_key, **on(HOST)
    )
    assert answer.status_code == 200, answer.content
    task = answer.json()["result"]["task"]
    assert AgentHost.objects.get(host=HOST).agent.tasks.filter(pk=task["id"]).exists()


def test_http_json_routes_answer_below_the_root(client, bound, alice_key):
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    body = orjson.dumps({"message": message, "configuration": {"returnImmediately": True}})
    sent = client.post(
        "/message:send", body, content_type=JSON, HTTP_A2A_VERSION="1.0", HTTP_X_API_KEY=alice_key, **on(HOST)
    )
    assert sent.status_code == 200, sent.content
    task_id = sent.json()["task"]["id"]
    read = client.get(f"/tasks/{task_id}", HTTP_A2A_VERSION="1.0", HTTP_X_API_KEY=alice_key, **on(HOST))
    assert read.status_code == 200 and read.json()["id"] == task_id


def test_the_extended_card_names_the_root(client, echo_agent, alice_key):
    echo_agent.has_extended_card, echo_agent.extended_card = True, {"skills": []}
    echo_agent.save()
    host_bind(agent=echo_agent, host=HOST)
    answer = client.post(
        "/",
        rpc_body("GetExtendedAgentCard", {}),
        content_type=JSON,
        HTTP_A2A_VERSION="1.0",
        HTTP_X_API_KEY=alice_key,
        **on(HOST),
    )
    assert answer.json()["result"]["supportedInterfaces"][0]["url"] == f"http://{HOST}/"


OTHER_PATHS = ["/admin/", "/admin/login/", "/api/registry/agents/", "/registry/", "/metrics", "/healthz"]


@pytest.mark.parametrize("path", OTHER_PATHS)
def test_nothing_but_the_agent_answers_on_its_name(client, bound, path):
    answer = client.get(path, **on(HOST))
    assert answer.status_code == 404 and "location" not in answer.headers


def test_another_agents_path_on_a_bound_name_reaches_nothing(client, bound, writer_agent, alice_key):
    answer = client.get("/agents/acme/writer/.well-known/agent-card.json", **on(HOST))
    assert answer.status_code == 404
    headers = {"HTTP_A2A_VERSION": "1.0", "HTTP_X_API_KEY": alice_key, **on(HOST)}
    sent = client.post("/agents/acme/writer/", send_v1(), content_type=JSON, **headers)
    assert sent.status_code == 404


def test_an_unknown_name_keeps_todays_behaviour(client, echo_agent):
    assert client.get("/.well-known/agent-card.json", **on("stranger.example")).status_code == 400  # ALLOWED_HOSTS
    assert client.get("/.well-known/agent-card.json").status_code == 404
    assert client.get("/agents/acme/echo/.well-known/agent-card.json").status_code == 200


def test_an_unbound_name_stops_answering(client, bound):
    host_unbind(binding=bound)
    assert client.get("/.well-known/agent-card.json", **on(HOST)).status_code == 400


def test_an_inactive_agents_name_answers_nothing(client, echo_agent, bound):
    echo_agent.is_active = False
    echo_agent.save()
    assert client.get("/.well-known/agent-card.json", **on(HOST)).status_code == 400


def test_a_key_of_another_tenant_gets_nothing_on_a_bound_name(client, bound):
    _, key = api_key_create(tenant=tenant_ensure(slug="other", name="Other"), name="k", principal="mallory")
    answer = client.post("/", send_v1(), content_type=JSON, HTTP_A2A_VERSION="1.0", HTTP_X_API_KEY=key, **on(HOST))
    assert answer.status_code == 403


@pytest.mark.django_db(transaction=True)
def test_djangos_async_handler_serves_a_bound_name_through_the_middleware(bound):
    from django.core.handlers.asgi import ASGIHandler

    status, body = run_async(asgi_get(ASGIHandler(), "/.well-known/agent-card.json", f"{HOST}:8000"))
    assert status == 200
    assert orjson.loads(body)["supportedInterfaces"][0]["url"] == f"http://{HOST}:8000/"
    status, _ = run_async(asgi_get(ASGIHandler(), "/admin/", HOST))
    assert status == 404


@pytest.mark.django_db(transaction=True)
def test_daphnes_router_serves_a_bound_name_and_nothing_else_there(bound):
    from agentserver.asgi import application

    status, body = run_async(asgi_get(application, "/.well-known/agent-card.json", f"{HOST}:8000"))
    assert status == 200 and orjson.loads(body)["supportedInterfaces"][0]["url"] == f"http://{HOST}:8000/"
    status, body = run_async(asgi_get(application, "/", HOST))  # the JSON-RPC consumer: POST only
    assert status == 405 and orjson.loads(body)["error"]
    for path in OTHER_PATHS:
        assert run_async(asgi_get(application, path, HOST))[0] == 404, path
    assert run_async(asgi_get(application, "/.well-known/agent-card.json", "stranger.example"))[0] == 400
    assert run_async(asgi_get(application, "/agents/acme/echo/.well-known/agent-card.json", "localhost"))[0] == 200


# --- cards are signed only for hosts the server knows (issue 52) -------------------------------

CARD_PATH = "/agents/acme/echo/.well-known/agent-card.json"


def _card(client, host: str, version: str = "1.0") -> dict:
    answer = client.get(CARD_PATH, HTTP_A2A_VERSION=version, **on(host))
    assert answer.status_code == 200, answer.content
    return answer.json()


def _extended(client, key: str, host: str, version: str = "1.0") -> dict:
    method = "GetExtendedAgentCard" if version == "1.0" else "agent/getAuthenticatedExtendedCard"
    headers = {"HTTP_A2A_VERSION": "1.0"} if version == "1.0" else {}
    answer = client.post(
        "/agents/acme/echo/", rpc_body(method, {}), content_type=JSON, HTTP_X_API_KEY=key, **headers, **on(host)
    )
    return orjson.loads(answer.content)["result"]


def _named_hosts(card: dict) -> set[str]:
    """The hosts a card's interfaces and signatures' jku name."""
    from urllib.parse import urlsplit

    import jwt

    urls = [card.get("url", "")] + [
        i["url"] for i in card.get("supportedInterfaces", card.get("additionalInterfaces", []))
    ]
    urls += [orjson.loads(jwt.utils.base64url_decode(s["protected"]))["jku"] for s in card.get("signatures", [])]
    return {urlsplit(u).hostname for u in urls if u}


@pytest.fixture
def any_host(settings, echo_agent):
    """The Kubernetes manifest's ALLOWED_HOSTS, without its PUBLIC_BASE_URL."""
    settings.ALLOWED_HOSTS, settings.PUBLIC_BASE_URL, settings.DEBUG = ["*"], "", False
    echo_agent.has_extended_card, echo_agent.extended_card = True, {"skills": []}
    echo_agent.save()
    return echo_agent


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_a_card_at_a_host_the_server_does_not_know_is_served_unsigned(client, any_host, alice_key, settings, version):
    for host in ("attacker.example", "testserver"):
        assert "signatures" not in _card(client, host, version), host
        assert "signatures" not in _extended(client, alice_key, host, version), host
    settings.ALLOWED_HOSTS = ["testserver", "*"]  # named, not by the wildcard alone
    assert "signatures" not in _card(client, "attacker.example", version)
    signed = _card(client, "testserver", version)
    assert signed["signatures"] and _named_hosts(signed) == {"testserver"}
    assert _extended(client, alice_key, "testserver:80", version)["signatures"]


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_with_a_public_base_url_every_signed_card_names_it_whatever_host_was_asked(
    client, any_host, alice_key, settings, version
):
    settings.PUBLIC_BASE_URL = "https://agents.example.com"
    for card in (_card(client, "attacker.example", version), _extended(client, alice_key, "attacker.example", version)):
        assert card["signatures"] and _named_hosts(card) == {"agents.example.com"}


def test_a_bound_name_and_under_debug_loopback_are_signed_for(client, any_host, alice_key, settings):
    host_bind(agent=any_host, host=HOST)
    assert _named_hosts(_card(client, HOST)) == {HOST}
    assert "signatures" in _card(client, HOST)
    assert "signatures" not in _card(client, "127.0.0.1:8000")
    settings.DEBUG = True
    for host in ("127.0.0.1:8000", "localhost", "[::1]:8000"):
        assert _card(client, host)["signatures"], host
    assert "signatures" not in _card(client, "attacker.example")


@pytest.mark.parametrize(
    ("allowed", "public", "debug", "refused"),
    [
        (["*"], "", False, True),
        ([".example.com"], "", False, True),
        (["agents.example.com", "*"], "", False, True),
        (["*"], "https://agents.example.com", False, False),
        (["*"], "", True, False),
        (["agents.example.com", "localhost"], "", False, False),
    ],
)
def test_a_server_answering_any_host_without_a_public_base_url_refuses_to_start(
    settings, allowed, public, debug, refused
):
    from django.core.checks import run_checks
    from django.core.management.base import SystemCheckError

    settings.ALLOWED_HOSTS, settings.PUBLIC_BASE_URL, settings.DEBUG = allowed, public, debug
    found = [m for m in run_checks() if m.id == "protocols.E001"]
    assert bool(found) == refused
    if refused:
        assert "PUBLIC_BASE_URL" in found[0].msg and "DJANGO_ALLOWED_HOSTS" in found[0].msg
        with pytest.raises(SystemCheckError, match="protocols.E001"):
            call_command("check")


@pytest.mark.parametrize(("host", "vouched"), [("attacker.example", False), ("testserver", True)])
def test_daphne_s_consumer_vouches_for_the_same_hosts_as_django_s_view(settings, host, vouched):
    from protocols.bindings import JSONRPC
    from protocols.consumers import AgentConsumer

    settings.ALLOWED_HOSTS, settings.PUBLIC_BASE_URL, settings.DEBUG = ["testserver", "*"], "", False
    consumer = AgentConsumer(binding=JSONRPC)
    consumer.scope = {
        "type": "http",
        "method": "POST",
        "scheme": "http",
        "headers": [(b"host", host.encode())],
        "url_route": {"kwargs": {"tenant": "acme", "agent": "echo"}},
    }
    request = consumer._request(b"{}")
    assert (request.base_url, request.vouched) == (f"http://{host}", vouched)
