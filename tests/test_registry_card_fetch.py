"""Fetching a card from the address a submitter gave: through the SSRF guard, from a real
server on loopback (a FakeDns name resolves to 127.0.0.1, the one address test settings
allow); capped, strict, no redirect followed."""

from __future__ import annotations

import json
import socket

import pytest

from registry.cards import FetchFailed, detect_version, fetch_card, normalise, validate
from tests.card_examples import a2a_0_1, a2a_1_0, acs
from tests.card_server import CardServer

HOST = "agents.example.test"
CARD = "/.well-known/agent-card.json"
LEGACY = "/.well-known/agent.json"
ACS = "/.well-known/acs.json"


@pytest.fixture
def server(dns):
    dns[HOST] = ["127.0.0.1"]
    running = CardServer().start()
    yield running
    running.stop()


def failure(url: str, **kwargs) -> str:
    with pytest.raises(FetchFailed) as failed:
        fetch_card(url, **kwargs)
    return str(failed.value)


def test_a_card_at_agent_card_json_is_found_with_its_bytes_and_etag(server):
    body = json.dumps(a2a_1_0(), indent=2).encode()
    server.serve(CARD, body, ETag='"v7"')
    fetched = fetch_card(server.url("/", host=HOST))
    assert fetched.url == server.url(CARD, host=HOST)
    assert fetched.body == body and fetched.document == a2a_1_0()
    assert fetched.etag == '"v7"' and fetched.status == 200 and fetched.latency_ms >= 0
    assert server.paths() == [CARD]
    (seen,) = server.requests
    assert seen.headers["host"] == f"{HOST}:{server.port}" and seen.headers["accept"] == "application/json"
    version = detect_version(fetched.document, fetched_from=fetched.url)
    assert version == "1.0" and validate(fetched.document, version) == []
    assert normalise(fetched.document, version).name == "Route Planner"


def test_an_agent_hosted_under_a_path_is_found_there(server):
    server.serve("/agents/acme/planner" + CARD, a2a_1_0())
    server.serve(CARD, {"name": "the host's own card"})
    fetched = fetch_card(server.url("/agents/acme/planner/", host=HOST))
    assert fetched.document == a2a_1_0()
    assert server.paths() == ["/agents/acme/planner" + CARD]


def test_a_0_1_agent_is_found_at_agent_json_after_agent_card_json_is_missing(server):
    card = a2a_0_1()
    del card["authentication"]
    server.serve(LEGACY, card)
    fetched = fetch_card(server.url("/", host=HOST))
    assert fetched.url.endswith(LEGACY) and server.paths() == [CARD, LEGACY]
    assert detect_version(fetched.document, fetched_from=fetched.url) == "0.1"


def test_an_acs_document_is_found_last_and_a_410_moves_on_too(server):
    server.serve(LEGACY, b"gone", status=410)
    server.serve(ACS, acs())
    fetched = fetch_card(server.url("", host=HOST))
    assert fetched.url.endswith(ACS) and server.paths() == [CARD, LEGACY, ACS]
    assert detect_version(fetched.document) == "acs"


def test_a_url_naming_the_card_is_fetched_alone(server):
    server.serve("/cards/planner.json", a2a_1_0())
    assert fetch_card(server.url("/cards/planner.json", host=HOST)).document == a2a_1_0()
    assert server.paths() == ["/cards/planner.json"]


def test_no_card_anywhere_says_where_it_looked(server):
    said = failure(server.url("/", host=HOST))
    assert said.startswith("no agent card was found at ")
    for path in (CARD, LEGACY, ACS):
        assert f"{server.url(path, host=HOST)} (HTTP 404)" in said


def test_another_error_stops_the_search(server):
    server.serve(CARD, b"oops", status=500)
    server.serve(LEGACY, a2a_0_1())
    assert failure(server.url("/", host=HOST)) == f"{server.url(CARD, host=HOST)} answered HTTP 500 instead of the card"
    assert server.paths() == [CARD]


def test_a_redirect_is_not_followed(server):
    server.serve(CARD, b"", status=302, Location=server.url("/elsewhere.json", host=HOST))
    server.serve("/elsewhere.json", a2a_1_0())
    said = failure(server.url("/", host=HOST))
    assert "answered with a redirect (HTTP 302 to " in said and "not followed" in said
    assert server.paths() == [CARD]


