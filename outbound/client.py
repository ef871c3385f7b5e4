"""One outgoing request (POST or GET) to a checked destination (outbound.ssrf): connect to
the checked address, keep the URL's host for `Host` and TLS (SNI and certificate check),
follow no redirect, ignore proxy settings from the environment, time out, and read at most a
capped body."""

from __future__ import annotations

import ipaddress
import ssl
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import certifi
import httpx

from .ssrf import Destination

_tls: ssl.SSLContext | None = None
_tls_lock = threading.Lock()


def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context per process: loading the CA bundle for every request would
    cost more than the request. (Connections themselves are never shared between requests.)"""
    global _tls
    if _tls is None:
        with _tls_lock:
            if _tls is None:
                _tls = ssl.create_default_context(cafile=certifi.where())
    return _tls


@dataclass(frozen=True)
class Response:
    status: int
    headers: httpx.Headers
    body: bytes  # at most `max_body` bytes of it
    latency_ms: int
    # The answer was longer than `max_body` (or too slow to arrive): `body` is only its start.
    truncated: bool = False


class SendError(Exception):
    """No HTTP answer: connection refused or reset, TLS failure, timeout."""

    def __init__(self, message: str, latency_ms: int) -> None:
        super().__init__(message)
        self.latency_ms = latency_ms


def _authority(host: str, port: int, scheme: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    return shown if port == default else f"{shown}:{port}"


def post(destination: Destination, *, body: bytes, headers: dict[str, str], timeout: float, max_body: int) -> Response:
    return _send("POST", destination, body=body, headers=headers, timeout=timeout, max_body=max_body)


def get(destination: Destination, *, headers: dict[str, str], timeout: float, max_body: int) -> Response:
    return _send("GET", destination, body=None, headers=headers, timeout=timeout, max_body=max_body)


def _send(
    method: str,
    destination: Destination,
    *,
    body: bytes | None,
    headers: dict[str, str],
    timeout: float,
    max_body: int,
) -> Response:
    address = destination.address
    literal = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    url = f"{destination.scheme}://{literal}:{destination.port}{destination.target}"
    # The body is capped as it arrives on the wire: a compressed answer could not be capped
    # before it was inflated, so none is asked for.
    request_headers = {
        "Accept-Encoding": "identity",
        **headers,
        "Host": _authority(destination.host, destination.port, destination.scheme),
    }
    extensions = {"sni_hostname": destination.host} if destination.scheme == "https" else {}
    started = time.monotonic()

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False, verify=_tls_context()) as client:
            request = client.build_request(method, url, content=body, headers=request_headers, extensions=extensions)
            response = client.send(request, stream=True)
            try:
                read = bytearray()
                truncated = False
                for chunk in response.iter_raw():
                    read += chunk[: max_body - len(read)]
                    # A server that drips an endless body gets cut off: the rest is not ours
                    # to read, and closing the response drops the connection.
                    if len(read) >= max_body or time.monotonic() - started > 2 * timeout:
                        truncated = True
                        break
                return Response(response.status_code, response.headers, bytes(read), elapsed(), truncated)
            finally:
                response.close()
    except httpx.HTTPError as exc:
        raise SendError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, elapsed()) from None


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """A Retry-After header (delay-seconds or an HTTP date) as seconds from now, if valid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
