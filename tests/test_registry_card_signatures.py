"""Signed cards: a JWS per entry of `signatures`, over the card's canonical JSON, checked with
the key its header names, from a key set read through the SSRF guard (here: a real server on
loopback). a2a-sdk's own signer is the reference: what it signs must verify."""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt
import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from registry.cards import SignatureCheck, fetch_card, normalise, validate, verify_signatures
from tests.card_examples import a2a_0_3, a2a_1_0
from tests.card_server import CardServer

KEYS_HOST = "keys.example.test"
AGENT_HOST = "agents.example.test"


@pytest.fixture
def server(dns):
    dns[KEYS_HOST] = ["127.0.0.1"]
    dns[AGENT_HOST] = ["127.0.0.1"]
    running = CardServer().start()
    yield running
    running.stop()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def es256_key() -> tuple[ec.EllipticCurvePrivateKey, dict[str, Any]]:
    private = ec.generate_private_key(ec.SECP256R1())
    public = ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
    return private, public


def pem(private: Any) -> bytes:
    return private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def sdk_sign(card: dict[str, Any], private: Any, header: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """`card` signed by a2a-sdk's signer, as an SDK server would serve it (ProtoJSON)."""
    from a2a.types import AgentCard
    from a2a.utils.signing import create_agent_card_signer
    from google.protobuf.json_format import MessageToDict, ParseDict

    message = ParseDict(card, AgentCard())
    for name, value in fields.items():
        setattr(message, name, value)
    signed = create_agent_card_signer(pem(private), header)(message)
    return json.loads(json.dumps(MessageToDict(signed)))


def jws_sign(card: dict[str, Any], key: Any, header: dict[str, Any]) -> dict[str, Any]:
    """`card` with one more signature: a detached JWS over its canonical JSON as it is (RFC
    8785, without `signatures`), made with PyJWT."""
    payload = rfc8785.dumps({k: v for k, v in card.items() if k != "signatures"})
    token = jwt.api_jws.encode(payload, key, algorithm=header["alg"], headers=header)
    protected, _, signature = token.split(".")
    return {**card, "signatures": [*card.get("signatures", []), {"protected": protected, "signature": signature}]}


def only(checks: list[SignatureCheck]) -> SignatureCheck:
    assert len(checks) == 1, checks
    return checks[0]


def test_a_card_signed_by_the_a2a_sdk_verifies_with_the_key_its_jku_names(server):
    private, public = es256_key()
    jku = server.jwks([{**public, "kid": "k1", "use": "sig", "alg": "ES256"}], path="/keys.json")
    jku = jku.replace("127.0.0.1", KEYS_HOST)
    signed = sdk_sign(a2a_1_0(), private, {"alg": "ES256", "kid": "k1", "jku": jku, "typ": "JOSE"})
    server.serve("/.well-known/agent-card.json", signed)

    fetched = fetch_card(server.url("/", host=AGENT_HOST))
    assert validate(fetched.document, "1.0") == []
    assert normalise(fetched.document, "1.0").signed is True
    check = only(verify_signatures(fetched.document, card_url=fetched.url))
    assert check == SignatureCheck("k1", "ES256", jku, True, check.reason)
    assert check.reason.startswith(f"verified with the key 'k1' of {jku}")
    assert "/keys.json" in server.paths()


def test_a_card_the_sdk_signs_with_empty_members_verifies_over_the_form_it_signed(server):
    private, public = es256_key()
    signed = sdk_sign(
        a2a_1_0(),
        private,
        {"alg": "ES256", "kid": "k1", "jku": "https://keys.example.test/jwks.json"},
        documentation_url="",  # served as "", dropped by the SDK before it signs
    )
    assert signed["documentationUrl"] == ""
    check = only(verify_signatures(signed, jwks_fetcher=lambda url: {"keys": [{**public, "kid": "k1"}]}))
    assert check.valid and "without its empty members" in check.reason


def test_a_card_signed_over_its_canonical_json_as_served_verifies_too():
    private, public = es256_key()
    card = a2a_1_0()
    card["skills"][0]["examples"] = []  # kept in what is signed
    signed = jws_sign(card, private, {"alg": "ES256", "kid": "k1", "jku": "https://keys.example.test/k"})
    check = only(verify_signatures(signed, jwks_fetcher=lambda url: {"keys": [{**public, "kid": "k1"}]}))
    assert check.valid and "empty members" not in check.reason


@pytest.mark.parametrize("alg", ["ES384", "ES512", "RS256", "PS256", "PS512", "EdDSA"])
def test_every_public_key_algorithm_verifies(alg):
    if alg == "EdDSA":
        private: Any = ed25519.Ed25519PrivateKey.generate()
        public = OKPAlgorithm.to_jwk(private.public_key(), as_dict=True)
    elif alg.startswith("ES"):
        curve = {"ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}[alg]
        private = ec.generate_private_key(curve)
        public = ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
    else:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
    signed = jws_sign(a2a_0_3(), private, {"alg": alg, "kid": "k"})
    fetched: list[str] = []
    check = only(
        verify_signatures(signed, jwks_fetcher=lambda url: fetched.append(url) or {"keys": [{**public, "kid": "k"}]})
    )
    assert check.valid, check.reason
    # No jku: the key set of the card's origin.
    assert fetched == ["https://agents.example.test/.well-known/jwks.json"] and check.jku == fetched[0]


def test_a_card_changed_after_signing_does_not_verify(server):
    private, public = es256_key()
    signed = sdk_sign(a2a_1_0(), private, {"alg": "ES256", "kid": "k1", "jku": "https://keys.example.test/jwks.json"})
    signed["description"] = "Now it does something else entirely."
    check = only(verify_signatures(signed, jwks_fetcher=lambda url: {"keys": [{**public, "kid": "k1"}]}))
    assert not check.valid
    assert "does not match the card" in check.reason and check.kid == "k1"


def test_a_signature_by_another_key_with_the_same_kid_does_not_verify():
    private, _ = es256_key()
    _, other = es256_key()
    signed = jws_sign(a2a_1_0(), private, {"alg": "ES256", "kid": "k1"})
    assert not only(verify_signatures(signed, jwks_fetcher=lambda url: {"keys": [{**other, "kid": "k1"}]})).valid


def test_an_unknown_kid_is_invalid_and_says_so():
    private, public = es256_key()
    signed = jws_sign(a2a_1_0(), private, {"alg": "ES256", "kid": "rotated-away"})
    check = only(verify_signatures(signed, jwks_fetcher=lambda url: {"keys": [{**public, "kid": "k1"}]}))
    assert not check.valid and "no key with the kid 'rotated-away'" in check.reason


def test_a_shared_secret_signature_is_refused():
    signed = jws_sign(a2a_1_0(), b"a shared secret of thirty-two bytes!", {"alg": "HS256", "kid": "k1"})
    check = only(
        verify_signatures(signed, jwks_fetcher=lambda url: {"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "k1"}]})
    )
    assert not check.valid and check.alg == "HS256" and "shared-secret" in check.reason


def test_alg_none_is_refused():
    card = a2a_1_0()
    card["signatures"] = [{"protected": b64url(b'{"alg":"none","kid":"k1"}'), "signature": ""}]
    check = only(verify_signatures(card, jwks_fetcher=lambda url: pytest.fail("no key is looked up for alg none")))
    assert not check.valid and check.alg == "none"
    card["signatures"][0]["signature"] = "AAAA"
    check = only(verify_signatures(card, jwks_fetcher=lambda url: pytest.fail("no key is looked up for alg none")))
    assert "alg none is no signature" in check.reason


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"protected": "%%%not base64%%%", "signature": "AAAA"}, "protected header is not base64url"),
        ({"protected": b64url(b"not json"), "signature": "AAAA"}, "protected header is not a JSON object"),
        ({"protected": b64url(b'["ES256"]'), "signature": "AAAA"}, "protected header is not a JSON object"),
        ({"protected": b64url(b'{"alg":"ES256","alg":"none"}'), "signature": "AAAA"}, "given more than once"),
        ({"protected": b64url(b'{"alg":"ES256","kid":"k1"}'), "signature": "!!!"}, "signature is not base64url"),
        ({"protected": b64url(b'{"alg":"ES256","kid":"k1"}'), "signature": "AAAA"}, "does not match the card"),
        ({"protected": b64url(b'{"kid":"k1"}'), "signature": "AAAA"}, "names no algorithm"),
        ({"protected": b64url(b'{"alg":"RSA1_5","kid":"k1"}'), "signature": "AAAA"}, "is not accepted"),
        ({"protected": b64url(b'{"alg":"ES256","kid":7}'), "signature": "AAAA"}, "kid is not a string"),
        (
            {"protected": b64url(b'{"alg":"ES256","kid":"k1","crit":["exp"]}'), "signature": "AAAA"},
            "does not understand",
        ),
        ({"protected": b64url(b'{"kid":"k1"}'), "signature": "AAAA", "header": {"alg": "ES256"}}, "unprotected"),
        ({"protected": b64url(b'{"alg":"ES256","kid":"k1"}'), "signature": "AAAA", "header": {"kid": "k2"}}, "both"),
        ({"protected": b64url(b'{"alg":"ES256"}'), "signature": "AAAA", "header": []}, "unprotected header"),
        ({"protected": 5, "signature": "AAAA"}, "not an object with a protected header"),
        ({"protected": b64url(b'{"alg":"ES256"}')}, "has no signature"),
        ("a string", "not an object with a protected header"),
    ],
)
def test_malformed_signatures_are_invalid_with_a_reason_never_an_exception(entry, says):
    _, public = es256_key()
    card = a2a_1_0()
    card["signatures"] = [entry]
    check = only(verify_signatures(card, jwks_fetcher=lambda url: {"keys": [{**public, "kid": "k1"}]}))
    assert not check.valid
    assert says in check.reason, check.reason


