"""Domain proofs (registry/proofs.py): the token in a well-known file on the card's host, or
in a TXT record under its domain. The files are served by a real HTTP server on 127.0.0.1
(tests/receiver.py) reached through the address guard, the records by a real DNS server on
127.0.0.1 (tests/dns_server.py); nothing here sends traffic, not even a DNS query, off the
machine."""

from __future__ import annotations

import socket
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from registry import proofs
from tests.dns_server import DnsServer
from tests.receiver import Answer

TOKEN = "tok_" + "A" * 39
HOST = "agents.example.test"
TXT_NAME = f"_agentserver-verification.{HOST}"


@pytest.fixture
def dns_server(settings):
    """A loopback nameserver the proofs ask (and nothing else)."""
    server = DnsServer().start()
    settings.REGISTRY_DNS_NAMESERVERS = [server.nameserver]
    yield server
    server.stop()


@pytest.fixture
def card_url(receiver, dns):
    """A card on agents.example.test, which resolves to the receiver on 127.0.0.1."""
    dns[HOST] = ["127.0.0.1"]
    return receiver.url("/agents/acme/helper/.well-known/agent-card.json", host=HOST)


def file_answer(*lines: str) -> Answer:
    return Answer(200, {"Content-Type": "text/plain"}, "\n".join(lines).encode())


# --- tokens, instructions, the domain ---------------------------------------------------


def test_a_new_token_is_random_url_safe_and_long():
    tokens = {proofs.new_token() for _ in range(100)}
    assert len(tokens) == 100
    for token in tokens:
        assert len(token) >= 32
        assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_the_instructions_name_the_file_and_the_record_to_publish():
    steps = proofs.instructions(card_url="https://Agents.Example.com:8443/a/card.json", token=TOKEN)
    assert steps == {
        "domain": "agents.example.com",
        "http_url": "https://agents.example.com:8443/.well-known/agentserver-verification.txt",
        "http_content": f"agentserver-verification={TOKEN}",
        "http_proves": "agents.example.com:8443 only, not the domain agents.example.com",
        "dns_name": "_agentserver-verification.agents.example.com",
        "dns_type": "TXT",
        "dns_value": f"agentserver-verification={TOKEN}",
    }


def test_the_instructions_for_a_card_over_https_on_443_say_nothing_of_a_port():
    steps = proofs.instructions(card_url="https://agents.example.com:443/a/card.json", token=TOKEN)
    assert "http_proves" not in steps and steps["domain"] == "agents.example.com"


@pytest.mark.parametrize(
    ("card_url", "method", "proven"),
    [
        ("https://Agents.Example.com/a/card.json", "http", "agents.example.com"),
        ("https://agents.example.com:443/a", "http", "agents.example.com"),
        ("https://agents.example.com:8443/a", "http", "agents.example.com:8443"),
        ("http://agents.example.com/a", "http", "agents.example.com:80"),
        ("http://agents.example.com:443/a", "http", "agents.example.com:443"),
        ("http://agents.example.com:8080/a", "http", "agents.example.com:8080"),
        ("https://[2001:db8::1]:8443/a", "http", "[2001:db8::1]:8443"),
        ("http://agents.example.com:8080/a", "dns", "agents.example.com"),
        ("https://agents.example.com/a", "hosted", "agents.example.com"),
    ],
)
def test_an_http_proof_proves_the_domain_only_over_https_on_443(card_url, method, proven):
    assert proofs.proven_name(card_url=card_url, method=method) == proven
    assert proofs.covers_domain(card_url=card_url, method=method) is (":" not in proven.rpartition("]")[2])


def test_the_instructions_for_a_card_on_an_ip_address_offer_only_the_file():
    steps = proofs.instructions(card_url="http://[2001:DB8::7]/card.json", token=TOKEN)
    assert steps["http_url"] == "http://[2001:db8::7]/.well-known/agentserver-verification.txt"
    assert "dns_name" not in steps
    assert "IP address" in steps["dns_unavailable"] and "http method" in steps["dns_unavailable"]


@pytest.mark.parametrize(
    "card_url, domain",
    [
        ("https://Agents.EXAMPLE.com/card.json", "agents.example.com"),
        ("https://agents.example.com./card.json", "agents.example.com"),
        ("https://user:pw@agents.example.com:8443/x?y#z", "agents.example.com"),
        ("https://Bücher.example/card", "xn--bcher-kva.example"),
        ("https://ＥXAMPLE.com/card", "example.com"),  # full-width letters map to ASCII (UTS 46)
        ("https://xn--bcher-kva.example/card", "xn--bcher-kva.example"),
        ("https://_agents.example.com/card", "_agents.example.com"),
        ("http://203.0.113.9:8080/card", "203.0.113.9"),
        ("http://[2001:DB8:0::1]/card", "2001:db8::1"),
    ],
)
def test_the_domain_of_a_card_is_its_host_lower_cased_and_idna_encoded(card_url, domain):
    assert proofs.domain_of(card_url) == domain


