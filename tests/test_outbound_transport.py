"""The SSRF guard as an httpx transport (outbound/transport.py), which the a2a-sdk's client is
given for fronted agents: every request checked, sent to the checked address under its name,
no redirect, no proxy, a capped answer. Nothing here sends traffic beyond 127.0.0.1."""

from __future__ import annotations

import asyncio
import ssl

import httpx
import pytest

from outbound import client, ssrf, transport
from tests.receiver import Answer, Receiver
from tests.test_outbound import _self_signed


def fetch(url: str, *, method: str = "GET", max_body: int = 1024, **kwargs) -> httpx.Response:
    async def go() -> httpx.Response:
        async with transport.guarded_client(timeout=2, max_body=max_body) as http:
            response = await http.request(method, url, **kwargs)
            await response.aread()
            return response

    return asyncio.run(go())


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://127.0.0.2:8080/rpc", "127.0.0.2: it is a loopback address"),
        ("http://[::ffff:127.0.0.3]:8080/rpc", "::ffff:127.0.0.3: it is a loopback address"),
        ("http://[::1]/rpc", "a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
        ("http://10.0.0.1/rpc", "a private address"),
    ],
)
def test_a_request_to_a_refused_address_never_leaves_and_says_why(url, why, caplog):
    caplog.set_level("INFO", logger="outbound.ssrf")
    with pytest.raises(transport.Refused) as refused:
        fetch(url)
    assert str(refused.value).startswith("this address is not allowed: ") and why not in str(refused.value)
    assert why in caplog.text  # the reason is the operator's


def test_a_refusal_is_a_connect_error_so_any_httpx_caller_treats_it_as_one():
    assert issubclass(transport.Refused, httpx.ConnectError)


def test_a_name_that_resolves_to_a_refused_address_is_refused(dns):
    dns["upstream.example.test"] = ["8.8.8.8", "127.0.0.2"]
    with pytest.raises(transport.Refused, match=r"^this address is not allowed: upstream\.example\.test$"):
        fetch("http://upstream.example.test/rpc")


def test_a_name_that_does_not_resolve_is_refused_for_now(dns):
    with pytest.raises(transport.Refused, match=r"^this address is not allowed: nowhere\.example\.test$"):
        fetch("http://nowhere.example.test/rpc")


def test_only_http_and_https_are_sent(dns):
    # httpx itself refuses other schemes before any transport sees them; the guard's own rule
    # is the same (tests/test_outbound.py), so neither lets one through.
    with pytest.raises((httpx.UnsupportedProtocol, transport.Refused)):
        fetch("ftp://127.0.0.1/file")


def test_the_connection_goes_to_the_checked_address_with_the_name_as_host(receiver, dns):
    dns["agent.example.test"] = ["127.0.0.1"]
    receiver.answer(Answer(200, {}, b"one"), Answer(200, {}, b"two"))

    async def go() -> list[bytes]:
        async with transport.guarded_client(timeout=2, max_body=1024) as http:
            first = await http.get(receiver.url("/card", host="agent.example.test"))
            # The name now answers differently (DNS rebinding): the checked address stays.
            dns["agent.example.test"] = ["127.0.0.2"]
            second = await http.post(receiver.url("/rpc", host="agent.example.test"), content=b"{}")
            return [first.content, second.content]

    assert asyncio.run(go()) == [b"one", b"two"]
    assert [r.path for r in receiver.requests] == ["/card", "/rpc"]
    assert {r.headers["host"] for r in receiver.requests} == {f"agent.example.test:{receiver.port}"}
    assert dns.lookups == ["agent.example.test"]  # resolved once for the client's life


def test_https_keeps_the_name_for_sni_and_the_certificate_check(dns, tmp_path, monkeypatch):
    cert, key = _self_signed("secure.example.test", tmp_path)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    monkeypatch.setattr(client, "_tls", ssl.create_default_context(cafile=cert))
    receiver = Receiver(tls=server_tls).start()
    try:
        dns["secure.example.test"] = ["127.0.0.1"]
        dns["other.example.test"] = ["127.0.0.1"]
        ok = fetch(receiver.url("/card", host="secure.example.test"))
        assert ok.status_code == 200
        assert receiver.requests[0].headers["host"] == f"secure.example.test:{receiver.port}"
        # The same address under a name the certificate does not cover: TLS refuses it.
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED|hostname"):
            fetch(receiver.url("/card", host="other.example.test"))
    finally:
        receiver.stop()


def test_two_names_on_one_address_never_share_a_connection(receiver, dns):
    dns["one.example.test"] = ["127.0.0.1"]
    dns["two.example.test"] = ["127.0.0.1"]
    guarded = transport.GuardedTransport(max_body=1024)

    async def go() -> list[tuple[str, str, int, str]]:
        async with httpx.AsyncClient(transport=guarded) as http:
            for name in ("one.example.test", "two.example.test", "one.example.test"):
                assert (await http.get(receiver.url("/", host=name))).status_code == 200
            return sorted(guarded._pools)

    # A connection verified (over TLS) for one name must never carry another name's requests.
    assert asyncio.run(go()) == [
        ("http", "one.example.test", receiver.port, "127.0.0.1"),
        ("http", "two.example.test", receiver.port, "127.0.0.1"),
    ]


def test_redirects_are_not_followed(receiver):
    receiver.answer(Answer(302, {"Location": "http://169.254.169.254/latest/meta-data/"}))
    response = fetch(receiver.url("/card"))
    assert response.status_code == 302
    assert [r.path for r in receiver.requests] == ["/card"]


def test_no_proxy_from_the_environment_is_used(receiver, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://10.0.0.1:3128")
    monkeypatch.setenv("ALL_PROXY", "http://10.0.0.1:3128")
    assert fetch(receiver.url("/card")).status_code == 200
    assert [r.path for r in receiver.requests] == ["/card"]


def test_an_answer_past_the_cap_is_cut_off(receiver):
    receiver.answer(Answer(200, {}, b"x" * 100_000))
    with pytest.raises(transport.TooLarge, match="longer than 4096 bytes"):
        fetch(receiver.url("/card"), max_body=4096)
    assert fetch(receiver.url("/card"), max_body=4096).content == b""  # the next answer: empty, fine


def test_no_compressed_answer_is_asked_for_since_the_cap_counts_bytes_on_the_wire(receiver):
    fetch(receiver.url("/card"), headers={"Accept-Encoding": "gzip"})
    assert receiver.requests[0].headers["accept-encoding"] == "identity"


def test_a_closed_port_is_an_httpx_connect_error(receiver):
    url = receiver.url("/card")
    receiver.stop()
    with pytest.raises(httpx.ConnectError):
        fetch(url)


def test_the_guard_that_decides_is_outbound_ssrf(monkeypatch, receiver):
    # One rule for every outgoing request: widen the allow-list and the transport follows it.
    monkeypatch.setattr(ssrf, "allowed_networks", lambda: ssrf.parse_networks(["127.0.0.0/8"]))
    assert fetch(receiver.url("/card")).status_code == 200
