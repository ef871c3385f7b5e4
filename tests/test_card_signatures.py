"""Signed cards (protocols/card_signing.py): every 1.0 and 0.3 card the server serves carries a
JWS over its RFC 8785 canonical form, which a2a-sdk 1.3's verifier and the directory's
(registry/cards/signatures.py) both accept. The 1.0 suite leaves its CARD-SIGN requirements
untested (they are NOT_AUTOMATABLE there); the tests marked CARD-SIGN-00n check them from the
spec's text (§8.4.1-8.4.3)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import jwt
import orjson
import pytest
import rfc8785
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from jwt import api_jws

from accounts.canonical import without_empty
from protocols import card_signing
from push import signing
from push.models import KeyPurpose, SigningKey
from registry.cards.signatures import verify_signatures

CARD = "/agents/acme/echo/.well-known/agent-card.json"
V01_CARD = "/agents/acme/echo/.well-known/agent.json"
JWKS = "/agents/acme/echo/.well-known/agent-card-jwks.json"
FORMS = {"1.0": {}, "0.3": {"A2A-Version": "0.3"}}


def header_of(entry: dict[str, str]) -> dict[str, Any]:
    return orjson.loads(jwt.utils.base64url_decode(entry["protected"]))


def fetch_jwks(client, url: str) -> dict[str, Any]:
    """The key set at `url`, read from this server through the test client (no network)."""
    parts = urlsplit(url)
    answer = client.get(parts.path, HTTP_HOST=parts.netloc)
    assert answer.status_code == 200, url
    return answer.json()


def sdk_verify(client, card: dict[str, Any], jwks: dict[str, Any] | None = None) -> None:
    """a2a-sdk 1.3's verifier on the card as its card resolver reads it; its key provider takes
    the key by kid from the set the signature's jku names (or from `jwks`)."""

    def key_provider(kid: str | None, jku: str | None) -> jwt.PyJWK:
        keys = jwks if jwks is not None else fetch_jwks(client, jku or "")
        found = [k for k in keys["keys"] if k["kid"] == kid]
        if not found:
            raise jwt.PyJWKError(f"no key {kid}")  # the SDK tries the next signature
        return jwt.PyJWK(found[0])

    create_signature_verifier(key_provider, ["ES256"])(parse_agent_card(copy.deepcopy(card)))


def directory_verify(client, card: dict[str, Any], jwks: dict[str, Any] | None = None) -> list:
    return verify_signatures(
        card, jwks_fetcher=lambda url: jwks if jwks is not None else fetch_jwks(client, url), card_url=CARD
    )


@pytest.fixture
def card_agent(echo_agent):
    """An agent whose card holds what a tenant may write: skills, extensions (one with
    required: false, which a2a-sdk's protobuf reading drops), links."""
    echo_agent.extensions = [
        {"uri": "https://ext.example/a", "description": "A", "required": True, "params": {"n": 1, "list": [1, 2]}},
        {"uri": "https://ext.example/b", "required": False},
    ]
    echo_agent.skills = [{"id": "echo", "name": "Echo", "description": "", "tags": ["t", "ü"], "examples": ["hi"]}]
    echo_agent.documentation_url = "https://docs.example/echo"
    echo_agent.save()
    return echo_agent


# --- CARD-SIGN-003: the signature and its protected header -----------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_card_sign_003_each_card_is_signed_es256_with_kid_and_jku_in_the_protected_header(client, echo_agent, form):
    card = client.get(CARD, headers=FORMS[form]).json()
    assert card["signatures"]
    key = signing.key_for_signing(purpose=KeyPurpose.CARD)
    for entry in card["signatures"]:
        assert set(entry) == {"protected", "signature"}  # nothing unprotected
        assert header_of(entry) == {
            "alg": "ES256",
            "typ": "JOSE",
            "kid": key.kid,
            "jku": "http://testserver/agents/acme/echo/.well-known/agent-card-jwks.json",
        }


def test_the_0_1_card_has_no_signatures_member_for_0_1_has_none(client, echo_agent):
    assert "signatures" not in client.get(V01_CARD).json()


