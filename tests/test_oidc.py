"""Bearer tokens from a tenant's OpenID Connect issuer (protocols/oidc.py): every refusal,
with keys made here, against a real issuer: a JWKS served on 127.0.0.1 by this test (the only
address the outbound guard lets through), and end to end through the agent endpoint. No
traffic leaves this machine; the one refused issuer listens on 127.0.0.2 and must hear
nothing."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jwt.algorithms import RSAAlgorithm

from accounts.models import OidcIssuer
from protocols import oidc
from tests.conftest import user_message
from tests.oidc_issuer import (
    AUDIENCE,
    EC_KEY,
    ED448_KEY,
    ED_KEY,
    ISSUER,
    OTHER_RSA_KEY,
    RSA_KEY,
    Issuer,
    b64,
    claims,
    hand_made,
    jwk,
    token,
)

ECHO = "/agents/acme/echo/"


class Clock:
    """oidc's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        # A whole number of seconds, so that whole steps add up exactly: from a fractional start
        # 5 + 25 seconds can come to 29.999999999 and miss a 30 s interval.
        self.now = float(int(time.monotonic()))

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(autouse=True)
def _fresh_key_cache(settings) -> Iterator[None]:
    settings.OUTBOUND_ALLOW_NETS = ["127.0.0.1/32"]  # the test's issuer, and nothing else
    oidc.cache_clear()
    yield
    oidc.cache_clear()


@pytest.fixture
def issuer_server() -> Iterator[Issuer]:
    server = Issuer()
    yield server
    server.stop()


@pytest.fixture
def clock(monkeypatch) -> Clock:
    moved = Clock()
    monkeypatch.setattr(oidc, "_clock", moved)
    return moved


@pytest.fixture
def issuer(issuer_server) -> OidcIssuer:
    return OidcIssuer(issuer=ISSUER, audience=AUDIENCE, jwks_url=issuer_server.url)


def verify(value: str, issuer: OidcIssuer) -> str:
    return asyncio.run(oidc.verify(value, issuer))


def refused(value: str, issuer: OidcIssuer) -> str:
    with pytest.raises(oidc.BearerRefused) as caught:
        verify(value, issuer)
    message = str(caught.value)
    assert '"' not in message and "\\" not in message  # it goes into a WWW-Authenticate header
    return message


# --- what a valid token gives --------------------------------------------------------------


@pytest.mark.parametrize(
    "key, alg, kid",
    [
        (RSA_KEY, "RS256", "rsa-1"),
        (RSA_KEY, "RS512", "rsa-1"),
        (RSA_KEY, "PS256", "rsa-1"),  # the JWK names no alg: any RSA algorithm may use it
        (EC_KEY, "ES256", "ec-1"),
        (ED_KEY, "EdDSA", "ed-1"),
        (ED448_KEY, "EdDSA", "ed448-1"),
    ],
)
def test_a_token_signed_with_a_published_key_gives_its_subject(issuer, key, alg, kid):
    assert verify(token(key, alg=alg, kid=kid, sub="alice@example.test"), issuer) == "alice@example.test"


def test_an_audience_list_that_contains_the_audience_is_accepted(issuer):
    assert verify(token(aud=["someone-else", AUDIENCE]), issuer) == "alice"


def test_a_token_without_a_kid_is_checked_with_the_one_key_that_fits_its_algorithm(issuer):
    assert verify(token(EC_KEY, alg="ES256", kid=None), issuer) == "alice"


def test_clocks_may_disagree_by_thirty_seconds(issuer):
    now = int(time.time())
    assert verify(token(exp=now - 20), issuer) == "alice"
    assert verify(token(nbf=now + 20, iat=now + 20), issuer) == "alice"


def test_a_subject_of_140_characters_fits_the_principal_column(issuer):
    assert verify(token(sub="s" * 140), issuer) == "s" * 140


# --- refusals: the claims ---------------------------------------------------------------------


