"""The A2A 1.0 agent card: what it declares and how it is cached."""

import pytest

from tests.conftest import make_agent

CARD = "/agents/acme/echo/.well-known/agent-card.json"


def test_the_card_lists_exactly_the_working_bindings_json_rpc_first_and_capabilities(client, echo_agent):
    card = client.get(CARD).json()
    assert card["supportedInterfaces"] == [
        {"url": "http://testserver/agents/acme/echo/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "http://testserver/agents/acme/echo/", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ]
    assert card["capabilities"] == {"streaming": True, "pushNotifications": True, "extendedAgentCard": False}
    assert card["name"] == "Echo" and card["version"] == "1.0.0"
    assert card["skills"] == [{"id": "echo", "name": "echo", "description": "echo skill", "tags": ["test"]}]
    assert card["defaultInputModes"] == ["text/plain"]


def test_an_agent_with_streaming_switched_off_says_so(client, echo_agent):
    echo_agent.streaming = False
    echo_agent.save()
    assert client.get(CARD).json()["capabilities"]["streaming"] is False


def test_a_key_protected_agent_declares_and_requires_the_api_key_header(client, echo_agent):
    card = client.get(CARD).json()
    assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"] == "X-API-Key"
    assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["location"] == "header"
    assert card["securityRequirements"] == [{"schemes": {"apiKey": {"list": []}}}]


def test_a_public_agent_requires_nothing(client, conformance_agent):
    card = client.get("/agents/acme/conformance/.well-known/agent-card.json").json()
    assert "securityRequirements" not in card
    assert "apiKey" in card["securitySchemes"]


def test_a_tenant_with_an_openid_connect_issuer_offers_bearer_tokens_as_the_alternative(client, echo_agent):
    from accounts.services import oidc_issuer_set

    oidc_issuer_set(
        tenant=echo_agent.tenant,
        issuer="https://id.acme.example",
        audience="agents",
        jwks_url="https://id.acme.example/jwks",
    )
    card = client.get(CARD).json()
    oidc = card["securitySchemes"]["oidc"]["openIdConnectSecurityScheme"]
    assert oidc["openIdConnectUrl"] == "https://id.acme.example/.well-known/openid-configuration"
    assert card["securityRequirements"] == [{"schemes": {"apiKey": {"list": []}}}, {"schemes": {"oidc": {"list": []}}}]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({}, "Each caller sees only the tasks it created."),
        ({"is_public": True}, "each of their tasks is reachable only by its id, and ListTasks shows them none"),
        ({"is_public": True, "shared_sandbox": True}, "every caller acts as one principal and sees every task"),
    ],
)
def test_each_card_s_description_says_who_sees_which_tasks(client, echo_agent, fields, says):
    for name, value in fields.items():
        setattr(echo_agent, name, value)
    echo_agent.save()
    description = client.get(CARD).json()["description"]
    assert description.startswith(echo_agent.description) and says in description


def test_the_card_is_cacheable_and_revalidates(client, echo_agent):
    first = client.get(CARD)
    assert "max-age=" in first["Cache-Control"]
    assert first["ETag"] and first["Last-Modified"]
    assert client.get(CARD, headers={"If-None-Match": first["ETag"]}).status_code == 304
    assert client.get(CARD, headers={"If-Modified-Since": first["Last-Modified"]}).status_code == 304


def test_a_changed_agent_gets_a_new_etag(client, echo_agent):
    before = client.get(CARD)["ETag"]
    echo_agent.description = "Now with more echo"
    echo_agent.save()
    after = client.get(CARD, headers={"If-None-Match": before})
    assert after.status_code == 200 and after["ETag"] != before


def test_a_renamed_tenant_is_a_modification_of_its_agents_cards(client, echo_agent):
    from datetime import timedelta

    from accounts.models import Tenant

    before = client.get(CARD)["Last-Modified"]
    # The provider's name is on the card; the rename is put a minute later, since HTTP dates
    # have whole seconds.
    Tenant.objects.filter(pk=echo_agent.tenant_id).update(
        name="Acme Renamed", updated_at=echo_agent.updated_at + timedelta(minutes=1)
    )
    after = client.get(CARD, headers={"If-Modified-Since": before})
    assert after.status_code == 200 and after.json()["provider"]["organization"] == "Acme Renamed"
    assert after["Last-Modified"] != before


def test_declared_extensions_are_listed(client, tenant):
    make_agent(tenant, "ext", "echo", extensions=[{"uri": "https://example.com/e", "required": False}])
    card = client.get("/agents/acme/ext/.well-known/agent-card.json").json()
    assert card["capabilities"]["extensions"] == [{"uri": "https://example.com/e", "required": False}]