def test_key_sets_that_prove_nothing_are_refused():
    private, public = es256_key()
    signed = jws_sign(a2a_1_0(), private, {"alg": "ES256", "kid": "k1"})
    leaked = ECAlgorithm.to_jwk(private, as_dict=True)
    cases = {
        "publishes private key material": {"keys": [{**leaked, "kid": "k1"}]},
        "not for signatures": {"keys": [{**public, "kid": "k1", "use": "enc"}]},
        "the key is for ES384": {"keys": [{**public, "kid": "k1", "alg": "ES384"}]},
        "not a usable ES256 public key": {"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA", "kid": "k1"}]},
        "is not a JWKS": {"keys": "none"},
        "could not be read": None,
    }
    for says, jwks in cases.items():

        def fetcher(url: str, jwks: Any = jwks) -> dict[str, Any]:
            if jwks is None:
                raise OSError("the disk is on fire")
            return jwks

        check = only(verify_signatures(signed, jwks_fetcher=fetcher))
        assert not check.valid and says in check.reason, (says, check.reason)


def test_a_signature_naming_no_kid_uses_a_key_set_of_one_key_only():
    private, public = es256_key()
    signed = jws_sign(a2a_1_0(), private, {"alg": "ES256"})
    assert only(verify_signatures(signed, jwks_fetcher=lambda url: {"keys": [public]})).valid
    _, other = es256_key()
    check = only(verify_signatures(signed, jwks_fetcher=lambda url: {"keys": [public, other]}))
    assert not check.valid and "names no key (kid)" in check.reason