def test_an_expired_token_is_refused(issuer):
    assert refused(token(exp=int(time.time()) - 60), issuer).startswith("expired")


@pytest.mark.parametrize("claim", ["nbf", "iat"])
def test_a_token_not_valid_yet_is_refused(issuer, claim):
    assert refused(token(**{claim: int(time.time()) + 120}), issuer).startswith("not yet valid")


@pytest.mark.parametrize("aud", ["someone-else", ["someone-else"], "agentserver ", 7])
def test_a_token_for_another_audience_is_refused(issuer, aud):
    message = refused(token(aud=aud), issuer)
    assert message.startswith("wrong audience") or "malformed" in message


@pytest.mark.parametrize("iss", ["https://evil.example.test/acme", ISSUER + "/", ISSUER.upper()])
def test_a_token_from_another_issuer_is_refused_the_match_is_exact(issuer, iss):
    assert refused(token(iss=iss), issuer).startswith("wrong issuer")


@pytest.mark.parametrize("missing", ["exp", "iss", "aud", "sub"])
def test_a_token_without_a_required_claim_is_refused(issuer, missing):
    assert f"no {missing} claim" in refused(token(**{missing: None}), issuer)


@pytest.mark.parametrize("sub", ["", 42, ["alice"], "s" * 141, "al\x00ice", "al\nice", "al\u0085ice"])
def test_a_subject_that_cannot_be_a_principal_is_refused(issuer, sub):
    assert "sub" in refused(token(sub=sub), issuer)


def test_claims_of_the_wrong_type_are_refused_as_malformed(issuer):
    assert refused(token(exp="tomorrow"), issuer).startswith("malformed")


# --- refusals: the signature and the key ------------------------------------------------------


def test_a_bad_signature_is_refused(issuer):
    forged = token(OTHER_RSA_KEY, kid="rsa-1")  # the published key's kid, another key's signature
    assert refused(forged, issuer).startswith("bad signature")


def test_a_tampered_payload_is_refused(issuer):
    header, _, signature = token().split(".")
    payload = b64(json.dumps(claims(sub="root")).encode())
    assert refused(f"{header}.{payload}.{signature}", issuer).startswith("bad signature")


def test_an_unknown_key_is_refused(issuer):
    assert refused(token(kid="nobody-knows-me"), issuer).startswith("unknown key")


def test_hs256_signed_with_the_issuers_public_key_as_the_secret_is_refused(issuer):
    """The classic confusion: a verifier that lets the token pick HS256 would check the MAC
    with the key it has, the issuer's public key, which everyone can read."""
    public_pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}
    unsigned = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims()).encode())}"
    mac = hmac.new(public_pem, unsigned.encode(), hashlib.sha256).digest()
    assert refused(f"{unsigned}.{b64(mac)}", issuer).startswith("algorithm not allowed")


def test_an_unsigned_token_alg_none_is_refused(issuer):
    assert refused(hand_made({"alg": "none"}, claims()), issuer).startswith("algorithm not allowed")


@pytest.mark.parametrize("alg", ["HS256", "HS512", "ES256K", "RSA-OAEP", "rs256", "", None, ["RS256"]])
def test_only_asymmetric_signature_algorithms_are_allowed(issuer, alg):
    assert refused(hand_made({"alg": alg, "kid": "rsa-1"}, claims(), b"sig"), issuer).startswith(
        "algorithm not allowed"
    )


def test_a_key_is_used_only_with_an_algorithm_of_its_kind(issuer):
    # An ES256 token naming the RSA key: the RSA key never checks an EC signature.
    assert refused(token(EC_KEY, alg="ES256", kid="rsa-1"), issuer).startswith("algorithm not allowed")


def test_a_key_that_declares_its_algorithm_is_used_with_that_one_only(issuer, issuer_server):
    issuer_server.jwks = {"keys": [jwk(RSA_KEY, "rsa-1", alg="RS256")]}
    assert verify(token(alg="RS256"), issuer) == "alice"
    assert refused(token(alg="PS256"), issuer).startswith("algorithm not allowed")


