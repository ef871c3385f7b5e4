"""Liveness probes of agents' endpoints (registry/probe.py): one GET through the address
guard; any answer below 500 is a live server. The endpoints are real servers on 127.0.0.1;
nothing here sends traffic off the machine."""

from __future__ import annotations

import socket
import time

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from registry.probe import ProbeResult, probe
from tests.receiver import Answer

HOST = "agents.example.test"


@pytest.fixture
def endpoint(receiver, dns) -> str:
    dns[HOST] = ["127.0.0.1"]
    return receiver.url("/agents/acme/helper/?a=1", host=HOST)


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_port():
    """A port on 127.0.0.1 that accepts connections (the kernel completes the handshake) and
    never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


@pytest.mark.parametrize("status", [200, 204, 302, 401, 404, 405, 429])
def test_an_endpoint_that_answers_below_500_is_up(status, receiver, endpoint):
    # A JSON-RPC endpoint answers GET with 405, a keyed one with 401: both are live servers.
    receiver.answer(Answer(status, {"Location": "https://elsewhere.example.test/"} if status == 302 else {}))
    result = probe(url=endpoint)
    assert (result.ok, result.status, result.refused) == (True, status, False)
    assert result.detail == f"up: answered {status} in {result.latency_ms} ms"
    (request,) = receiver.requests  # a redirect is not followed
    assert request.path == "/agents/acme/helper/?a=1"
    assert request.headers["host"] == f"{HOST}:{receiver.port}"


@pytest.mark.parametrize("status", [500, 502, 503])
def test_an_endpoint_that_answers_a_server_error_is_down(status, receiver, endpoint):
    receiver.answer(Answer(status, body=b"x" * 100_000))
    result = probe(url=endpoint)
    assert (result.ok, result.status, result.refused) == (False, status, False)
    assert result.detail == f"down: answered {status}, a server error"


def test_an_endpoint_that_refuses_the_connection_is_down(dns, closed_port):
    dns[HOST] = ["127.0.0.1"]
    result = probe(url=f"http://{HOST}:{closed_port}/a2a", timeout=2)
    assert (result.ok, result.status, result.refused) == (False, None, False)
    assert result.detail.startswith("down: no answer, connection refused (")


def test_an_endpoint_that_never_answers_times_out(silent_port):
    started = time.monotonic()
    result = probe(url=f"http://127.0.0.1:{silent_port}/a2a", timeout=0.3)
    assert time.monotonic() - started < 3
    assert (result.ok, result.status, result.refused) == (False, None, False)
    assert result.detail.startswith("down: no answer, timed out waiting for the answer (")
    assert result.latency_ms >= 300


def test_the_timeout_setting_bounds_a_probe(silent_port, settings):
    settings.REGISTRY_PROBE_TIMEOUT = 0.2
    result = probe(url=f"http://127.0.0.1:{silent_port}/a2a")
    assert not result.ok and "timed out" in result.detail and 200 <= result.latency_ms < 3000


def test_an_endpoint_whose_tls_fails_is_down(receiver):
    # An https URL on a server that speaks plain HTTP: the TLS handshake fails.
    result = probe(url=receiver.url("/a2a").replace("http://", "https://"), timeout=2)
    assert (result.ok, result.status, result.refused) == (False, None, False)
    assert "TLS failure" in result.detail


def test_a_host_that_does_not_resolve_is_down_not_refused(dns):
    result = probe(url="https://nowhere.example.test/a2a")
    assert (result.ok, result.status, result.refused) == (False, None, False)
    assert result.detail == "down: this address is not allowed: nowhere.example.test"


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://127.0.0.2:{port}/a2a", "not allowed: 127.0.0.2"),
        ("http://[::ffff:127.0.0.3]:{port}/a2a", "not allowed: [::ffff:"),  # the probe writes it as ::ffff:7f00:3
        ("http://bad.example.test:{port}/a2a", "not allowed: bad.example.test"),
        ("ftp://127.0.0.1:{port}/a2a", "http or https"),
        ("http://user:pw@127.0.0.1:{port}/a2a", "credentials"),
    ],
)
def test_an_endpoint_the_guard_forbids_is_flagged_refused(url, why, receiver, dns):
    dns["bad.example.test"] = ["127.0.0.2"]
    result = probe(url=url.format(port=receiver.port))
    assert result == ProbeResult(ok=False, status=None, latency_ms=0, detail=result.detail, refused=True)
    assert result.detail.startswith("refused by the address guard: ") and why in result.detail
    assert receiver.requests == []


@pytest.mark.parametrize("url", ["", "not a url", "https:///a2a", "https://exa mple.test/", "http://[::1/"])
def test_an_endpoint_url_with_no_usable_host_is_flagged_refused(url):
    result = probe(url=url)
    assert (result.ok, result.refused) == (False, True)
    assert result.detail.startswith("refused")


def test_an_internationalised_host_is_asked_for_by_its_ascii_name(receiver, dns):
    dns["xn--bcher-kva.example.test"] = ["127.0.0.1"]
    receiver.answer(Answer(405))
    result = probe(url=f"http://Bücher.example.test:{receiver.port}/a2a#frag")
    assert result.ok and result.status == 405
    (request,) = receiver.requests
    assert request.headers["host"] == f"xn--bcher-kva.example.test:{receiver.port}"
    assert request.path == "/a2a"


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    url=st.one_of(
        st.text(),
        st.builds(
            lambda scheme, host, rest: f"{scheme}://{host}{rest}",
            st.sampled_from(["http", "https", "HTTP", "ftp", ""]),
            st.one_of(
                st.sampled_from(["127.0.0.2", "[::ffff:127.0.0.3]", "[::1]", "10.0.0.1", "bücher.example", "a..b"]),
                st.text(max_size=30),
            ),
            st.text(max_size=30),
        ),
    )
)
def test_any_url_gives_a_result_never_an_exception(url, dns):
    # The fake DNS is empty: no name resolves, and every address but 127.0.0.1 is refused
    # before any connection.
    result = probe(url=url, timeout=0.5)
    assert isinstance(result, ProbeResult)
    assert not result.ok and result.detail