@pytest.mark.parametrize(
    "card_url",
    [
        "",
        "not a url",
        "https:///card.json",
        "https://exa mple.com/",
        "https://a..b/",
        "http://[::1/",
        "https://%41.com/",
    ],
)
def test_a_card_url_without_a_usable_host_has_no_domain(card_url):
    with pytest.raises(ValueError):
        proofs.domain_of(card_url)


def test_a_token_the_registry_did_not_make_or_an_unknown_method_is_the_callers_mistake():
    with pytest.raises(ValueError, match="token"):
        proofs.check_http(card_url="https://a.example/", token="")
    with pytest.raises(ValueError, match="token"):
        proofs.check_dns(card_url="https://a.example/", token="short\nline")
    with pytest.raises(ValueError, match="method"):
        proofs.check(card_url="https://a.example/", token=TOKEN, method="smtp")  # type: ignore[arg-type]


# --- http: the well-known file -----------------------------------------------------------


def test_a_token_served_at_the_well_known_path_over_http_on_a_port_proves_that_host_and_port_only(receiver, card_url):
    receiver.answer(file_answer("\ufeffsomeone-else=1", f"  agentserver-verification={TOKEN}  ", ""))
    result = proofs.check_http(card_url=card_url, token=TOKEN)
    assert result == proofs.ProofResult(
        ok=True,
        method="http",
        detail=f"found the token at http://{HOST}:{receiver.port}/.well-known/agentserver-verification.txt: "
        f"{HOST}:{receiver.port} is proven, not the domain "
        "(only https on port 443, or a DNS record, proves the domain)",
    )
    (request,) = receiver.requests
    assert request.path == "/.well-known/agentserver-verification.txt"
    assert request.headers["host"] == f"{HOST}:{receiver.port}"  # the card's host and port


def test_check_proves_by_the_method_it_is_given(receiver, card_url):
    receiver.answer(file_answer(f"agentserver-verification={TOKEN}"))
    assert proofs.check(card_url=card_url, token=TOKEN, method="http").ok


def test_a_file_holding_another_token_proves_nothing(receiver, card_url):
    receiver.answer(file_answer("agentserver-verification=" + "B" * 43))
    result = proofs.check_http(card_url=card_url, token=TOKEN)
    assert not result.ok
    assert f"does not hold the line agentserver-verification={TOKEN}" in result.detail
    assert "another token" in result.detail


def test_a_token_that_is_only_part_of_a_line_proves_nothing(receiver, card_url):
    receiver.answer(
        file_answer(f"agentserver-verification={TOKEN}X"), file_answer(f"# agentserver-verification={TOKEN}")
    )
    assert not proofs.check_http(card_url=card_url, token=TOKEN).ok
    assert not proofs.check_http(card_url=card_url, token=TOKEN).ok


def test_a_missing_file_fails_with_the_status_it_answered(receiver, card_url):
    receiver.answer(Answer(404, body=f"agentserver-verification={TOKEN}".encode()))
    result = proofs.check_http(card_url=card_url, token=TOKEN)
    assert not result.ok
    assert result.detail == (
        f"the file at http://{HOST}:{receiver.port}/.well-known/agentserver-verification.txt answered 404"
    )


def test_a_redirect_is_not_followed_and_proves_nothing(receiver, card_url):
    elsewhere = receiver.url("/token.txt", host=HOST)
    receiver.answer(Answer(301, {"Location": elsewhere}), file_answer(f"agentserver-verification={TOKEN}"))
    result = proofs.check_http(card_url=card_url, token=TOKEN)
    assert not result.ok
    assert f"answered 301, a redirect to {elsewhere}, which is not followed" in result.detail
    assert [r.path for r in receiver.requests] == ["/.well-known/agentserver-verification.txt"]


def test_a_huge_file_is_read_only_as_far_as_the_cap(receiver, card_url):
    huge = b"x" * (8 * 1024 * 1024)
    receiver.answer(Answer(200, body=huge + f"\nagentserver-verification={TOKEN}\n".encode()))
    started = time.monotonic()
    result = proofs.check_http(card_url=card_url, token=TOKEN)
    assert not result.ok
    assert "within its first 4096 bytes" in result.detail
    assert time.monotonic() - started < 5
    # The token in the first bytes of a long file counts; a line cut short by the cap does not.
    receiver.answer(Answer(200, body=f"agentserver-verification={TOKEN}\n".encode() + huge))
    assert proofs.check_http(card_url=card_url, token=TOKEN).ok
    cut = b"x" * (4096 - len(f"agentserver-verification={TOKEN}") - 1) + b"\n"
    receiver.answer(Answer(200, body=cut + f"agentserver-verification={TOKEN}XYZ".encode()))
    assert not proofs.check_http(card_url=card_url, token=TOKEN).ok