def test_a_card_larger_than_the_cap_is_refused(server, settings):
    settings.REGISTRY_CARD_MAX_BYTES = 2000
    card = a2a_1_0()
    card["description"] = "x" * 5000
    server.serve(CARD, card)
    assert failure(server.url("/", host=HOST)) == f"the card at {server.url(CARD, host=HOST)} is larger than 2000 bytes"


def test_a_card_of_exactly_the_cap_is_read(server, settings):
    body = json.dumps(a2a_1_0()).encode()
    settings.REGISTRY_CARD_MAX_BYTES = len(body)
    server.serve(CARD, body)
    assert fetch_card(server.url("/", host=HOST)).body == body


def test_an_endless_card_is_cut_off_at_the_cap(server, settings):
    settings.REGISTRY_CARD_MAX_BYTES = 10_000
    server.serve(CARD, b"[" + b"1," * 5_000_000 + b"1]")
    assert "is larger than 10000 bytes" in failure(server.url("/", host=HOST))


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<html>Welcome</html>", "is not JSON: Expecting value at line 1 column 1"),
        (b"", "is not JSON"),
        (b'{"name": "caf\xe9"}', "is not JSON: the body is not UTF-8 (byte 13 is 0xe9)"),
        (b'{"name": NaN}', "is not JSON: NaN is not a JSON value"),
        (b'{"name": Infinity}', "is not JSON"),
        (b'{"name": "a", "name": "b"}', "was refused: the card.name is given more than once"),
        (b'{"name": "a\\u0000"}', "was refused: the card.name contains U+0000"),
        (b"[" * 5000 + b"]" * 5000, "nests deeper than 64 levels"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nests deeper than 64 levels"),
        (b"[1, 2]", "is not a JSON object but a list"),
        (b'"card"', "is not a JSON object but a string"),
    ],
)
def test_a_body_that_is_not_a_clean_json_object_is_refused(server, settings, body, says):
    settings.REGISTRY_CARD_MAX_BYTES = 1_000_000
    server.serve(CARD, body)
    said = failure(server.url("/", host=HOST))
    assert said.startswith(f"the card at {server.url(CARD, host=HOST)} ")
    assert says in said, said


def test_a_byte_order_mark_is_tolerated_and_kept_in_the_bytes(server):
    body = b"\xef\xbb\xbf" + json.dumps(a2a_1_0()).encode()
    server.serve(CARD, body)
    fetched = fetch_card(server.url("/", host=HOST))
    assert fetched.body == body and fetched.document == a2a_1_0()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.2:{port}/", "this address is not allowed: 127.0.0.2"),
        ("http://[::ffff:127.0.0.3]:{port}/", "this address is not allowed: [::ffff:127.0.0.3]"),
        ("http://sneaky.example.test:{port}/", "this address is not allowed: sneaky.example.test"),
        ("http://mixed.example.test:{port}/", "this address is not allowed: mixed.example.test"),
        ("ftp://agents.example.test/", "must use http or https"),
        ("http://user:pw@agents.example.test:{port}/", "must not carry credentials"),
        # A name that does not resolve reads as one that resolves to a refused address.
        ("http://unknown.example.test/", "this address is not allowed: unknown.example.test"),
    ],
)
def test_an_address_the_guard_refuses_is_never_contacted(server, dns, url, says):
    dns["sneaky.example.test"] = ["127.0.0.2"]
    dns["mixed.example.test"] = ["127.0.0.1", "127.0.0.2"]  # every address must pass
    said = failure(url.format(port=server.port))
    assert says in said, said
    assert "resolve" not in said and "loopback" not in said, said
    assert server.requests == []


def test_a_server_that_does_not_answer_in_time_is_no_answer(dns):
    dns[HOST] = ["127.0.0.1"]
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # connections are accepted by the kernel, never answered
    try:
        said = failure(f"http://{HOST}:{silent.getsockname()[1]}/", timeout=0.3)
    finally:
        silent.close()
    assert "did not answer (ReadTimeout" in said


def test_a_closed_port_is_no_answer(dns):
    dns[HOST] = ["127.0.0.1"]
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    assert "did not answer (ConnectError" in failure(f"http://{HOST}:{port}/", timeout=2)
