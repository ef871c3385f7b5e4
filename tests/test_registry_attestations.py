"""The directory's attestations (registry/attestations.py): signed after a conformance run of an
approved entry, verifiable offline with the directory's JWKS alone, withdrawn when the entry is
suspended, its card changes or its domain proof lapses, and shown on the page and in the API.
The agent is a fake A2A server on 127.0.0.1 (tests/card_server.py); nothing leaves the machine."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import jwt
import orjson
import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from push import signing
from push.models import KeyPurpose
from registry import attestations, conformance, freshness, proofs, services
from registry.models import Attestation, ConformanceResult, Entry, State
from tests.conformance_agent import CARD_PATH, HOST, approved_entry, running_agent
from tests.registry_factories import make_entry, new_version, read_card

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(dns):
    yield from running_agent(dns)


def attested(agent_server) -> tuple[Entry, Attestation]:
    entry = approved_entry(agent_server)
    _results, attestation = conformance.entry_conformance_run(entry_id=entry.pk)
    assert attestation is not None
    entry.refresh_from_db()
    return entry, attestation


def test_an_attestation_verifies_offline_with_the_published_jwks_and_says_what_was_verified(agent, client):
    entry, _ = attested(agent)
    keys = client.get("/registry/jwks.json").json()  # fetched once; from here on, no server
    served = client.get(f"/registry/{entry.pk}/attestation.jwt")
    assert served.status_code == 200 and served["Content-Type"] == "application/jwt"
    token = served.content.decode()

    header = jwt.get_unverified_header(token)
    assert header["alg"] == "ES256" and header["typ"] == "agentserver-attestation+jwt"
    key = jwt.PyJWKSet.from_dict(keys)[header["kid"]]
    claims = jwt.decode(token, key, algorithms=["ES256"], options={"require": ["iss", "sub", "iat", "exp", "jti"]})

    assert claims["sub"] == f"{attestations.issuer()}/registry/{entry.pk}/"
    assert claims["iss"] == attestations.issuer()
    assert claims["exp"] - claims["iat"] == 86400
    assert claims["card"]["sha256"] == entry.approved_version.hash
    assert claims["card"]["url"] == entry.card_url and claims["card"]["version"] == 1
    # The fake agent's proof is its well-known file over http on its port: that host:port is stated.
    assert "domain" not in claims
    assert claims["host_port"]["name"] == f"{HOST}:{urlsplit(entry.card_url).port}"
    assert claims["host_port"]["method"] == "http"
    assert claims["entry"] == {"id": entry.pk, "kind": "remote", "state": "approved"}
    assert claims["health"]["state"] == entry.health
    assert claims["status"] == f"{attestations.issuer()}/registry/attestations/{claims['jti']}/"
    recorded = ConformanceResult.objects.filter(entry=entry).order_by("id")
    assert [(r["check"], r["binding"], r["outcome"]) for r in claims["conformance"]["results"]] == [
        (r.name, r.binding, r.outcome) for r in recorded
    ]
    assert {r["outcome"] for r in claims["conformance"]["results"]} == {"passed"}
    assert claims["flags"] == []  # the endpoint is on the card's own host
    # The module's own verifier agrees, and a statement altered by one byte verifies with no key.
    assert attestations.verify(token, keys) == claims
    head, body, signature = token.split(".")
    forged = jwt.utils.base64url_encode(orjson.dumps({**claims, "card": {**claims["card"], "sha256": "0" * 64}}))
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(f"{head}.{forged.decode()}.{signature}", key, algorithms=["ES256"])


@pytest.mark.parametrize(
    ("card_url", "method", "key", "name"),
    [
        ("https://a.example.test/card.json", "http", "domain", "a.example.test"),
        ("https://a.example.test:8443/card.json", "http", "host_port", "a.example.test:8443"),
        ("http://a.example.test/card.json", "http", "host_port", "a.example.test:80"),
        ("http://a.example.test:8080/card.json", "dns", "domain", "a.example.test"),
    ],
)
def test_an_attestation_states_the_domain_only_when_the_proof_proves_it(card_url, method, key, name):
    entry = make_entry(card_url=card_url, approved=True)
    Entry.objects.filter(pk=entry.pk).update(domain_verified_by=method)
    entry.refresh_from_db()
    claims = attestations.claims_for(entry, results=[], at=timezone.now(), jti="j")
    assert claims[key]["name"] == name and claims[key]["method"] == method
    assert {"domain", "host_port"} - {key} <= {"domain", "host_port"} - set(claims)


def test_the_jwks_holds_the_directory_s_keys_only(client):
    push_key = signing.key_for_signing()
    directory_key = signing.key_for_signing(purpose=KeyPurpose.DIRECTORY)
    kids = {k["kid"] for k in client.get("/registry/jwks.json").json()["keys"]}
    assert directory_key.kid in kids and push_key.kid not in kids


def test_a_statement_signed_with_another_purpose_s_key_does_not_verify(agent, client):
    entry, attestation = attested(agent)
    claims = jwt.decode(attestation.token, options={"verify_signature": False})
    push_key = signing.key_for_signing()
    forged = jwt.encode(
        claims,
        signing.private_key(push_key),
        algorithm="ES256",
        headers={"kid": push_key.kid, "typ": attestations.TYPE},
    )
    with pytest.raises(jwt.InvalidKeyError):
        attestations.verify(forged, client.get("/registry/jwks.json").json())


def test_a_changed_card_withdraws_the_attestation(agent, client):
    entry, attestation = attested(agent)
    new_version(entry, name="Conformance agent", url=agent.url("/rpc", host=HOST), description="new")
    entry.refresh_from_db()
    assert entry.state == State.PENDING
    attestation.refresh_from_db()
    assert attestation.revoked_at is not None and "the card changed" in attestation.revoked_reason
    # The entry stays listed (its approved version), so its URL says why rather than 404.
    gone = client.get(f"/registry/{entry.pk}/attestation.jwt")
    assert gone.status_code == 410 and gone.json()["state"] == "revoked"
    assert "the card changed" in gone.json()["detail"]
    api = client.get(f"/api/registry/agents/{entry.pk}/attestation/").json()
    assert api["state"] == "revoked" and api["revoked_at"] and api["token"] is None
    assert "the card changed" in api["reason"]
    assert client.get(f"/registry/attestations/{attestation.jti}/").status_code == 410
    # No new statement while the card waits for review.
    assert conformance.entry_conformance_run(entry_id=entry.pk, now=timezone.now() + timedelta(hours=1)) is None


def test_a_card_back_at_an_earlier_version_withdraws_it_though_the_state_stays(agent):
    # v1 approved, v2 approved after review, then the agent serves v1 again: a card seen before
    # moves no state (registry.services._apply_card), so only the hash can tell the statement
    # about v2 is no longer the entry's card.
    entry = approved_entry(agent)
    curator = get_user_model().objects.create_superuser("curator")
    new_version(entry, name="Conformance agent", url=agent.url("/rpc", host=HOST), description="v2")
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    agent.serve(CARD_PATH, entry.current_version.document)
    _results, about_v2 = conformance.entry_conformance_run(entry_id=entry.pk)
    assert about_v2 is not None
    card = read_card(card_url=entry.card_url, name="Conformance agent", url=agent.url("/rpc", host=HOST))
    with transaction.atomic():
        locked = Entry.objects.select_for_update(of=("self",)).select_related("current_version").get(pk=entry.pk)
        services._apply_card(locked, card, at=timezone.now())
    entry.refresh_from_db()
    about_v2.refresh_from_db()
    assert entry.state == State.APPROVED and entry.current_version.number == 1
    assert about_v2.revoked_at is not None and "the card changed" in about_v2.revoked_reason
    # And no statement is signed while the card is not the approved one.
    assert conformance.entry_conformance_run(entry_id=entry.pk, now=timezone.now() + timedelta(hours=1))[1] is None


def test_suspending_the_entry_withdraws_the_attestation_and_its_status_url_says_so(agent, client):
    entry, attestation = attested(agent)
    curator = get_user_model().objects.create_superuser("curator")
    services.entry_decide(entry=entry, to=State.SUSPENDED, actor=curator, role="curator", reason="impersonation")
    attestation.refresh_from_db()
    assert attestation.revoked_at is not None and "suspended" in attestation.revoked_reason
    assert "impersonation" in attestation.revoked_reason
    # A suspended entry is hidden: to the public its URL is that of no entry at all...
    assert (
        client.get(f"/registry/{entry.pk}/attestation.jwt").json()
        == client.get("/registry/999999/attestation.jwt").json()
    )
    # ...but whoever holds the statement learns it is withdrawn.
    status = client.get(f"/registry/attestations/{attestation.jti}/")
    assert status.status_code == 410 and status.json()["state"] == "revoked"
    assert status.json()["revoked_at"] and "impersonation" in status.json()["reason"]


def test_a_lapsed_proof_withdraws_the_attestation_until_the_domain_is_proven_again(agent, client):
    entry, attestation = attested(agent)
    agent.serve(
        proofs.WELL_KNOWN_PATH, f"{proofs.TOKEN_PREFIX}{entry.proof_token}\n".encode(), Content_Type="text/plain"
    )
    day = timedelta(days=1, minutes=1)
    start = timezone.now()
    assert freshness.entry_recheck_proof(entry_id=entry.pk, now=start + day).ok
    entry.refresh_from_db()
    assert entry.proof_checked_at == start + day and entry.proof_failures == 0

    # The token is gone: one miss is no lapse (a restart, a DNS hiccup)...
    agent.routes.pop(proofs.WELL_KNOWN_PATH)
    assert not freshness.entry_recheck_proof(entry_id=entry.pk, now=start + 2 * day).ok
    entry.refresh_from_db()
    attestation.refresh_from_db()
    assert entry.state == State.APPROVED and entry.proof_failures == 1 and entry.proof_lapsed_at is None
    assert attestation.revoked_at is None
    # ...the second in a row is.
    assert not freshness.entry_recheck_proof(entry_id=entry.pk, now=start + 3 * day).ok
    entry.refresh_from_db()
    attestation.refresh_from_db()
    assert entry.state == State.PENDING and entry.proof_lapsed_at == start + 3 * day
    assert attestation.revoked_at is not None and "the domain proof lapsed" in attestation.revoked_reason
    assert "the domain proof lapsed" in entry.decisions.order_by("-at", "-id").first().reason
    assert client.get(f"/registry/{entry.pk}/attestation.jwt").status_code == 410
    assert client.get(f"/api/registry/agents/{entry.pk}/").json()["trust"]["proof_lapsed_at"]
    assert "Lapsed" in client.get(f"/registry/{entry.pk}/").content.decode()

    curator = get_user_model().objects.create_superuser("curator")
    with pytest.raises(services.RegistryError, match="the domain proof lapsed"):
        services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    assert freshness.entry_recheck_proof(entry_id=entry.pk, now=start + 4 * day) is None  # lapsed: not re-checked
    assert entry.pk not in conformance.conformance_due()

    # Proven again, approved again: the next run signs a new statement.
    agent.serve(
        proofs.WELL_KNOWN_PATH, f"{proofs.TOKEN_PREFIX}{entry.proof_token}\n".encode(), Content_Type="text/plain"
    )
    assert services.entry_verify_domain(entry=entry, method="http", actor=curator).ok
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    assert entry.pk in conformance.conformance_due()
    _results, again = conformance.entry_conformance_run(entry_id=entry.pk, now=timezone.now() + timedelta(minutes=5))
    assert again is not None and again.revoked_at is None and again.jti != attestation.jti
    assert client.get(f"/registry/{entry.pk}/attestation.jwt").content.decode() == again.token


def test_a_new_run_supersedes_the_last_statement(agent):
    entry, first = attested(agent)
    _results, second = conformance.entry_conformance_run(entry_id=entry.pk, now=timezone.now() + timedelta(hours=6))
    first.refresh_from_db()
    assert first.revoked_reason == "superseded by a newer attestation" and second.revoked_at is None


def test_an_expired_statement_is_answered_410(agent, client):
    entry, attestation = attested(agent)
    Attestation.objects.filter(pk=attestation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    gone = client.get(f"/registry/{entry.pk}/attestation.jwt")
    assert gone.status_code == 410 and gone.json()["state"] == "expired"


def test_an_entry_never_attested_has_no_statement(client):
    entry = make_entry(name="Unchecked")
    assert client.get(f"/registry/{entry.pk}/attestation.jwt").status_code == 404
    assert client.get(f"/api/registry/agents/{entry.pk}/attestation/").status_code == 404
    assert client.get(f"/api/registry/agents/{entry.pk}/").json()["attestation"] is None
    assert client.get("/registry/attestations/not-a-jti/").status_code == 404


def test_the_page_and_the_api_show_the_attestation(agent, client):
    entry, attestation = attested(agent)
    page = client.get(f"/registry/{entry.pk}/").content.decode()
    assert "Signed by the directory" in page and f"/registry/{entry.pk}/attestation.jwt" in page
    assert "/registry/jwks.json" in page
    body = client.get(f"/api/registry/agents/{entry.pk}/").json()["attestation"]
    assert body["state"] == "valid" and body["token"] == attestation.token and body["jti"] == attestation.jti
    assert body["url"].endswith(f"/registry/{entry.pk}/attestation.jwt")
    assert body["jwks_url"].endswith("/registry/jwks.json")
    assert client.get(f"/api/registry/agents/{entry.pk}/attestation/").json() == body