@pytest.mark.parametrize(
    "card_url",
    ["http://127.0.0.2:{port}/card.json", "http://[::ffff:127.0.0.3]:{port}/card.json", "http://bad.example.test/c"],
)
def test_a_card_on_a_refused_address_is_refused_by_the_guard(card_url, receiver, dns):
    dns["bad.example.test"] = ["127.0.0.2"]
    result = proofs.check_http(card_url=card_url.format(port=receiver.port), token=TOKEN)
    assert not result.ok
    assert result.detail.startswith("refused by the address guard: this address is not allowed: ")
    assert "loopback" not in result.detail and "resolves" not in result.detail
    assert receiver.requests == []


def test_a_card_url_that_is_not_http_is_refused_by_the_guard(card_url):
    result = proofs.check_http(card_url=card_url.replace("http://", "ftp://"), token=TOKEN)
    assert not result.ok and "refused by the address guard" in result.detail and "http or https" in result.detail


def test_a_host_that_does_not_resolve_proves_nothing(dns):
    result = proofs.check_http(card_url="https://nowhere.example.test/card.json", token=TOKEN)
    assert not result.ok
    assert "could not reach https://nowhere.example.test/.well-known/agentserver-verification.txt" in result.detail
    assert dns.lookups == ["nowhere.example.test"]


def test_a_host_that_does_not_answer_fails_with_the_reason(dns):
    dns[HOST] = ["127.0.0.1"]
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    result = proofs.check_http(card_url=f"http://{HOST}:{port}/card.json", token=TOKEN, timeout=2)
    assert not result.ok
    assert result.detail.startswith(f"no answer from http://{HOST}:{port}/.well-known/")
    assert "connection refused" in result.detail


# --- dns: the TXT record ------------------------------------------------------------------


def test_a_txt_record_holding_the_token_proves_the_domain(dns_server):
    # Long TXT values are published as several strings of one record; they are read joined.
    line = f"agentserver-verification={TOKEN}"
    dns_server.records[TXT_NAME] = ["v=spf1 -all", (line[:10], line[10:30], line[30:])]
    result = proofs.check_dns(card_url=f"https://{HOST}/card.json", token=TOKEN)
    assert result == proofs.ProofResult(ok=True, method="dns", detail=f"found the token in a TXT record at {TXT_NAME}")
    assert dns_server.questions == [(TXT_NAME, "TXT", "udp")]
    assert proofs.check(card_url=f"https://{HOST}/card.json", token=TOKEN, method="dns").ok


def test_the_record_is_asked_for_under_the_idna_name_of_the_domain(dns_server):
    dns_server.records["_agentserver-verification.xn--bcher-kva.example"] = [f"agentserver-verification={TOKEN}"]
    assert proofs.check_dns(card_url="https://BÜCHER.example/card.json", token=TOKEN).ok


def test_txt_records_too_long_for_a_datagram_are_read_over_tcp(dns_server):
    filler = [f"filler-{i}-" + "z" * 200 for i in range(20)]
    dns_server.records[TXT_NAME] = [*filler, f"agentserver-verification={TOKEN}"]
    assert proofs.check_dns(card_url=f"https://{HOST}/", token=TOKEN).ok
    assert [transport for _, _, transport in dns_server.questions] == ["udp", "tcp"]


def test_a_txt_record_holding_another_token_proves_nothing(dns_server):
    dns_server.records[TXT_NAME] = ["agentserver-verification=" + "B" * 43, f"agentserver-verification={TOKEN} extra"]
    result = proofs.check_dns(card_url=f"https://{HOST}/", token=TOKEN)
    assert not result.ok
    assert result.detail.startswith(f"the TXT records at {TXT_NAME} do not hold this token (2 found;")
    assert "another token" in result.detail


def test_a_name_that_does_not_exist_proves_nothing(dns_server):
    result = proofs.check_dns(card_url=f"https://{HOST}/", token=TOKEN)
    assert not result.ok
    assert result.detail == f"no TXT record at {TXT_NAME}: the name does not exist"


def test_a_name_without_txt_records_proves_nothing(dns_server):
    dns_server.records[TXT_NAME] = []
    result = proofs.check_dns(card_url=f"https://{HOST}/", token=TOKEN)
    assert not result.ok
    assert result.detail == f"no TXT record at {TXT_NAME}: the name exists but holds no TXT record"


def test_a_nameserver_that_does_not_answer_times_out(dns_server):
    dns_server.silent = True
    started = time.monotonic()
    result = proofs.check_dns(card_url=f"https://{HOST}/", token=TOKEN, timeout=0.3)
    assert time.monotonic() - started < 3
    assert not result.ok
    assert result.detail == f"no nameserver answered within 0.3 s when asked for the TXT records at {TXT_NAME}"
    assert dns_server.questions  # it was asked


