"""The suite's own harness: what tests/conftest.py changes for every test."""

from __future__ import annotations

import ssl

import httpx


def _context(client: httpx.Client | httpx.AsyncClient) -> ssl.SSLContext:
    return client._transport._pool._ssl_context  # type: ignore[union-attr]


def test_clients_with_the_default_verification_share_one_tls_context():
    three = httpx.AsyncClient()  # built only: no request is made, nothing to close
    with httpx.Client() as one, httpx.Client() as two:
        assert _context(one) is _context(two) is _context(three)
        assert _context(one).verify_mode == ssl.CERT_REQUIRED and _context(one).check_hostname


def test_a_client_with_its_own_verification_gets_a_context_of_its_own():
    with httpx.Client() as default, httpx.Client(verify=False) as unverified:
        assert _context(unverified) is not _context(default)
        assert _context(unverified).verify_mode == ssl.CERT_NONE
    own = ssl.create_default_context()
    with httpx.Client(verify=own) as given:
        assert _context(given) is own