def test_each_key_set_is_fetched_once_per_call_and_each_signature_gets_its_own_check():
    first, first_public = es256_key()
    second, _ = es256_key()
    card = jws_sign(a2a_1_0(), first, {"alg": "ES256", "kid": "a", "jku": "https://keys.example.test/set"})
    card = jws_sign(card, second, {"alg": "ES256", "kid": "b", "jku": "https://keys.example.test/set"})
    # The second signature covers the card with the first signature removed, as all do.
    asked: list[str] = []
    checks = verify_signatures(
        card, jwks_fetcher=lambda url: asked.append(url) or {"keys": [{**first_public, "kid": "a"}]}
    )
    assert [c.valid for c in checks] == [True, False] and asked == ["https://keys.example.test/set"]
    assert checks[1].kid == "b" and "no key with the kid 'b'" in checks[1].reason


def test_an_unsigned_card_has_no_checks():
    assert verify_signatures(a2a_1_0()) == []
    assert verify_signatures({"signatures": "nope"}) == []
    assert verify_signatures([]) == []  # type: ignore[arg-type]


def test_a_card_with_no_canonical_form_has_invalid_signatures():
    private, public = es256_key()
    card = jws_sign(a2a_1_0(), private, {"alg": "ES256", "kid": "k1"})
    card["capabilities"]["extensions"][0]["params"]["big"] = 2**60
    check = only(verify_signatures(card, jwks_fetcher=lambda url: {"keys": [{**public, "kid": "k1"}]}))
    assert not check.valid and "cannot be checked" in check.reason