def test_without_a_kid_among_several_fitting_keys_none_is_guessed(issuer, issuer_server):
    issuer_server.jwks = {"keys": [jwk(RSA_KEY, "rsa-1"), jwk(OTHER_RSA_KEY, "rsa-2")]}
    assert refused(token(kid=None), issuer).startswith("unknown key")


@pytest.mark.parametrize("kid", ["", 7, ["rsa-1"], {"kid": "rsa-1"}])
def test_a_kid_that_is_not_a_string_is_refused(issuer, kid):
    assert "kid" in refused(hand_made({"alg": "RS256", "kid": kid}, claims(), b"sig"), issuer)


def test_a_critical_extension_is_refused(issuer):
    header = {"alg": "RS256", "kid": "rsa-1", "crit": ["exp"], "exp": 1}
    assert "crit" in refused(hand_made(header, claims(), b"sig"), issuer)


# --- refusals: what is no JWT at all -------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "opaque-access-token",
        "a.b",
        "a.b.c.d",
        "a..c",
        ".b.c",
        "é.b.c",
        "\x00\x01\x02.\xff.\xfe",
        "a.b.c d",
        "x" * 100_000,
        "eyJ" + "A" * 9000 + ".e30.sig",
        "bm90IGpzb24.e30.sig",  # header: 'not json'
        "WzFd.e30.sig",  # header: [1]
        b64(b"\xff\xfe") + ".e30.sig",  # header: not UTF-8
        b64(b"[" * 5000) + ".e30.sig",  # header: nested past any parser's depth
        b64(b'{"alg": "RS256", "x": ' + b"[" * 1000 + b"]" * 1000 + b"}") + ".e30.sig",  # past Python's
        "A.e30.sig",  # header: one base64 character is no byte
    ],
)
def test_anything_that_is_not_a_compact_jws_is_refused_as_malformed_without_a_fetch(issuer, issuer_server, value):
    assert refused(value, issuer).startswith("malformed")
    assert issuer_server.requests == []


def test_an_encrypted_token_is_refused_with_its_name(issuer):
    assert "JWE" in refused("eyJhbGciOiJSU0EtT0FFUCJ9.a.b.c.d", issuer)


# --- the issuer's keys: fetched safely, cached, refetched at most every 30 s -------------------


def test_the_keys_are_fetched_once_with_a_get_and_then_come_from_the_cache(issuer, issuer_server, clock):
    for _ in range(5):
        assert verify(token(), issuer) == "alice"
    assert issuer_server.requests == [("GET", "/jwks")]


def test_the_cached_keys_expire_after_oidc_jwks_cache_seconds(issuer, issuer_server, clock, settings):
    settings.OIDC_JWKS_CACHE_SECONDS = 300
    verify(token(), issuer)
    clock.advance(299)
    verify(token(), issuer)
    assert len(issuer_server.requests) == 1
    clock.advance(2)
    verify(token(), issuer)
    assert len(issuer_server.requests) == 2


def test_a_rotated_key_is_found_by_fetching_again_once_thirty_seconds_have_passed(issuer, issuer_server, clock):
    assert verify(token(), issuer) == "alice"
    issuer_server.jwks["keys"].append(jwk(OTHER_RSA_KEY, "rsa-2"))  # the issuer rotates
    rotated = token(OTHER_RSA_KEY, kid="rsa-2", sub="bob")
    clock.advance(5)
    assert refused(rotated, issuer).startswith("unknown key")  # fetched 5 s ago: not again yet
    assert len(issuer_server.requests) == 1
    clock.advance(25)
    assert verify(rotated, issuer) == "bob"
    assert len(issuer_server.requests) == 2
    assert verify(token(), issuer) == "alice"  # the old key still works while published


