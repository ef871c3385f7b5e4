"""Signing keys, the JWKS, rotation, and the receiver's verification helper."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from push import signing
from push.models import KeyPurpose, SigningKey
from push.verify import JwksCache, StaticJwks, VerificationError, verify_notification

pytestmark = pytest.mark.django_db
TASK = "0b9f0f3e-8a47-4a8c-9d55-0c0c7c1e2a10"
HOOK = "https://receiver.example.test/hook"


def notification(body: bytes = b'{"statusUpdate":{"taskId":"' + TASK.encode() + b'"}}', *, now=None, seq: int = 1):
    claims = signing.notification_claims(body=body, task_id=TASK, event_id=f"{TASK}:{seq}", audience=HOOK, now=now)
    headers = {"A2A-Push-Signature": signing.sign(claims, now=now), "A2A-Push-Event-Id": f"{TASK}:{seq}"}
    return body, headers


def verify(body, headers, jwks=None, **kwargs):
    kwargs.setdefault("issuer", "agentserver")
    kwargs.setdefault("audience", HOOK)
    return verify_notification(body=body, headers=headers, jwks=jwks or StaticJwks(signing.jwks()), **kwargs)


def test_the_first_notification_creates_a_key_and_it_verifies_against_the_jwks():
    assert SigningKey.objects.count() == 0
    body, headers = notification()
    assert SigningKey.objects.count() == 1
    verified = verify(body, headers)
    assert verified.task_id == TASK and verified.event_id == f"{TASK}:1"
    assert set(verified.claims) >= {"iss", "aud", "iat", "exp", "jti", "taskId", "eventId", "request_body_sha256"}
    assert verified.claims["exp"] - verified.claims["iat"] == 300


def test_the_jwks_is_served_with_public_keys_only(client):
    notification()
    response = client.get("/.well-known/jwks.json")
    assert response.status_code == 200 and response["Content-Type"] == "application/jwk-set+json"
    assert "max-age=" in response["Cache-Control"]
    [key] = response.json()["keys"]
    assert key["kty"] == "EC" and key["crv"] == "P-256" and key["alg"] == "ES256" and key["use"] == "sig"
    assert "d" not in key  # no private part
    assert key["kid"] == SigningKey.objects.get().kid


def test_a_fresh_install_publishes_the_key_its_first_notification_will_be_signed_with(client):
    [published] = client.get("/.well-known/jwks.json").json()["keys"]
    body, headers = notification()
    assert verify(body, headers).claims and published["kid"] == SigningKey.objects.get().kid


def test_the_private_key_is_not_readable_in_the_database():
    notification()
    with connection.cursor() as cursor:
        cursor.execute("SELECT private_key_sealed FROM push_signingkey")
        [(sealed,)] = cursor.fetchall()
    assert "PRIVATE KEY" not in sealed and sealed.startswith("gAAAAA")  # a Fernet token


def test_every_signature_has_its_own_jti():
    body, a = notification()
    _, b = notification(body)
    assert verify(body, a).jti != verify(body, b).jti


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda body, headers: (body + b" ", headers), "does not match the signed hash"),
        (lambda body, headers: (body, {**headers, "A2A-Push-Event-Id": f"{TASK}:2"}), "event id"),
        (lambda body, headers: (body, {"A2A-Push-Event-Id": headers["A2A-Push-Event-Id"]}), "no A2A-Push-Signature"),
        (lambda body, headers: (body, {**headers, "A2A-Push-Signature": "not.a.jws"}), "malformed|invalid"),
    ],
)
def test_a_tampered_notification_is_rejected(tamper, message):
    with pytest.raises(VerificationError, match=message):
        verify(*tamper(*notification()))


def test_a_notification_for_someone_else_or_from_someone_else_is_rejected():
    body, headers = notification()
    with pytest.raises(VerificationError, match="(?i)audience"):
        verify(body, headers, audience="https://other.example.test/hook")
    with pytest.raises(VerificationError, match="(?i)issuer"):
        verify(body, headers, issuer="https://impostor.example.test")


def test_a_stale_notification_is_rejected():
    body, headers = notification(now=timezone.now() - timedelta(minutes=10))
    with pytest.raises(VerificationError, match="expired|too old"):
        verify(body, headers)


def test_a_signature_by_an_unknown_key_is_rejected():
    body, headers = notification()
    SigningKey.objects.all().delete()
    signing._private_keys.clear()
    signing.key_for_signing()  # another key now
    with pytest.raises(VerificationError, match="unknown signing key"):
        verify(body, headers)


def test_the_jwks_cache_refetches_when_a_notification_names_a_new_key():
    fetched = []

    def fetch(url):
        fetched.append(url)
        return signing.jwks()

    cache = JwksCache("https://agents.example.test/.well-known/jwks.json", fetch=fetch, min_refetch=0)
    verify(*notification(), jwks=cache)
    verify(*notification(), jwks=cache)
    assert len(fetched) == 1
    signing.key_rotate(publish_delay=0)
    verify(*notification(), jwks=cache)  # signed by the new key: one more fetch
    assert len(fetched) == 2


def test_a_jwks_that_cannot_be_fetched_is_a_verification_error():
    def unreachable(url):
        raise OSError("connection refused")

    with pytest.raises(VerificationError, match="could not be fetched"):
        verify(*notification(), jwks=JwksCache("https://agents.example.test/.well-known/jwks.json", fetch=unreachable))


def test_a_rotated_in_key_is_published_at_once_but_signs_only_after_the_delay():
    now = timezone.now()
    old = signing.key_for_signing(now=now)
    new, _ = signing.key_rotate(publish_delay=3600, now=now)
    assert {k["kid"] for k in signing.jwks(now=now)["keys"]} == {old.kid, new.kid}
    assert signing.key_for_signing(now=now + timedelta(minutes=59)).kid == old.kid
    assert signing.key_for_signing(now=now + timedelta(minutes=61)).kid == new.kid


def test_a_retired_key_stays_published_until_its_last_signature_expires():
    now = timezone.now()
    old = signing.key_for_signing(now=now)
    body, headers = notification(now=now)
    new, _ = signing.key_rotate(publish_delay=0, now=now)
    # Signed before the rotation, verified after it: the old key is still in the JWKS.
    assert verify(body, headers).event_id == f"{TASK}:1"
    assert signing.key_for_signing(now=now).kid == new.kid
    last_exp = now + timedelta(seconds=300)
    published = lambda at: {k["kid"] for k in signing.jwks(now=at)["keys"]}  # noqa: E731
    assert old.kid in published(last_exp + timedelta(seconds=59))  # within the receivers' leeway
    assert published(last_exp + timedelta(seconds=61)) == {new.kid}
    # The next rotation after that deletes it.
    _, deleted = signing.key_rotate(publish_delay=0, now=last_exp + timedelta(seconds=61))
    assert deleted == 1 and not SigningKey.objects.filter(kid=old.kid).exists()


def test_the_rotate_command_reports_the_new_key(capsys):
    old = signing.key_for_signing()
    call_command("rotate_push_keys", "--publish-delay", "120")
    out = capsys.readouterr().out
    new = SigningKey.objects.exclude(kid=old.kid).get()
    assert f"new push key {new.kid}: published now" in out
    assert (new.signs_from - new.created_at).total_seconds() == 120
    assert SigningKey.objects.get(kid=old.kid).signs_until == new.signs_from


def test_each_purpose_has_its_own_keys_and_its_own_jwks():
    push_key = signing.key_for_signing()
    card_key = signing.key_for_signing(purpose=KeyPurpose.CARD)
    assert push_key.kid != card_key.kid
    assert [k["kid"] for k in signing.jwks()["keys"]] == [push_key.kid]
    assert [k["kid"] for k in signing.jwks(purpose=KeyPurpose.CARD)["keys"]] == [card_key.kid]


def test_rotating_one_purpose_leaves_the_others_keys_alone():
    push_key = signing.key_for_signing()
    card_key = signing.key_for_signing(purpose=KeyPurpose.CARD)
    new, _ = signing.key_rotate(publish_delay=0, purpose=KeyPurpose.CARD, kept_for=60)
    assert SigningKey.objects.get(kid=push_key.kid).signs_until is None
    assert SigningKey.objects.get(kid=card_key.kid).unpublish_at == new.signs_from + timedelta(seconds=60)
    assert signing.key_for_signing(purpose=KeyPurpose.CARD).kid == new.kid
