"""The SSRF guard as an httpx transport, for clients we do not write ourselves (the a2a-sdk's):
whatever URL such a client builds, each request is checked by `outbound.ssrf` before a byte
leaves, and goes to the address that was checked.

- A host is resolved once per transport (one run of an agent, say) and every later request to
  it goes to that address: a name that answers differently a moment later (DNS rebinding)
  cannot move the connection; a refused or unresolvable destination raises `Refused` (an
  `httpx.ConnectError`, so a client treats it as a connection that could not be made).
- The connection goes to the checked address while `Host`, TLS SNI and the certificate check
  keep the name, as `outbound.client` does. Connections are pooled per (name, address): a
  connection verified for one name is never reused for another that shares the address.
- No proxy from the environment; redirects are the client's business, and `guarded_client`
  makes one that follows none (a client that did follow one would bring each hop back here).
- No compressed answer is asked for, and an answer longer than `max_body` bytes (a stream
  counts all its events) is cut off with `TooLarge` (an `httpx.ReadError`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
import httpx

from . import client, ssrf


class Refused(httpx.ConnectError):
    """The guard would not let the request go; the message says why (ssrf's words)."""


class TooLarge(httpx.ReadError):
    """The answer went on past the cap."""


class _Capped(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, *, limit: int, request: httpx.Request) -> None:
        self._inner, self._limit, self._request = inner, limit, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._inner:
            read += len(chunk)
            if read > self._limit:
                raise TooLarge(f"the answer is longer than {self._limit} bytes", request=self._request)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class GuardedTransport(httpx.AsyncBaseTransport):
    def __init__(self, *, max_body: int, limits: httpx.Limits | None = None) -> None:
        self._max_body = max_body
        self._limits = limits or httpx.Limits(max_connections=10, max_keepalive_connections=4)
        self._checked: dict[tuple[str, str, int], ssrf.Destination] = {}
        self._pools: dict[tuple[str, str, int, str], httpx.AsyncHTTPTransport] = {}

    async def _destination(self, request: httpx.Request) -> ssrf.Destination:
        url = request.url
        key = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        found = self._checked.get(key)
        if found is None:
            try:
                # Resolving is blocking I/O: off the event loop, which serves the rest of the run.
                checked = await anyio.to_thread.run_sync(ssrf.check, str(url))
            except (ssrf.Refused, ssrf.Unresolved) as exc:
                raise Refused(str(exc), request=request) from None
            assert checked is not None  # without unresolvable_ok, check returns or raises
            found = self._checked[key] = checked
        return found

    def _pool(self, destination: ssrf.Destination) -> httpx.AsyncHTTPTransport:
        key = (destination.scheme, destination.host, destination.port, str(destination.address))
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = httpx.AsyncHTTPTransport(
                verify=client._tls_context(), trust_env=False, limits=self._limits, retries=0
            )
        return pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        destination = await self._destination(request)
        headers = httpx.Headers(request.headers)
        headers["Accept-Encoding"] = "identity"  # the cap counts bytes on the wire
        extensions: dict[str, Any] = dict(request.extensions)
        if destination.scheme == "https":
            extensions["sni_hostname"] = destination.host
        pinned = httpx.Request(
            request.method,
            request.url.copy_with(host=str(destination.address)),
            headers=headers,  # Host: still the name of the URL
            stream=request.stream,
            extensions=extensions,
        )
        response = await self._pool(destination).handle_async_request(pinned)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Capped(response.stream, limit=self._max_body, request=request),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()


def guarded_client(*, timeout: float, max_body: int, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """An httpx.AsyncClient whose every request passes the guard: no redirect followed, no
    proxy or certificate settings from the environment, at most `max_body` bytes per answer."""
    return httpx.AsyncClient(
        transport=GuardedTransport(max_body=max_body),
        timeout=httpx.Timeout(timeout),
        follow_redirects=False,
        trust_env=False,
        headers=headers,
    )
