"""Is an agent's endpoint alive: one GET of its URL through the address guard.

Any HTTP answer below 500 proves a live server: a JSON-RPC endpoint answers a GET with 405,
a keyed one with 401, a redirect is an answer too (and is not followed). Down is a 5xx, no
answer at all (refused, reset, TLS failure, timeout: `detail` says which) or a host that does
not resolve. A URL the guard refuses is down for good, not for now: `refused` tells the two
apart, so the caller can stop probing it rather than count it as an outage.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from outbound import client, ssrf

from .proofs import no_answer_reason, normalise_host

# Only the status matters; the start of the body is read and dropped.
MAX_BODY = 2048
USER_AGENT = "agentserver-registry (liveness probe)"


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    status: int | None  # None when there was no HTTP answer
    latency_ms: int
    detail: str
    # The address guard forbids the URL (not a public address, not http(s), credentials in
    # it...): a fault of the URL that no retry will mend.
    refused: bool = False


def probe(*, url: str, timeout: float | None = None) -> ProbeResult:
    """GET `url` once (REGISTRY_PROBE_TIMEOUT seconds per connect and per read, unless
    `timeout`); never raises for anything the URL or its server does."""
    seconds = timeout if timeout is not None else float(getattr(settings, "REGISTRY_PROBE_TIMEOUT", 5.0))
    try:
        target = _ascii_url(url)
        destination = ssrf.check(target)
    except ValueError as exc:
        return _refused(f"refused: the URL is not usable: {exc}")
    except ssrf.Refused as exc:
        return _refused(f"refused by the address guard: {exc}")
    except ssrf.Unresolved as exc:
        return ProbeResult(ok=False, status=None, latency_ms=0, detail=f"down: {exc}")
    assert destination is not None  # not unresolvable_ok
    try:
        response = client.get(
            destination, headers={"Accept": "*/*", "User-Agent": USER_AGENT}, timeout=seconds, max_body=MAX_BODY
        )
    except client.SendError as exc:
        return ProbeResult(
            ok=False,
            status=None,
            latency_ms=exc.latency_ms,
            detail=f"down: no answer, {no_answer_reason(str(exc))} ({exc})",
        )
    if response.status >= 500:
        return ProbeResult(
            ok=False,
            status=response.status,
            latency_ms=response.latency_ms,
            detail=f"down: answered {response.status}, a server error",
        )
    return ProbeResult(
        ok=True,
        status=response.status,
        latency_ms=response.latency_ms,
        detail=f"up: answered {response.status} in {response.latency_ms} ms",
    )


def _refused(detail: str) -> ProbeResult:
    return ProbeResult(ok=False, status=None, latency_ms=0, detail=detail, refused=True)


def _ascii_url(url: str) -> str:
    """`url` with its host lower-cased and IDNA-encoded (the Host header and TLS take only
    ASCII), without a fragment; ValueError when it has no valid host. The guard judges the
    rest (scheme, credentials, port, addresses)."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("the URL is empty")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a valid URL ({exc})") from None
    if not parts.hostname:
        raise ValueError(f"{url!r} has no host")
    host = normalise_host(parts.hostname)
    userinfo = parts.netloc.rpartition("@")[0]
    authority = f"[{host}]" if ":" in host else host
    if port is not None:
        authority += f":{port}"
    netloc = f"{userinfo}@{authority}" if userinfo else authority
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