# --- both verifiers accept our cards ---------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_a2a_sdk_1_3_s_verifier_accepts_the_card_with_the_keys_its_jku_names(client, card_agent, form):
    sdk_verify(client, client.get(CARD, headers=FORMS[form]).json())


@pytest.mark.parametrize("form", FORMS)
def test_the_directory_s_verifier_accepts_the_card(client, card_agent, form):
    checks = directory_verify(client, client.get(CARD, headers=FORMS[form]).json())
    assert checks[0].valid, checks[0].reason
    assert checks[0].kid == signing.key_for_signing(purpose=KeyPurpose.CARD).kid


def test_a_1_0_card_a2a_sdk_reads_as_it_is_served_has_one_signature_both_verifiers_accept(client, echo_agent):
    card = client.get(CARD).json()
    assert len(card["signatures"]) == 1
    assert [c.valid for c in directory_verify(client, card)] == [True]
    sdk_verify(client, card)


def test_a_0_3_card_gets_a_second_signature_over_a2a_sdk_s_1_0_reading_of_it(client, echo_agent):
    card = client.get(CARD, headers=FORMS["0.3"]).json()
    first, second = card["signatures"]
    # The first covers the 0.3 card itself; the second what a2a-sdk 1.x converts it to, which
    # the directory reads too.
    checks = directory_verify(client, card)
    assert [c.valid for c in checks] == [True, True]
    assert "as a2a-sdk 1.x reads it" in checks[1].reason
    sdk_verify(client, {**card, "signatures": [second]})
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(client, {**card, "signatures": [first]})


def test_the_card_verifies_through_a_bound_host_name_whose_root_serves_the_key_set(client, echo_agent):
    from accounts.host_services import host_bind

    host_bind(agent=echo_agent, host="echo.example")
    card = client.get("/.well-known/agent-card.json", HTTP_HOST="echo.example").json()
    (entry,) = card["signatures"]
    assert header_of(entry)["jku"] == "http://echo.example/.well-known/agent-card-jwks.json"
    sdk_verify(client, card)
    assert directory_verify(client, card)[0].valid


# --- CARD-SIGN-001/002: what is signed --------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_card_sign_001_002_the_signature_covers_the_rfc_8785_form_of_the_card_without_signatures(
    client, card_agent, form
):
    card = client.get(CARD, headers=FORMS[form]).json()
    unsigned = {name: value for name, value in card.items() if name != "signatures"}
    # Computed here with the rfc8785 package directly, not with the server's code.
    payload = rfc8785.dumps(without_empty(unsigned))
    entry = card["signatures"][0]
    key = jwt.PyJWK(fetch_jwks(client, header_of(entry)["jku"])["keys"][0])
    compact = f"{entry['protected']}.{jwt.utils.base64url_encode(payload).decode()}.{entry['signature']}"
    assert api_jws.decode_complete(compact, key=key, algorithms=["ES256"])["payload"] == payload