def test_made_up_kids_cannot_make_the_server_hammer_the_issuer(issuer, issuer_server, clock):
    verify(token(), issuer)
    for second in range(90):
        clock.advance(1)
        with pytest.raises(oidc.BearerRefused, match="unknown key"):
            verify(token(kid=f"garbage-{second}-{uuid.uuid4()}"), issuer)
    # The first fetch, then one every 30 s at most: at seconds 30, 60 and 90.
    assert len(issuer_server.requests) == 4


def test_the_fetch_runs_off_the_event_loop(issuer, issuer_server):
    issuer_server.delay = 0.5
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    async def main() -> str:
        ticker = asyncio.create_task(tick())
        try:
            return await oidc.verify(token(), issuer)
        finally:
            ticker.cancel()

    assert asyncio.run(main()) == "alice"
    assert ticks >= 20  # the loop kept running while the JWKS was on its way


def test_requests_arriving_during_a_fetch_wait_for_it_instead_of_fetching_too(issuer, issuer_server):
    issuer_server.delay = 0.3

    async def many() -> list[str]:
        return await asyncio.gather(*(oidc.verify(token(sub=f"user-{n}"), issuer) for n in range(20)))

    assert asyncio.run(many()) == [f"user-{n}" for n in range(20)]
    assert len(issuer_server.requests) == 1


def unavailable(value: str, issuer: OidcIssuer) -> oidc.IssuerUnavailable:
    with pytest.raises(oidc.IssuerUnavailable) as caught:
        verify(value, issuer)
    return caught.value


@pytest.mark.parametrize(
    "answer",
    [
        (500, {}, b"oops"),
        (404, {}, b""),
        (302, {"Location": "http://127.0.0.1:1/jwks"}, b""),  # never followed
        (200, {}, b"<html>not json</html>"),
        (200, {}, b'{"keys": "none"}'),
        (200, {}, b"[]"),
        (200, {}, json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "rsa-1"}]}).encode()),
        (200, {}, json.dumps({"keys": [jwk(RSA_KEY, "rsa-1", use="enc")]}).encode()),
        (200, {}, json.dumps({"keys": [{"kty": "RSA", "kid": "rsa-1", "n": ["x"], "e": {}}]}).encode()),
        (200, {"Content-Encoding": "gzip"}, json.dumps({"keys": [jwk(RSA_KEY, "rsa-1")]}).encode()),
        (200, {}, b'{"keys": [' + b'{"kty": "EC"},' * 30_000 + b"{}]}"),  # past 256 KB
    ],
)
def test_a_jwks_that_cannot_be_fetched_or_used_makes_the_issuer_unavailable(issuer, issuer_server, answer):
    issuer_server.answer = answer
    failure = unavailable(token(), issuer)
    assert "cannot be fetched" in str(failure) and failure.retry_after > 0
    assert len(issuer_server.requests) == 1


def test_a_private_key_in_the_jwks_is_not_used(issuer, issuer_server):
    private = {
        **jwk(RSA_KEY, "rsa-1"),
        **RSAAlgorithm.to_jwk(RSA_KEY, as_dict=True),
        "kid": "rsa-1",
    }
    issuer_server.jwks = {"keys": [private, jwk(EC_KEY, "ec-1")]}
    assert refused(token(), issuer).startswith("unknown key")
    assert verify(token(EC_KEY, alg="ES256", kid="ec-1"), issuer) == "alice"


def test_an_issuer_that_does_not_answer_in_time_is_unavailable(issuer, issuer_server, settings):
    settings.OIDC_JWKS_TIMEOUT = 0.3
    issuer_server.delay = 3
    started = time.monotonic()
    unavailable(token(), issuer)
    assert time.monotonic() - started < 2


def test_after_a_failed_fetch_requests_are_answered_at_once_until_the_backoff_ends(issuer, issuer_server, clock):
    issuer_server.answer = (503, {}, b"")
    unavailable(token(), issuer)
    clock.advance(4)
    assert unavailable(token(), issuer).retry_after == pytest.approx(oidc.FAILED_FETCH_BACKOFF - 4)
    assert len(issuer_server.requests) == 1
    issuer_server.answer = None
    clock.advance(oidc.FAILED_FETCH_BACKOFF)
    assert verify(token(), issuer) == "alice"
    assert len(issuer_server.requests) == 2