def test_the_timeout_setting_bounds_a_lookup(dns_server, settings):
    dns_server.silent = True
    settings.REGISTRY_PROOF_TIMEOUT = 0.2
    result = proofs.check(card_url=f"https://{HOST}/", token=TOKEN, method="dns")
    assert not result.ok and "within 0.2 s" in result.detail


def test_a_failing_nameserver_is_reported(dns_server):
    dns_server.failing = True
    result = proofs.check_dns(card_url=f"https://{HOST}/", token=TOKEN)
    assert not result.ok
    assert result.detail.startswith(f"no nameserver could answer for the TXT records at {TXT_NAME}")
    assert "SERVFAIL" in result.detail


@pytest.mark.parametrize("card_url", ["http://203.0.113.9/card.json", "https://[2001:db8::1]:8443/card.json"])
def test_a_card_on_an_ip_address_cannot_be_proven_by_dns(card_url, dns_server):
    result = proofs.check_dns(card_url=card_url, token=TOKEN)
    assert not result.ok
    assert "is an IP address" in result.detail and "only the http method" in result.detail
    assert dns_server.questions == []


def test_a_card_url_without_a_host_proves_nothing_by_either_method(dns_server):
    for method in ("http", "dns"):
        result = proofs.check(card_url="https:///card.json", token=TOKEN, method=method)  # type: ignore[arg-type]
        assert not result.ok and result.detail.startswith("the card URL is not usable: ")


def test_the_tests_ask_no_nameserver_but_a_loopback_one(settings):
    # Tests must never send a DNS query off the machine (agentserver/test_settings.py).
    assert settings.REGISTRY_DNS_NAMESERVERS == ["127.0.0.1:9"]
    (nameserver,) = proofs.resolver(timeout=1).nameservers
    assert (nameserver.address, nameserver.port) == ("127.0.0.1", 9)
    # Nothing answers there: a lookup a test forgot to point at its own server fails cleanly.
    result = proofs.check_dns(card_url=f"https://{HOST}/", token=TOKEN, timeout=0.5)
    assert not result.ok and TXT_NAME in result.detail


@pytest.mark.parametrize(
    "value, address, port",
    [("192.0.2.53", "192.0.2.53", 53), ("192.0.2.53:5353", "192.0.2.53", 5353), ("2001:db8::53", "2001:db8::53", 53)]
    + [("[2001:db8::53]:5353", "2001:db8::53", 5353), ("[2001:db8::53]", "2001:db8::53", 53)],
)
def test_a_nameserver_is_an_address_with_an_optional_port(value, address, port):
    nameserver = proofs.nameserver(value)
    assert (nameserver.address, nameserver.port) == (address, port)


@pytest.mark.parametrize(
    "value", ["dns.example.com", "192.0.2.53:dns", "192.0.2.53:0", "[2001:db8::53]x", "1.2.3.4:99999"]
)
def test_a_nameserver_setting_that_is_no_address_is_a_configuration_error(value):
    with pytest.raises(ImproperlyConfigured, match="REGISTRY_DNS_NAMESERVERS"):
        proofs.nameserver(value)


# --- anything as the card URL -------------------------------------------------------------


@st.composite
def card_urls(draw) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTPS", "ftp", "", "javascript"]))
    host = draw(
        st.one_of(
            st.sampled_from(
                ["127.0.0.2", "[::ffff:127.0.0.3]", "[::1]", "[fe80::1%25eth0]", "10.0.0.1", "2130706434"]
                + ["agents.example.test", "bücher.example", "例え.テスト", "", "a..b", "-x-", "%41", "x" * 300, "a.b."]
            ),
            st.text(max_size=30),
        )
    )
    port = draw(st.one_of(st.just(""), st.integers(-5, 70000).map(lambda p: f":{p}"), st.text(max_size=6)))
    userinfo = draw(st.sampled_from(["", "user@", "u:p@", "@"]))
    path = draw(st.text(max_size=20))
    return f"{scheme}://{userinfo}{host}{port}/{path}"


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(card_url=st.one_of(st.text(), card_urls()))
def test_any_card_url_gives_a_result_never_an_exception(card_url, dns_server, dns):
    # No name resolves for the guard (the fake DNS is empty), and the nameserver knows none:
    # every address but 127.0.0.1 is refused before any connection.
    for result in (
        proofs.check_http(card_url=card_url, token=TOKEN, timeout=0.5),
        proofs.check_dns(card_url=card_url, token=TOKEN, timeout=0.5),
    ):
        assert isinstance(result, proofs.ProofResult)
        assert not result.ok and result.detail