def test_card_sign_002_other_signatures_on_the_card_do_not_change_what_ours_cover(client, echo_agent):
    card = client.get(CARD).json()
    card["signatures"].append({"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "AAAA"})
    sdk_verify(client, card)
    assert directory_verify(client, card)[0].valid


def _set(path: tuple, value: Any):
    def change(card: dict[str, Any]) -> None:
        target = card
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return change


TAMPERINGS = {
    "name": _set(("name",), "Evil"),
    "description": _set(("description",), "Trust me."),
    "version": _set(("version",), "9.9.9"),
    "interface url": _set(("supportedInterfaces", 0, "url"), "https://evil.example/"),
    "streaming": _set(("capabilities", "streaming"), False),
    "skill": _set(("skills", 0, "description"), "steals keys"),
    "scheme": _set(("securitySchemes", "apiKey", "apiKeySecurityScheme", "name"), "X-Other"),
    "provider": _set(("provider", "organization"), "Evil Corp"),
    "added member": _set(("iconUrl",), "https://evil.example/icon.png"),
    "requirement": _set(("securityRequirements",), [{"schemes": {"other": {"list": ["admin"]}}}]),
}


@pytest.mark.parametrize("change", TAMPERINGS)
def test_any_change_to_a_signed_1_0_card_breaks_its_signatures_for_both_verifiers(client, echo_agent, change):
    card = client.get(CARD).json()
    TAMPERINGS[change](card)
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(client, card)
    assert not any(c.valid for c in directory_verify(client, card))


def test_what_the_signature_cannot_cover_a_requirement_without_scopes_but_the_server_still_refuses(client, echo_agent):
    """a2a-sdk 1.x signs and verifies the card without its empty members, and a requirement of
    a scheme with no scopes ({"list": []}) is empty all through: no signature both verifiers
    accept can cover its removal. Such a card misleads a client into calling without a key,
    which the server refuses as before (protocols.auth): the card declares, it does not grant."""
    card = client.get(CARD).json()
    card.pop("securityRequirements")
    sdk_verify(client, card)
    answer = client.post(
        "/agents/acme/echo/",
        {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
        content_type="application/json",
        headers={"A2A-Version": "1.0"},
    )
    assert answer.status_code == 401


@pytest.mark.parametrize("member", ["name", "url", "version", "skills", "capabilities"])
def test_any_change_to_a_signed_0_3_card_breaks_its_signatures(client, echo_agent, member):
    card = client.get(CARD, headers=FORMS["0.3"]).json()
    card[member] = {"name": "Evil", "url": "https://evil.example/", "version": "6", "skills": [], "capabilities": {}}[
        member
    ]
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(client, card)
    assert not any(c.valid for c in directory_verify(client, card))


def test_a_signature_with_another_key_of_the_same_kid_does_not_verify(client, echo_agent):
    from cryptography.hazmat.primitives.asymmetric import ec

    card = client.get(CARD).json()
    impostor = jwt.algorithms.ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key(), as_dict=True)
    forged = {"keys": [{**impostor, "kid": header_of(card["signatures"][0])["kid"]}]}
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(client, card, jwks=forged)
    assert not directory_verify(client, card, jwks=forged)[0].valid


# --- keys: rotation, the ETag, CARD-SIGN-004 --------------------------------------------------


def test_the_etag_changes_when_the_card_key_does_and_an_old_etag_is_no_longer_current(client, echo_agent, auth_caches):
    """With the key kept in the process (auth_caches: as in production), the rotation's
    announcement makes the next card use the new key at once."""
    first = client.get(CARD)
    assert client.get(CARD, headers={"If-None-Match": first["ETag"]}).status_code == 304
    signing.key_rotate(publish_delay=0, purpose=KeyPurpose.CARD, kept_for=card_signing.kept_for())
    second = client.get(CARD)
    assert second["ETag"] != first["ETag"]
    assert client.get(CARD, headers={"If-None-Match": first["ETag"]}).status_code == 200
    assert header_of(second.json()["signatures"][0])["kid"] != header_of(first.json()["signatures"][0])["kid"]


def test_a_rotated_in_key_is_published_first_and_signs_only_after_the_publish_delay(client, echo_agent):
    old = signing.key_for_signing(purpose=KeyPurpose.CARD)
    new, _ = signing.key_rotate(publish_delay=3600, purpose=KeyPurpose.CARD, kept_for=card_signing.kept_for())
    assert {k["kid"] for k in client.get(JWKS).json()["keys"]} == {old.kid, new.kid}
    card = client.get(CARD).json()
    assert header_of(card["signatures"][0])["kid"] == old.kid
    sdk_verify(client, card)


def test_card_sign_004_a_card_signed_before_a_rotation_verifies_until_its_key_is_unpublished(client, echo_agent):
    now = timezone.now()
    old_card = client.get(CARD).json()
    old_kid = header_of(old_card["signatures"][0])["kid"]
    new, _ = signing.key_rotate(publish_delay=0, now=now, purpose=KeyPurpose.CARD, kept_for=card_signing.kept_for())
    # A client that cached the card (up to AGENT_CARD_MAX_AGE) still finds its key in the set.
    sdk_verify(client, old_card)
    assert directory_verify(client, old_card)[0].valid
    keys_at = lambda seconds: signing.jwks(now=now + timedelta(seconds=seconds), purpose=KeyPurpose.CARD)  # noqa: E731
    last = card_signing.kept_for()
    assert old_kid in {k["kid"] for k in keys_at(last - 1)["keys"]}
    # Past that the key is gone from the set, and the card no longer verifies with it.
    retired = keys_at(last + 1)
    assert {k["kid"] for k in retired["keys"]} == {new.kid}
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(client, old_card, jwks=retired)
    assert not directory_verify(client, old_card, jwks=retired)[0].valid
    # The next rotation then deletes it; today's card verifies with the set as it is.
    signing.key_rotate(publish_delay=0, now=now + timedelta(seconds=last + 1), purpose=KeyPurpose.CARD)
    assert not SigningKey.objects.filter(kid=old_kid).exists()


def test_a_replaced_key_stays_published_for_the_card_and_key_set_cache_lifetimes(settings):
    settings.AGENT_CARD_MAX_AGE, settings.CARD_JWKS_MAX_AGE = 300, 120
    assert card_signing.kept_for() == 300 + 120 + card_signing.KEY_CACHE_SECONDS


def test_the_rotate_command_publishes_a_card_key_that_signs_after_the_delay(db, capsys):
    old = signing.key_for_signing(purpose=KeyPurpose.CARD)
    push_key = signing.key_for_signing()
    call_command("rotate_card_keys", "--publish-delay", "120")
    out = capsys.readouterr().out
    new = SigningKey.objects.filter(purpose=KeyPurpose.CARD).exclude(kid=old.kid).get()
    assert f"new card key {new.kid}: published now" in out
    assert (new.signs_from - new.created_at).total_seconds() == 120
    replaced = SigningKey.objects.get(kid=old.kid)
    assert replaced.signs_until == new.signs_from
    assert (replaced.unpublish_at - replaced.signs_until).total_seconds() == card_signing.kept_for()
    assert SigningKey.objects.get(kid=push_key.kid).signs_until is None  # push's keys are not touched


def test_the_rotate_command_refuses_a_negative_delay(db, capsys):
    with pytest.raises(SystemExit):
        call_command("rotate_card_keys", "--publish-delay", "-1")


# --- the key set -------------------------------------------------------------------------------


def test_the_key_set_is_public_cacheable_and_holds_no_private_material(client, echo_agent):
    answer = client.get(JWKS)
    assert answer.status_code == 200 and answer["Content-Type"] == "application/jwk-set+json"
    assert answer["Cache-Control"] == "public, max-age=300"
    (key,) = answer.json()["keys"]
    assert key["kty"] == "EC" and key["crv"] == "P-256" and key["alg"] == "ES256" and key["use"] == "sig"
    assert not {"d", "p", "q", "k"} & set(key)
    assert client.get("/.well-known/agent-card-jwks.json").json() == answer.json()  # the server's keys
    assert key["kid"] not in {k["kid"] for k in client.get("/.well-known/jwks.json").json()["keys"]}  # not push's


def test_the_key_set_of_an_agent_that_does_not_exist_is_not_found(client, echo_agent):
    assert client.get("/agents/acme/nobody/.well-known/agent-card-jwks.json").status_code == 404
    assert client.get("/agents/nobody/echo/.well-known/agent-card-jwks.json").status_code == 404


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_the_key_set_is_only_read(client, echo_agent, method):
    for path in (JWKS, "/.well-known/agent-card-jwks.json"):
        assert getattr(client, method)(path).status_code == 405


# --- the cost of a card GET --------------------------------------------------------------------


def test_a_card_is_signed_once_per_content_and_key_and_a_warm_get_runs_no_sql(
    client, echo_agent, monkeypatch, auth_caches
):
    signing.key_for_signing(purpose=KeyPurpose.CARD)  # its creation is announced, which empties the caches
    calls = []
    real = card_signing._sign
    monkeypatch.setattr(card_signing, "_sign", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = client.get(CARD)
    with CaptureQueriesContext(connection) as queries:
        again = client.get(CARD)
    assert len(queries) == 0
    assert again.content == first.content and len(calls) == 1
    echo_agent.version = "2.0.0"
    echo_agent.save()
    changed = client.get(CARD)
    assert changed["ETag"] != first["ETag"] and len(calls) == 2
    sdk_verify(client, changed.json())


def test_a_card_with_no_canonical_form_is_served_unsigned_rather_than_failing(client, echo_agent):
    from accounts.models import Agent

    # An integer past 2^53 has no RFC 8785 form; the validators would let it in as params.
    Agent.objects.filter(pk=echo_agent.pk).update(
        extensions=[{"uri": "https://ext.example/big", "params": {"n": 2**60}}]
    )
    answer = client.get(CARD)
    assert answer.status_code == 200 and "signatures" not in answer.json()


# --- the extended card, by each binding ---------------------------------------------------------

EXT = "/agents/acme/ext/"
SECRET_SKILL = {"id": "secret", "name": "Secret", "description": "for members", "tags": []}


@pytest.fixture
def ext_agent(tenant):
    from tests.conftest import make_agent

    return make_agent(tenant, "ext", "echo", has_extended_card=True, extended_card={"skills": [SECRET_SKILL]})


def test_the_extended_card_is_signed_over_json_rpc_and_http_json_and_both_verifiers_accept_it(
    client, rpc, rest, ext_agent, alice_key
):
    over_rpc = rpc(EXT, "GetExtendedAgentCard", {}, key=alice_key).result
    assert rest("GET", EXT, "extendedAgentCard", key=alice_key).body == over_rpc
    assert [s["id"] for s in over_rpc["skills"]] == ["ext", "secret"]
    assert (
        header_of(over_rpc["signatures"][0])["jku"]
        == "http://testserver/agents/acme/ext/.well-known/agent-card-jwks.json"
    )
    sdk_verify(client, over_rpc)
    assert directory_verify(client, over_rpc)[0].valid
    # The public card's signatures do not carry over to the extended content.
    public = client.get("/agents/acme/ext/.well-known/agent-card.json").json()
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(client, {**over_rpc, "signatures": public["signatures"]})


def test_the_0_3_authenticated_extended_card_is_signed(client, rpc03, ext_agent, alice_key):
    card = rpc03(EXT, "agent/getAuthenticatedExtendedCard", {}, key=alice_key).result
    assert card["protocolVersion"] == "0.3.0"
    sdk_verify(client, card)
    assert directory_verify(client, card)[0].valid


def test_the_extended_card_as_grpc_sends_it_verifies_with_a2a_sdk(client, rpc, ext_agent, alice_key):
    from a2a.types import a2a_pb2

    from protocols.bindings.grpc_binding import encode

    card = rpc(EXT, "GetExtendedAgentCard", {}, key=alice_key).result
    message = a2a_pb2.AgentCard.FromString(encode(card, a2a_pb2.AgentCard))
    assert len(message.signatures) == len(card["signatures"])

    def key_provider(kid: str | None, jku: str | None) -> jwt.PyJWK:
        return jwt.PyJWK(next(k for k in fetch_jwks(client, jku or "")["keys"] if k["kid"] == kid))

    create_signature_verifier(key_provider, ["ES256"])(message)


@pytest.mark.parametrize("form", FORMS)
def test_a_signed_card_still_passes_its_version_s_json_schema(client, card_agent, form):
    from registry import cards

    card = client.get(CARD, headers=FORMS[form]).json()
    version = cards.detect_version(card, fetched_from=CARD)
    assert version == {"1.0": "1.0", "0.3": "0.3"}[form]
    assert cards.validate(card, version) == []


def test_the_same_card_and_key_give_the_same_signatures_in_every_process(client, echo_agent):
    """Deterministic ECDSA (RFC 6979): a process that signs the card anew (another web process,
    or this one after its cache was emptied) serves the same bytes, so the same ETag."""
    first = client.get(CARD)
    card_signing._signed.clear()  # noqa: SLF001 - as a process that never signed it
    card_signing.forget()
    again = client.get(CARD)
    assert again.content == first.content and again["ETag"] == first["ETag"]