@pytest.fixture
def refused_server() -> Iterator[Issuer]:
    """An issuer on 127.0.0.2: loopback, and not in the allow-list."""
    server = Issuer(host="127.0.0.2")
    yield server
    server.stop()


def test_a_jwks_url_the_outbound_guard_refuses_is_never_fetched(refused_server, caplog):
    refused_issuer = OidcIssuer(issuer=ISSUER, audience=AUDIENCE, jwks_url=refused_server.url)
    failure = unavailable(token(), refused_issuer)
    assert "127.0.0.2" not in str(failure)  # what the guard said goes to the log, not the caller
    assert "loopback" in caplog.text
    assert refused_server.requests == []


# --- end to end: the agent endpoint -------------------------------------------------------------


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


@pytest.fixture
def tenant_issuer(tenant, issuer_server) -> OidcIssuer:
    from accounts.services import oidc_issuer_set

    return oidc_issuer_set(tenant=tenant, issuer=ISSUER, audience=AUDIENCE, jwks_url=issuer_server.url)


@pytest.mark.django_db(transaction=True)
def test_an_oidc_caller_sends_a_message_and_reads_its_task_back_as_its_subject(
    rpc, echo_agent, tenant_issuer, alice_key
):
    from tasks_app.models import Task

    carol = bearer(token(sub="carol@example.test"))
    sent = rpc(ECHO, "SendMessage", {"message": user_message("hi")}, headers=carol).result["task"]
    assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
    read = rpc(ECHO, "GetTask", {"id": sent["id"]}, headers=carol).result
    assert read["id"] == sent["id"] and read["artifacts"][0]["parts"] == [{"text": "echo: hi"}]
    assert Task.objects.get(pk=sent["id"]).owner == "oidc:carol@example.test"
    assert rpc(ECHO, "ListTasks", {}, headers=carol).result["totalSize"] == 1
    # Another principal, of the same tenant, does not reach it.
    assert rpc(ECHO, "GetTask", {"id": sent["id"]}, key=alice_key).error["code"] == -32001
    dave = bearer(token(sub="dave@example.test"))
    assert rpc(ECHO, "GetTask", {"id": sent["id"]}, headers=dave).error["code"] == -32001


@pytest.mark.parametrize(
    "bad, why",
    [
        (lambda: token(exp=int(time.time()) - 3600), "expired"),
        (lambda: token(aud="another-server"), "wrong audience"),
        (lambda: token(iss="https://evil.example.test/"), "wrong issuer"),
        (lambda: token(OTHER_RSA_KEY), "bad signature"),
        (lambda: token(kid="rsa-9"), "unknown key"),
        (lambda: "not-a-jwt", "malformed"),
    ],
    ids=["expired", "wrong-aud", "wrong-iss", "bad-signature", "unknown-kid", "malformed"],
)
def test_an_invalid_token_is_refused_with_a_bearer_challenge(rpc, echo_agent, tenant_issuer, bad, why):
    response = rpc(ECHO, "GetTask", {"id": "x"}, headers=bearer(bad()))
    assert response.status == 401
    challenge = response.headers["WWW-Authenticate"]
    assert 'Bearer realm="acme", error="invalid_token"' in challenge
    assert f'error_description="{why}' in challenge
    assert response.body["error"]["message"].startswith(f"the bearer token is not valid: {why}")