def test_key_sets_are_read_through_the_guard(server):
    private, _ = es256_key()
    card = jws_sign(a2a_1_0(), private, {"alg": "ES256", "kid": "k1", "jku": "http://127.0.0.2/jwks.json"})
    card = jws_sign(card, private, {"alg": "ES256", "kid": "k1", "jku": "http://nowhere.example.test/jwks.json"})
    card = jws_sign(card, private, {"alg": "ES256", "kid": "k1", "jku": server.url("/missing.json", host=KEYS_HOST)})
    loopback, unresolved, missing = verify_signatures(card)
    assert not loopback.valid and "this address is not allowed: 127.0.0.2" in loopback.reason
    assert not unresolved.valid and "this address is not allowed: nowhere.example.test" in unresolved.reason
    assert not missing.valid and "HTTP 404" in missing.reason
    assert server.paths() == ["/missing.json"]


def test_a_key_set_that_is_not_json_or_too_large_is_refused(server, settings):
    private, _ = es256_key()
    settings.REGISTRY_JWKS_MAX_BYTES = 300
    server.serve("/big.json", {"keys": [{"kty": "EC", "pad": "x" * 400}]})
    server.serve("/html.json", b"<html>keys</html>")
    card = jws_sign(a2a_1_0(), private, {"alg": "ES256", "kid": "k1", "jku": server.url("/big.json", host=KEYS_HOST)})
    card = jws_sign(card, private, {"alg": "ES256", "kid": "k1", "jku": server.url("/html.json", host=KEYS_HOST)})
    big, html = verify_signatures(card)
    assert "larger than 300 bytes" in big.reason and "is not JSON" in html.reason


def test_the_default_key_set_is_the_origin_of_where_the_card_was_read(server):
    private, public = es256_key()
    server.jwks([{**public, "kid": "k1"}])
    signed = jws_sign(a2a_1_0(), private, {"alg": "ES256", "kid": "k1"})
    card_url = server.url("/.well-known/agent-card.json", host=AGENT_HOST)
    check = only(verify_signatures(signed, card_url=card_url))
    assert check.valid and check.jku == server.url("/.well-known/jwks.json", host=AGENT_HOST)


_b64ish = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=.!", max_size=40)
_headers = st.fixed_dictionaries(
    {},
    optional={
        "alg": st.sampled_from(["ES256", "RS256", "PS384", "EdDSA", "HS256", "none", "", "es256"]) | st.integers(),
        "kid": st.sampled_from(["k1", "k2", ""]) | st.none() | st.integers(),
        "jku": st.sampled_from(["https://keys.example.test/k", "http://127.0.0.2/k", "not a url", ""]) | st.integers(),
        "crit": st.lists(st.sampled_from(["b64", "exp"]), max_size=2) | st.text(max_size=3),
        "b64": st.booleans() | st.text(max_size=2),
    },
)
_entries = st.one_of(
    st.builds(
        lambda header, signature, unprotected: {
            "protected": b64url(json.dumps(header).encode()),
            "signature": signature,
            **({"header": unprotected} if unprotected is not None else {}),
        },
        _headers,
        _b64ish,
        st.none() | _headers | st.integers(),
    ),
    st.fixed_dictionaries({}, optional={"protected": _b64ish | st.integers(), "signature": _b64ish | st.none()}),
    st.integers() | st.text(max_size=5),
)
_jwks = st.fixed_dictionaries(
    {},
    optional={
        "keys": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "kty": st.sampled_from(["EC", "RSA", "OKP", "oct", "XX"]) | st.integers(),
                    "crv": st.sampled_from(["P-256", "P-384", "Ed25519", "X25519", "secp256k1"]) | st.integers(),
                    "x": _b64ish | st.integers(),
                    "y": _b64ish,
                    "n": _b64ish,
                    "e": st.sampled_from(["AQAB", "", "!!"]),
                    "kid": st.sampled_from(["k1", "k2"]) | st.integers(),
                    "use": st.sampled_from(["sig", "enc"]) | st.integers(),
                    "alg": st.sampled_from(["ES256", "RS256"]) | st.none(),
                },
            ),
            max_size=3,
        )
        | st.text(max_size=3)
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_entries, max_size=3), _jwks)
def test_any_signatures_and_any_key_set_give_checks_never_an_exception(entries, jwks):
    card = a2a_1_0()
    card["signatures"] = entries
    checks = verify_signatures(card, jwks_fetcher=lambda url: jwks)
    assert len(checks) == len(entries)
    assert not any(check.valid for check in checks)
