"""The SSRF guard and the outgoing HTTP client (outbound/, used by push and OIDC): only public
addresses, resolved once and connected to as checked, no redirects, a capped read, for POST
and GET alike. Verdicts are tested on the guard itself (address in, verdict out); nothing
here sends traffic beyond 127.0.0.1."""

import ipaddress
import time
from datetime import UTC

import pytest

from outbound import client, ssrf
from tests.receiver import Answer

ALLOW_LOCAL = ssrf.parse_networks(["127.0.0.1/32"])


def test_outbound_is_plain_python_not_a_django_app(settings):
    # Every app may use it, push and protocols alike: it sits below all of them
    # (tests/test_imports.py checks it imports none of them).
    assert not any(app == "outbound" or app.startswith("outbound.") for app in settings.INSTALLED_APPS)


def refusal(address: str, allow=()) -> str | None:
    return ssrf.address_refusal(ipaddress.ip_address(address), allow)


@pytest.mark.parametrize(
    "address, why",
    [
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("224.0.0.251", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("0.0.0.0", "this network"),
        ("192.0.2.10", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("ff02::1", "multicast"),
        ("fec0::1", "site-local"),
        ("2001:db8::1", "documentation"),
        ("2002:7f00:1::1", "6to4"),
        ("::ffff:127.0.0.3", "loopback"),  # v4-mapped
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("::127.0.0.1", "IPv4-compatible"),
    ],
)
def test_special_purpose_addresses_are_refused_with_the_reason(address, why):
    assert why in refusal(address)


@pytest.mark.parametrize(
    "address", ["93.184.215.14", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_public_addresses_are_allowed(address):
    assert refusal(address) is None


def test_the_allow_list_opens_exactly_the_networks_it_names():
    assert refusal("127.0.0.1", ALLOW_LOCAL) is None
    assert refusal("::ffff:127.0.0.1", ALLOW_LOCAL) is None  # the same address, v4-mapped
    assert "loopback" in refusal("127.0.0.2", ALLOW_LOCAL)
    assert "loopback" in refusal("::ffff:127.0.0.3", ALLOW_LOCAL)
    assert "loopback" in refusal("::1", ALLOW_LOCAL)
    assert refusal("10.9.0.7", ssrf.parse_networks(["10.9.0.0/16"])) is None
    assert refusal("fd00::5", ssrf.parse_networks(["fd00::/8"])) is None


def test_the_test_settings_allow_only_127_0_0_1():
    assert ssrf.allowed_networks() == ALLOW_LOCAL


@pytest.mark.parametrize(
    "url, message",
    [
        ("ftp://example.com/hook", "http or https"),
        ("file:///etc/passwd", "http or https"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "http or https"),
        ("http://user:pw@example.com/hook", "credentials"),
        ("http:///hook", "no host"),
        ("http://127.0.0.1:99999/", "not a valid URL"),
        ("", "empty"),
    ],
)
def test_only_plain_http_and_https_urls_are_accepted(url, message):
    with pytest.raises(ssrf.Refused, match=message):
        ssrf.check(url)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.2/hook", "http://[::ffff:127.0.0.3]:8080/hook", "http://[::1]/hook", "http://2130706434/hook"],
)
def test_a_url_naming_a_refused_address_is_refused(url, dns):
    dns["2130706434"] = ["127.0.0.2"]  # the decimal form getaddrinfo would turn into 127.0.0.2
    with pytest.raises(ssrf.Refused) as refused:
        ssrf.check(url)
    assert "loopback" in refused.value.detail


def test_a_hostname_that_resolves_to_a_refused_address_is_refused(dns):
    dns["hooks.example.test"] = ["8.8.4.4", "127.0.0.2"]  # one bad address is enough
    with pytest.raises(ssrf.Refused) as refused:
        ssrf.check("https://hooks.example.test/a2a")
    assert "hooks.example.test (which resolves to 127.0.0.2): it is a loopback" in refused.value.detail
    dns["meta.example.test"] = ["169.254.169.254"]
    with pytest.raises(ssrf.Refused) as refused:
        ssrf.check("http://meta.example.test/latest/meta-data/")
    assert "link-local" in refused.value.detail


def test_a_hostname_that_does_not_resolve_is_unresolved_for_now_not_refused_and_may_be_registered(dns):
    with pytest.raises(ssrf.Unresolved) as unresolved:
        ssrf.check("https://nowhere.example.test/hook")
    assert "could not be resolved" in unresolved.value.detail
    assert ssrf.check("https://nowhere.example.test/hook", unresolvable_ok=True) is None


@pytest.mark.parametrize(
    "url, host, resolved",
    [
        ("http://127.0.0.2/hook", "127.0.0.2", None),
        ("http://[::ffff:127.0.0.3]:8080/hook", "[::ffff:127.0.0.3]", None),
        ("https://hooks.example.test/a2a", "hooks.example.test", "127.0.0.2"),
        ("https://mapped.example.test/a2a", "mapped.example.test", "::ffff:127.0.0.3"),
        ("https://nowhere.example.test/a2a", "nowhere.example.test", None),
    ],
)
def test_what_a_caller_is_told_is_only_that_the_host_it_gave_is_not_allowed(dns, caplog, url, host, resolved):
    """The caller's text names no address a name resolves to, no reason (loopback, private),
    and reads the same for a name that does not resolve: the log has the rest."""
    if resolved:
        dns[host] = [resolved]
    caplog.set_level("INFO", logger="outbound.ssrf")
    with pytest.raises((ssrf.Refused, ssrf.Unresolved)) as refused:
        ssrf.check(url)
    assert str(refused.value) == f"this address is not allowed: {host}"
    assert refused.value.detail != str(refused.value) and refused.value.detail in caplog.text
    if resolved:
        assert f"(which resolves to {ipaddress.ip_address(resolved)})" in refused.value.detail
    with pytest.raises((ssrf.Refused, ssrf.Unresolved)) as refused_host:
        ssrf.check_host(host.strip("[]"), 5672)
    assert str(refused_host.value) == f"this address is not allowed: {host}"


def test_a_hostname_no_resolver_could_look_up_is_refused(dns):
    with pytest.raises(ssrf.Refused, match="not a valid host name"):
        ssrf.check("https://" + "a" * 64 + ".example.test/hook")  # a label past 63 characters


def test_the_destination_keeps_the_name_and_pins_the_checked_address(dns):
    dns["hooks.example.test"] = ["8.8.4.4"]
    destination = ssrf.check("https://hooks.example.test/a2a/hook?x=1")
    assert (destination.host, destination.port, destination.target) == ("hooks.example.test", 443, "/a2a/hook?x=1")
    assert destination.address == ipaddress.ip_address("8.8.4.4")
    assert dns.lookups == ["hooks.example.test"]


def test_the_connection_goes_to_the_checked_address_with_the_name_as_host(receiver, dns):
    dns["receiver.example.test"] = ["127.0.0.1"]
    destination = ssrf.check(receiver.url(host="receiver.example.test"))
    # Whatever the name resolves to from now on (DNS rebinding), the checked address is used.
    dns["receiver.example.test"] = ["127.0.0.2"]
    response = client.post(
        destination, body=b"{}", headers={"Content-Type": "application/a2a+json"}, timeout=2, max_body=1024
    )
    assert response.status == 200
    assert receiver.requests[0].headers["host"] == f"receiver.example.test:{receiver.port}"
    assert dns.lookups == ["receiver.example.test"]


def _self_signed(name: str, directory) -> tuple[str, str]:
    from datetime import datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path)


def test_https_goes_to_the_checked_address_and_verifies_the_certificate_of_the_name(dns, tmp_path, monkeypatch):
    import ssl

    from tests.receiver import Receiver

    cert, key = _self_signed("secure.example.test", tmp_path)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=cert)
    monkeypatch.setattr(client, "_tls", trusting)
    receiver = Receiver(tls=server_tls).start()
    try:
        dns["secure.example.test"] = ["127.0.0.1"]
        dns["other.example.test"] = ["127.0.0.1"]
        ok = client.post(
            ssrf.check(receiver.url(host="secure.example.test")), body=b"{}", headers={}, timeout=2, max_body=1024
        )
        assert ok.status == 200 and receiver.requests[0].headers["host"] == f"secure.example.test:{receiver.port}"
        # The same address under a name the certificate does not cover: TLS refuses it.
        with pytest.raises(client.SendError, match="CERTIFICATE_VERIFY_FAILED|hostname"):
            client.post(
                ssrf.check(receiver.url(host="other.example.test")), body=b"{}", headers={}, timeout=2, max_body=1024
            )
    finally:
        receiver.stop()


def test_redirects_are_not_followed(receiver):
    receiver.answer(Answer(302, {"Location": receiver.url("/elsewhere")}))
    response = client.post(ssrf.check(receiver.url()), body=b"{}", headers={}, timeout=2, max_body=1024)
    assert response.status == 302
    assert [r.path for r in receiver.requests] == ["/hook"]


def test_the_answer_is_read_only_up_to_the_cap(receiver):
    receiver.answer(Answer(200, {}, b"x" * 1_000_000))
    response = client.post(ssrf.check(receiver.url()), body=b"{}", headers={}, timeout=2, max_body=4096)
    assert response.status == 200 and len(response.body) == 4096


def test_an_answer_whose_head_drips_in_ends_at_twice_the_timeout_as_a_read_timeout(receiver):
    # Every read gets its byte well within the timeout; only the request's deadline ends it.
    receiver.answer(Answer(200, {"X-Padding": "x" * 200}, drip=0.01))
    started = time.monotonic()
    with pytest.raises(client.SendError, match="ReadTimeout"):
        client.post(ssrf.check(receiver.url()), body=b"{}", headers={}, timeout=0.5, max_body=1024)
    assert 1.0 <= time.monotonic() - started < 1.5


def test_an_answer_whose_body_drips_in_stands_cut_off_at_twice_the_timeout(receiver):
    receiver.answer(Answer(200, {}, b"y" * 500, drip=0.01, drip_head=False))
    started = time.monotonic()
    response = client.post(ssrf.check(receiver.url()), body=b"{}", headers={}, timeout=0.5, max_body=1024)
    assert 1.0 <= time.monotonic() - started < 1.5
    assert response.status == 200 and response.truncated and 0 < len(response.body) < 500


def test_a_closed_port_is_a_send_error_not_an_exception_of_the_http_library(receiver):
    destination = ssrf.check(receiver.url())
    receiver.stop()
    with pytest.raises(client.SendError, match="ConnectError"):
        client.post(destination, body=b"{}", headers={}, timeout=2, max_body=1024)


def test_a_get_reads_the_answer_through_the_same_guarantees(receiver, dns):
    dns["keys.example.test"] = ["127.0.0.1"]
    receiver.answer(Answer(200, {"Content-Type": "application/json"}, b'{"keys": []}'))
    response = client.get(
        ssrf.check(receiver.url("/jwks", host="keys.example.test")), headers={}, timeout=2, max_body=1024
    )
    assert (response.status, response.body, response.truncated) == (200, b'{"keys": []}', False)
    (request,) = receiver.requests
    assert request.path == "/jwks" and request.body == b""
    assert request.headers["host"] == f"keys.example.test:{receiver.port}"


def test_a_get_follows_no_redirect_either(receiver):
    receiver.answer(Answer(301, {"Location": "http://169.254.169.254/latest/meta-data/"}))
    response = client.get(ssrf.check(receiver.url("/jwks")), headers={}, timeout=2, max_body=1024)
    assert response.status == 301 and [r.path for r in receiver.requests] == ["/jwks"]


def test_a_get_reads_only_up_to_the_cap_and_says_it_stopped_there(receiver):
    receiver.answer(Answer(200, {}, b"x" * 1_000_000))
    response = client.get(ssrf.check(receiver.url()), headers={}, timeout=2, max_body=4096)
    assert len(response.body) == 4096 and response.truncated


def test_no_compressed_answer_is_asked_for_since_the_cap_counts_bytes_on_the_wire(receiver):
    client.get(ssrf.check(receiver.url()), headers={}, timeout=2, max_body=1024)
    client.post(ssrf.check(receiver.url()), body=b"{}", headers={}, timeout=2, max_body=1024)
    assert [r.headers["accept-encoding"] for r in receiver.requests] == ["identity", "identity"]


@pytest.mark.parametrize("header, seconds", [("7", 7.0), ("0", 0.0), ("soon", None), ("", None), (None, None)])
def test_retry_after_is_read_as_seconds(header, seconds):
    assert client.retry_after_seconds(header) == seconds


def test_retry_after_may_be_an_http_date():
    from datetime import datetime

    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert client.retry_after_seconds("Thu, 01 Jan 2026 12:00:30 GMT", now=now) == 30.0


def test_an_internationalised_host_is_sent_as_its_a_labels(dns, receiver):
    # Host and SNI carry the ASCII form: httpx cannot encode the Unicode one (it raised
    # UnicodeEncodeError, which no caller expected).
    dns["xn--bcher-kva.example"] = ["127.0.0.1"]
    destination = ssrf.check(f"http://bücher.example:{receiver.port}/hook")
    assert destination is not None and destination.host == "xn--bcher-kva.example"
    response = client.post(destination, body=b"{}", headers={}, timeout=2, max_body=100)
    assert response.status == 200
    assert receiver.requests[-1].headers["host"] == f"xn--bcher-kva.example:{receiver.port}"


# --- a streamed POST (webhook agents' answers) --------------------------------------------------


@pytest.fixture
def streamer():
    from tests.webhook_endpoint import Endpoint

    running = Endpoint(None).start()  # no signature check: these requests are unsigned
    yield running
    running.stop()


def _streamed(destination, **limits):
    limits = {"timeout": 5.0, "idle_timeout": 2.0, "max_body": 1 << 20, **limits}
    return client.post_streamed(destination, body=b"{}", headers={"Content-Type": "application/json"}, **limits)


def test_a_streamed_post_goes_to_the_checked_address_with_the_name_as_host(streamer, dns):
    from tests.webhook_endpoint import Reply

    dns["agent.example.test"] = ["127.0.0.1"]
    destination = ssrf.check(streamer.url(host="agent.example.test"))
    dns["agent.example.test"] = ["127.0.0.2"]  # rebinding changes nothing: the checked address is used
    streamer.answer(Reply(chunks=[(0, b"a\n")]))
    with _streamed(destination) as answer:
        assert (answer.status, list(answer.lines(max_line=100))) == (200, [b"a"])
    (request,) = streamer.seen
    assert request.headers["host"] == f"agent.example.test:{streamer.port}"
    assert request.headers["accept-encoding"] == "identity"
    assert dns.lookups == ["agent.example.test"]


def test_a_streamed_post_over_https_verifies_the_certificate_of_the_name(dns, tmp_path, monkeypatch):
    import ssl

    from tests.receiver import Receiver

    cert, key = _self_signed("secure.example.test", tmp_path)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    monkeypatch.setattr(client, "_tls", ssl.create_default_context(cafile=cert))
    receiver = Receiver(tls=server_tls).start()
    try:
        dns["secure.example.test"] = ["127.0.0.1"]
        dns["other.example.test"] = ["127.0.0.1"]
        receiver.answer(Answer(200, {"Content-Type": "application/x-ndjson"}, b'{"type":"complete"}\n'))
        with _streamed(ssrf.check(receiver.url(host="secure.example.test"))) as answer:
            assert list(answer.lines(max_line=100)) == [b'{"type":"complete"}']
        with pytest.raises(client.TlsFailed, match="certificate|hostname|IP address mismatch"):
            with _streamed(ssrf.check(receiver.url(host="other.example.test"))):
                pass
    finally:
        receiver.stop()


def test_a_streamed_answer_gives_each_line_the_moment_it_arrives(streamer):
    from tests.webhook_endpoint import Reply

    streamer.answer(Reply(chunks=[(0, b"one\r\ntw"), (0, b"o\n"), (0.5, b"three\n"), (0, b"four")]))
    arrivals = []
    with _streamed(ssrf.check(streamer.url())) as answer:
        for line in answer.lines(max_line=100):
            arrivals.append((line, time.monotonic()))
    assert [line for line, _ in arrivals] == [b"one", b"two", b"three", b"four"]  # the last one without its \n
    assert arrivals[2][1] - arrivals[1][1] >= 0.45  # "two" came before "three" was sent


def test_the_caller_s_check_runs_while_nothing_arrives_and_may_end_the_read(streamer):
    from tests.webhook_endpoint import Reply

    class Stop(Exception):
        pass

    checks = []

    def check() -> None:
        checks.append(time.monotonic())
        if len(checks) == 3:
            raise Stop

    streamer.answer(Reply(chunks=[(0, b"a\n"), (3, b"b\n")]))
    started = time.monotonic()
    with (
        pytest.raises(Stop),
        _streamed(ssrf.check(streamer.url()), while_waiting=check, wait_check_every=0.1) as answer,
    ):
        list(answer.lines(max_line=100))
    assert time.monotonic() - started < 1.5
    assert all(later - earlier >= 0.09 for earlier, later in zip(checks, checks[1:], strict=False))


@pytest.mark.parametrize(
    "chunks, limits, error, message",
    [
        ([(0, b"a\n"), (1.0, b"b\n")], {"idle_timeout": 0.3}, client.TimedOut, "nothing arrived for 0.3 s"),
        ([(0.2, b"a\n")] * 10, {"timeout": 0.7, "idle_timeout": 0.5}, client.TimedOut, "no complete answer within"),
        ([(0, b"x" * 50 + b"\n")], {}, client.TooLarge, "a line is longer than 40 bytes"),
        ([(0, b"x" * 30 + b"\n")] * 5, {"max_body": 100}, client.TooLarge, "the answer is longer than 100 bytes"),
    ],
    ids=["idle", "total", "a long line", "a long body"],
)
def test_a_streamed_answer_is_cut_off_at_its_limits(streamer, chunks, limits, error, message):
    from tests.webhook_endpoint import Reply

    streamer.answer(Reply(chunks=chunks))
    with pytest.raises(error, match=message), _streamed(ssrf.check(streamer.url()), **limits) as answer:
        list(answer.lines(max_line=40))


@pytest.mark.parametrize(
    "raw, error, message",
    [
        (b"", client.Dropped, "the connection was closed before an answer"),
        (b"HELLO\r\n\r\n", client.Broken, "the answer is not valid HTTP"),
    ],
)
def test_a_streamed_post_says_whether_an_answer_had_begun(streamer, raw, error, message):
    from tests.webhook_endpoint import Reply

    streamer.answer(Reply(raw=raw))
    with pytest.raises(error, match=message), _streamed(ssrf.check(streamer.url())):
        pass


def test_a_streamed_post_to_a_closed_port_fails_to_connect(streamer):
    destination = ssrf.check(streamer.url())
    streamer.stop()
    with pytest.raises(client.ConnectFailed, match="the connection was refused"), _streamed(destination):
        pass


def test_backoff_doubles_from_its_base_to_its_cap_with_jitter_and_honours_retry_after_within_its_limit():
    assert [client.backoff(n, base=1.0, cap=5.0, rand=1.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    assert client.backoff(3, base=1.0, rand=0.0) == 2.0  # the jitter halves at most
    assert client.backoff(1, base=1.0, rand=1.0, retry_after=30, retry_after_max=10) == 10
    assert client.backoff(1, base=1.0, rand=1.0, retry_after=0.5, retry_after_max=10) == 1.0