@pytest.mark.django_db
def test_an_unknown_agent_has_no_card(client):
    response = client.get("/agents/nobody/nothing/.well-known/agent-card.json")
    assert response.status_code == 404 and response.json()["error"]


def test_the_tenant_s_provider_icon_and_documentation_links_are_on_the_card(client, echo_agent):
    from registry import cards

    echo_agent.provider_organization = "Acme Research"
    echo_agent.provider_url = "https://research.acme.example"
    echo_agent.icon_url = "https://cdn.acme.example/echo.png"
    echo_agent.documentation_url = "https://docs.acme.example/echo"
    echo_agent.full_clean()
    echo_agent.save()
    card = client.get("/agents/acme/echo/.well-known/agent-card.json").json()
    assert card["provider"] == {"organization": "Acme Research", "url": "https://research.acme.example"}
    assert card["iconUrl"] == "https://cdn.acme.example/echo.png"
    assert card["documentationUrl"] == "https://docs.acme.example/echo"
    assert cards.validate(card, "1.0") == []  # as the directory checks it


def test_a_card_link_must_be_a_web_address(echo_agent):
    from django.core.exceptions import ValidationError

    echo_agent.documentation_url = "ftp://files.acme.example/echo"
    with pytest.raises(ValidationError) as refused:
        echo_agent.full_clean()
    assert "documentation_url" in refused.value.message_dict


@pytest.mark.parametrize("card", [".well-known/agent-card.json", ".well-known/agent.json"])
@pytest.mark.parametrize("method", ["post", "put", "delete", "patch"])
def test_a_card_is_only_read_any_other_method_is_refused_before_the_caller_is_known(client, echo_agent, card, method):
    answer = getattr(client, method)(f"/agents/acme/echo/{card}", b"{}", content_type="application/json")
    assert answer.status_code == 405 and answer["Allow"] == "GET, HEAD"
    error = answer.json()["error"]
    assert error["code"] == 405 and error["status"] == "UNIMPLEMENTED"
    assert error["details"][0]["reason"] == "METHOD_NOT_FOUND" and "use GET" in error["message"]
    assert client.head(f"/agents/acme/echo/{card}").status_code == 200


# --- the gRPC interface ------------------------------------------------------------------


def test_the_card_lists_a_grpc_interface_only_when_the_grpc_server_is_configured(client, settings, echo_agent):
    settings.GRPC_PORT, settings.GRPC_PUBLIC_URL = 0, ""
    assert [i["protocolBinding"] for i in client.get(CARD).json()["supportedInterfaces"]] == ["JSONRPC", "HTTP+JSON"]

    settings.GRPC_PORT = 50051
    # A bare host:port, as gRPC clients dial it; the agent is named by the tenant it gives.
    assert client.get(CARD).json()["supportedInterfaces"][2] == {
        "url": "testserver:50051",
        "protocolBinding": "GRPC",
        "tenant": "acme/echo",
        "protocolVersion": "1.0",
    }


def test_a_public_grpc_address_is_named_as_configured_and_a_bound_address_names_its_agent_alone(settings, echo_agent):
    from protocols.cards import agent_card

    settings.GRPC_PORT, settings.GRPC_PUBLIC_URL = 50051, "grpc.agents.example:443"
    (grpc,) = [
        i
        for i in agent_card(echo_agent, base_url="https://a.example")["supportedInterfaces"]
        if i["protocolBinding"] == "GRPC"
    ]
    assert (grpc["url"], grpc["tenant"]) == ("grpc.agents.example:443", "acme/echo")

    settings.GRPC_PUBLIC_URL = ""
    card = agent_card(echo_agent, base_url="http://127.0.0.1:8000", url="http://127.0.0.2:8000/")
    assert card["supportedInterfaces"][2] == {
        "url": "127.0.0.2:50051",
        "protocolBinding": "GRPC",
        "protocolVersion": "1.0",
    }


# --- what an extended card may add (issue 52) ----------------------------------------------------