def test_a_rotated_key_works_through_the_endpoint_after_the_refetch(
    rpc, echo_agent, tenant_issuer, issuer_server, clock
):
    assert rpc(ECHO, "GetTask", {"id": "x"}, headers=bearer(token())).error["code"] == -32001
    issuer_server.jwks = {"keys": [jwk(OTHER_RSA_KEY, "rsa-2")]}  # rsa-1 retired, rsa-2 signs now
    rotated = bearer(token(OTHER_RSA_KEY, kid="rsa-2"))
    assert rpc(ECHO, "GetTask", {"id": "x"}, headers=rotated).status == 401  # too soon to refetch
    clock.advance(oidc.REFETCH_INTERVAL)
    assert rpc(ECHO, "GetTask", {"id": "x"}, headers=rotated).error["code"] == -32001
    assert len(issuer_server.requests) == 2


def test_an_issuer_whose_jwks_url_the_guard_refuses_answers_503_without_any_traffic(
    rpc, echo_agent, tenant, refused_server
):
    from accounts.models import OidcIssuer
    from accounts.services import AccountError, oidc_issuer_set

    with pytest.raises(AccountError, match="jwks_url refused"):  # refused when it is set...
        oidc_issuer_set(tenant=tenant, issuer=ISSUER, audience=AUDIENCE, jwks_url=refused_server.url)
    # ...and when one stored earlier (before the allow-list changed) is used
    OidcIssuer.objects.create(tenant=tenant, issuer=ISSUER, audience=AUDIENCE, jwks_url=refused_server.url)
    response = rpc(ECHO, "GetTask", {"id": "x"}, headers=bearer(token()))
    assert response.status == 503
    assert int(response.headers["Retry-After"]) >= 1
    assert "cannot be checked" in response.body["error"]["message"]
    assert response.body["error"]["code"] != -32603
    assert refused_server.requests == []


def test_an_api_key_still_works_on_a_tenant_with_an_issuer(rpc, echo_agent, tenant_issuer, alice_key):
    assert rpc(ECHO, "GetTask", {"id": "x"}, key=alice_key).error["code"] == -32001


# --- hostile Authorization headers ----------------------------------------------------------


def _jws_like(header: dict[str, Any], payload: bytes, signature: bytes) -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(payload)}.{b64(signature)}"


_odd_bytes = st.binary(max_size=300).map(lambda raw: raw.decode("latin-1"))  # as ASGI decodes headers
_headers = st.fixed_dictionaries(
    {"alg": st.sampled_from([*oidc.ALGORITHMS, "HS256", "none", "RS1"])},
    optional={
        "kid": st.one_of(st.sampled_from(["rsa-1", "ec-1", "ed-1"]), st.text(max_size=20), st.integers()),
        "typ": st.text(max_size=10),
        "crit": st.lists(st.text(max_size=5), max_size=2),
    },
)
AUTHORIZATION = st.one_of(
    st.text(max_size=300),
    _odd_bytes,
    st.builds(lambda t: "Bearer " + t, st.text(max_size=300)),
    st.builds(lambda t: "bearer " + t, _odd_bytes),
    st.builds(lambda t: "Bearer " + ".".join(t), st.lists(st.from_regex(r"[A-Za-z0-9_-]{0,40}", fullmatch=True))),
    st.builds(
        lambda h, p, s: "Bearer " + _jws_like(h, p, s), _headers, st.binary(max_size=200), st.binary(max_size=80)
    ),
    st.builds(lambda c: "Bearer " + token(**c), st.fixed_dictionaries({}, optional={"sub": st.text(max_size=200)})),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=AUTHORIZATION)
def test_any_authorization_header_is_answered_401_with_a_clear_message_never_a_500(
    rpc, echo_agent, tenant_issuer, value
):
    response = rpc(ECHO, "GetTask", {"id": "x"}, headers={"Authorization": value})
    message = response.body["error"]["message"]
    event(f"{response.status} {message.removeprefix('the bearer token is not valid: ').split(':')[0]}")
    if response.status == 200:  # a well-formed token the issuer signed, with a fitting subject
        assert response.body["error"]["code"] == -32001
        return
    assert response.status == 401, (response.status, response.body)
    assert response.body["error"]["code"] == -32600
    assert "bearer token" in message or "API key" in message
    assert "WWW-Authenticate" in response.headers