EXT = "/agents/acme/ext/"
ATTACKER = "https://attacker.invalid/a2a"
# What says where the agent answers, who provides it and how to call it: always the server's.
IDENTITY_1_0 = ("name", "supportedInterfaces", "provider", "securitySchemes", "securityRequirements", "capabilities")
IDENTITY_0_3 = ("name", "url", "preferredTransport", "additionalInterfaces", "provider", "securitySchemes", "security")
FORGED = {
    "url": ATTACKER,
    "supportedInterfaces": [{"url": ATTACKER, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
    "additionalInterfaces": [{"url": ATTACKER, "transport": "JSONRPC"}],
    "provider": {"organization": "agentserver platform", "url": "https://attacker.invalid/"},
    "securitySchemes": {"none": {"httpAuthSecurityScheme": {"scheme": "none"}}},
    "securityRequirements": [],
    "name": "Platform Agent",
    "signatures": [{"protected": "e30", "signature": "AA"}],
    "skills": [{"id": "secret", "name": "Secret", "description": "for members", "tags": []}],
}


def extended_cards(client, rpc, rpc03, key: str) -> dict[str, dict]:
    """The agent's four signed cards: 1.0 and 0.3, public and extended."""
    return {
        "1.0 public": client.get(f"{EXT}.well-known/agent-card.json").json(),
        "0.3 public": client.get(f"{EXT}.well-known/agent-card.json", headers={"A2A-Version": "0.3"}).json(),
        "1.0 extended": rpc(EXT, "GetExtendedAgentCard", {}, key=key).result,
        "0.3 extended": rpc03(EXT, "agent/getAuthenticatedExtendedCard", {}, key=key).result,
    }


def identity(name: str, card: dict) -> dict:
    return {member: card.get(member) for member in (IDENTITY_0_3 if name.startswith("0.3") else IDENTITY_1_0)}


def test_an_extended_card_stored_before_the_check_never_signs_its_url_provider_or_schemes(
    client, rpc, rpc03, tenant, alice_key
):
    from accounts.models import Agent
    from registry import cards
    from tests.test_card_signatures import directory_verify, sdk_verify

    make_agent(tenant, "ext", "echo", has_extended_card=True, extended_card={})
    made = extended_cards(client, rpc, rpc03, alice_key)
    Agent.objects.filter(slug="ext").update(extended_card=FORGED)  # as a row saved before the check
    for name, card in extended_cards(client, rpc, rpc03, alice_key).items():
        assert ATTACKER not in str(card) and "agentserver platform" not in str(card), name
        assert identity(name, card) == identity(name, made[name]), name
        assert cards.validate({k: v for k, v in card.items() if k != "signatures"}, name[:3]) == [], name
        assert directory_verify(client, card)[0].valid, name
        sdk_verify(client, card)
        if name.endswith("extended"):  # what it may add is still added
            assert [s["id"] for s in card["skills"]] == ["ext", "secret"], name


def test_an_extended_card_adds_skills_and_its_description_keeps_who_sees_which_tasks(client, rpc, tenant, alice_key):
    extra = {"id": "ext", "name": "Shadow", "description": "same id as the card's", "tags": []}
    more = {"id": "secret", "name": "Secret", "description": "for members", "tags": []}
    content = {"skills": [extra, more], "description": "More for members.", "documentationUrl": "https://d.example/x"}
    make_agent(tenant, "ext", "echo", has_extended_card=True, extended_card=content)
    card = rpc(EXT, "GetExtendedAgentCard", {}, key=alice_key).result
    assert [s["name"] for s in card["skills"]] == ["ext", "Secret"]  # ids stay unique: the card's own is kept
    assert card["description"] == "More for members.\n\nEach caller sees only the tasks it created."
    assert card["documentationUrl"] == "https://d.example/x"


def test_no_signed_card_carries_an_address_provider_or_scheme_a_tenant_gave(client, rpc, rpc03, tenant, alice_key):
    from hypothesis import HealthCheck, given, settings

    from accounts.models import Agent
    from push import signing
    from push.models import KeyPurpose
    from registry import cards
    from tests import hostile
    from tests.test_card_signatures import directory_verify

    make_agent(tenant, "ext", "echo", has_extended_card=True, extended_card={})
    made = extended_cards(client, rpc, rpc03, alice_key)
    jwks = signing.jwks(purpose=KeyPurpose.CARD)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(given_object=hostile.tenant_card_objects())
    def check(given_object):
        Agent.objects.filter(slug="ext").update(extended_card=given_object)
        for name, card in extended_cards(client, rpc, rpc03, alice_key).items():
            assert identity(name, card) == identity(name, made[name]), name
            assert "attacker" not in orjson_text(card) and "127.0.0.1:9" not in orjson_text(card), name
            assert directory_verify(client, card, jwks)[0].valid, name
            assert cards.validate({k: v for k, v in card.items() if k != "signatures"}, name[:3]) == [], name

    check()


def orjson_text(card: dict) -> str:
    """The card without what a tenant may add (which may name any address)."""
    import orjson

    added = ("skills", "description", "documentationUrl", "iconUrl")
    return orjson.dumps({k: v for k, v in card.items() if k not in added}).decode()
