"""One outgoing request (POST or GET) to a checked destination (outbound.ssrf): connect to
the checked address, keep the URL's host for `Host` and TLS (SNI and certificate check),
follow no redirect, ignore proxy settings from the environment, time out, and read at most a
capped body. `post_streamed` does the same for an answer read as it arrives (a webhook agent's
actions), line by line, under a total deadline and an idle timeout."""

from __future__ import annotations

import ipaddress
import math
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import certifi
import h11
import httpcore
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

    deadline = started + 2 * timeout
    http = httpx.HTTPTransport(verify=_tls_context(), trust_env=False, retries=0)
    # httpcore's pool makes this request's one connection on the backend it holds; its public
    # constructor takes one, httpx's transport does not pass it through.
    http._pool._network_backend = _Deadline(deadline)
    try:
        with httpx.Client(transport=http, timeout=timeout, follow_redirects=False, trust_env=False) as client:
            request = client.build_request(method, url, content=body, headers=request_headers, extensions=extensions)
            response = client.send(request, stream=True)
            try:
                read = bytearray()
                truncated = False
                try:
                    for chunk in response.iter_raw():
                        read += chunk[: max_body - len(read)]
                        if len(read) >= max_body:
                            truncated = True
                            break
                except httpx.TimeoutException:
                    # A body that drips past the deadline is cut off: the answer stands with
                    # the start that came, and closing the response drops the connection.
                    truncated = True
                return Response(response.status_code, response.headers, bytes(read), elapsed(), truncated)
            finally:
                response.close()
    except httpx.HTTPError as exc:
        raise SendError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, elapsed()) from None


# --- one deadline for every wait of a request --------------------------------------------
#
# httpx's timeouts bound each wait (connect, one read, one write), not the request: a server
# that sends its answer's head one byte per second never lets a read time out, and held a
# push delivery for as long as its head was long. Each wait here ends by the request's
# deadline too, as httpcore's own timeout (ConnectTimeout, ReadTimeout, WriteTimeout), so
# callers see the errors they know.


def _until(deadline: float, timeout: float | None, late: type[Exception]) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise late("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self._inner, self._deadline = inner, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _until(self._deadline, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _until(self._deadline, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        wait = _until(self._deadline, timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, wait), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Deadline(httpcore.NetworkBackend):
    def __init__(self, deadline: float) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        wait = _until(self._deadline, timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, wait, local_address, socket_options)
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise NotImplementedError("outbound requests go to checked TCP addresses only")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def backoff(
    failures: int,
    *,
    base: float,
    cap: float = math.inf,
    retry_after: float | None = None,
    retry_after_max: float = 0.0,
    rand: float | None = None,
) -> float:
    """Seconds to wait after `failures` failed attempts: exponential from `base`, at most `cap`,
    with jitter (so receivers coming back up are not hit by every sender at once), and at
    least what the other side asked for in Retry-After, within `retry_after_max`."""
    delay = min(cap, base * 2 ** max(0, failures - 1))
    delay *= 0.5 + (random.random() if rand is None else rand) / 2
    if retry_after is not None:
        delay = max(delay, min(retry_after, retry_after_max))
    return delay


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


# --- a streamed POST ------------------------------------------------------------------------
#
# A webhook agent answers with a stream of actions that must be applied as each line arrives,
# under a total deadline, an idle timeout that every wait obeys (connect, TLS, the answer's
# head, each read) and a check the caller makes while nothing arrives (a canceled task). httpx
# gives one read timeout per request, fatal when it fires, so this drives h11 (the HTTP/1.1
# state machine httpx runs on) over a socket of its own: each read waits exactly as long as the
# nearest of those limits. The guard's rules are the same as `_send`'s: the checked address,
# the URL's name for Host and TLS, no redirect, no proxy, no compression.

_READ_SIZE = 65536


class ConnectFailed(SendError):
    """No connection could be made (refused, unreachable, not accepted in time): nothing was
    sent, so trying again is safe."""


class TlsFailed(SendError):
    """The TLS handshake failed (certificate, protocol): trying again would fail alike."""


class Dropped(SendError):
    """The connection ended before the answer's status line: the request may or may not have
    been seen."""


class TimedOut(SendError):
    """A limit ran out: `which` is "idle" (nothing arrived for `idle_timeout`) or "total"
    (`timeout` passed); `answered` whether the answer's head had arrived."""

    def __init__(self, message: str, latency_ms: int, *, which: str, answered: bool) -> None:
        super().__init__(message, latency_ms)
        self.which = which
        self.answered = answered


class TooLarge(SendError):
    """The answer's body, or one line of it, is longer than allowed."""

    def __init__(self, message: str, latency_ms: int, *, limit: int, line: bool) -> None:
        super().__init__(message, latency_ms)
        self.limit = limit
        self.line = line


class Broken(SendError):
    """The answer broke HTTP, or its connection ended (or was reset) before its body did."""


def _describe_os_error(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "the connection was refused"
    if isinstance(exc, ConnectionResetError):
        return "the connection was reset"
    return exc.strerror or type(exc).__name__


def _ssl_reason(exc: ssl.SSLError) -> str:
    """OpenSSL's reason code in words (WRONG_VERSION_NUMBER: "wrong version number")."""
    return exc.reason.replace("_", " ").lower() if exc.reason else str(exc)


class Streamed:
    """An answer being read: `status` and `headers` at once, then its body through `lines()`
    or `read()` as it arrives. Made by `post_streamed`, which closes it."""

    def __init__(
        self,
        destination: Destination,
        *,
        timeout: float,
        idle_timeout: float,
        max_body: int,
        while_waiting: Callable[[], None] | None,
        wait_check_every: float,
    ) -> None:
        self._destination = destination
        self._started = time.monotonic()
        self._deadline = self._started + timeout
        self._timeout = timeout
        self._idle_timeout = idle_timeout
        self._last_byte = self._started
        self._max_body = max_body
        self._while_waiting = while_waiting
        self._wait_check_every = wait_check_every
        self._last_check = self._started
        self._socket: socket.socket | None = None
        self._http = h11.Connection(h11.CLIENT)
        self._answered = False
        self._bytes_in = 0
        self._body_read = 0
        self._ended = False
        self.status = 0
        self.headers = httpx.Headers()

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    # --- the request ---

    def _wait_left(self) -> float:
        """Seconds the next wait may last: up to the nearest of the deadline, the idle
        timeout, and the caller's next check."""
        now = time.monotonic()
        until = min(self._deadline, self._last_byte + self._idle_timeout)
        if self._while_waiting is not None:
            until = min(until, self._last_check + self._wait_check_every)
        return max(until - now, 0.001)

    def _timed_out(self) -> TimedOut | None:
        now = time.monotonic()
        if now >= self._deadline:
            return TimedOut(
                f"no complete answer within {self._timeout:g} s",
                self.elapsed_ms(),
                which="total",
                answered=self._answered,
            )
        if now >= self._last_byte + self._idle_timeout:
            waiting = "the answer's body" if self._answered else "an answer"
            return TimedOut(
                f"nothing arrived for {self._idle_timeout:g} s while waiting for {waiting}",
                self.elapsed_ms(),
                which="idle",
                answered=self._answered,
            )
        return None

    def _checkpoint(self) -> None:
        """A wait ended with nothing: a limit, or the caller's turn to look (which may raise)."""
        timed_out = self._timed_out()
        if timed_out is not None:
            raise timed_out
        if self._while_waiting is not None and time.monotonic() >= self._last_check + self._wait_check_every:
            self._last_check = time.monotonic()
            self._while_waiting()

    def open(self, *, body: bytes, headers: dict[str, str]) -> None:
        destination = self._destination
        # Connecting is short or hopeless: it waits for the idle timeout (or what is left of
        # the total) without stopping for the caller's checks.
        wait = max(min(self._idle_timeout, self._deadline - time.monotonic()), 0.001)
        try:
            connected = socket.create_connection((str(destination.address), destination.port), timeout=wait)
        except TimeoutError:
            raise ConnectFailed(f"the connection was not accepted within {wait:g} s", self.elapsed_ms()) from None
        except OSError as exc:
            raise ConnectFailed(_describe_os_error(exc), self.elapsed_ms()) from None
        self._socket = connected
        if destination.scheme == "https":
            connected.settimeout(wait)
            try:
                self._socket = _tls_context().wrap_socket(connected, server_hostname=destination.host)
            except ssl.SSLCertVerificationError as exc:
                raise TlsFailed(f"TLS: {exc.verify_message or exc.reason}", self.elapsed_ms()) from None
            except ssl.SSLError as exc:
                raise TlsFailed(f"TLS: {_ssl_reason(exc)}", self.elapsed_ms()) from None
            except TimeoutError:
                raise ConnectFailed("the TLS handshake did not finish in time", self.elapsed_ms()) from None
            except OSError as exc:
                raise ConnectFailed(f"during the TLS handshake, {_describe_os_error(exc)}", self.elapsed_ms()) from None
        request_headers = {
            "Accept-Encoding": "identity",
            **headers,
            "Host": _authority(destination.host, destination.port, destination.scheme),
            "Content-Length": str(len(body)),
            "Connection": "close",
        }
        try:
            wire = self._http.send(
                h11.Request(method="POST", target=destination.target, headers=list(request_headers.items()))
            )
            wire = (
                (wire or b"")
                + (self._http.send(h11.Data(data=body)) or b"")
                + (self._http.send(h11.EndOfMessage()) or b"")
            )
        except h11.LocalProtocolError as exc:
            raise SendError(f"the request cannot be sent: {exc}", self.elapsed_ms()) from None
        self._send_all(wire)
        self._last_byte = time.monotonic()  # the idle timeout counts from the request's end
        self._read_head()

    def _send_all(self, data: bytes) -> None:
        assert self._socket is not None
        view = memoryview(data)
        while view:
            self._socket.settimeout(self._wait_left())
            try:
                sent = self._socket.send(view)
            except TimeoutError:
                self._checkpoint()
                continue
            except OSError as exc:
                raise Dropped(f"while sending the request, {_describe_os_error(exc)}", self.elapsed_ms()) from None
            view = view[sent:]

    # --- the answer ---

    def _receive(self) -> bool:
        """Feed h11 what the socket has: False when a wait ended with nothing (after the
        checkpoint, which raises if a limit ran out)."""
        assert self._socket is not None
        self._socket.settimeout(self._wait_left())
        try:
            data = self._socket.recv(_READ_SIZE)
        except TimeoutError:
            self._checkpoint()
            return False
        except ssl.SSLError as exc:
            raise Broken(f"TLS: {_ssl_reason(exc)}", self.elapsed_ms()) from None
        except OSError as exc:
            if not self._answered:
                raise Dropped(f"before an answer, {_describe_os_error(exc)}", self.elapsed_ms()) from None
            raise Broken(f"{_describe_os_error(exc)} before the answer ended", self.elapsed_ms()) from None
        if data:
            self._last_byte = time.monotonic()
            self._bytes_in += len(data)
        self._http.receive_data(data)
        return True

    def _next_event(self) -> Any:
        try:
            return self._http.next_event()
        except h11.RemoteProtocolError as exc:
            if not self._answered and not self._bytes_in:
                raise Dropped("the connection was closed before an answer", self.elapsed_ms()) from None
            if self._answered and "peer closed connection" in str(exc):
                raise Broken("the connection was closed before the answer ended", self.elapsed_ms()) from None
            # h11 quotes what it could not parse, up to a whole head: a line of it says enough.
            said = str(exc) if len(str(exc)) <= 200 else str(exc)[:199] + "…"
            raise Broken(f"the answer is not valid HTTP: {said}", self.elapsed_ms()) from None

    def _read_head(self) -> None:
        while True:
            event = self._next_event()
            if event is h11.NEED_DATA:
                self._receive()
                continue
            if isinstance(event, h11.Response):
                self._answered = True
                self.status = event.status_code
                self.headers = httpx.Headers(list(event.headers))
                return
            if isinstance(event, h11.ConnectionClosed):
                raise Dropped("the connection was closed before an answer", self.elapsed_ms())
            # an informational answer (1xx): the real one follows

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives; TooLarge past `max_body`."""
        while not self._ended:
            event = self._next_event()
            if event is h11.NEED_DATA:
                self._receive()
            elif isinstance(event, h11.Data):
                self._body_read += len(event.data)
                if self._body_read > self._max_body:
                    raise TooLarge(
                        f"the answer is longer than {self._max_body} bytes",
                        self.elapsed_ms(),
                        limit=self._max_body,
                        line=False,
                    )
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                self._ended = True

    def lines(self, *, max_line: int) -> Iterator[bytes]:
        """Each line of the body as soon as its end arrives (without its `\\n` or `\\r\\n`), and
        the last one at the body's end even without one; TooLarge for a line over `max_line`."""
        pending = bytearray()
        for chunk in self.chunks():
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                pending += chunk[start:end]
                if len(pending) > max_line:
                    break
                yield bytes(pending.removesuffix(b"\r"))
                pending.clear()
                start = end + 1
            else:
                pending += chunk[start:]
            if len(pending) > max_line:
                raise TooLarge(f"a line is longer than {max_line} bytes", self.elapsed_ms(), limit=max_line, line=True)
        if pending:
            yield bytes(pending.removesuffix(b"\r"))

    def read(self) -> bytes:
        """The whole body; TooLarge past `max_body`."""
        return b"".join(self.chunks())

    def excerpt(self, *, limit: int, patience: float) -> bytes:
        """At most the body's first `limit` bytes, waiting at most `patience` seconds for them
        (an error's explanation: whatever came in time, never a failure of its own)."""
        self._deadline = min(self._deadline, time.monotonic() + patience)
        body = bytearray()
        try:
            for chunk in self.chunks():
                body += chunk
                if len(body) >= limit:
                    break
        except SendError:
            pass
        return bytes(body[:limit])

    def close(self) -> None:
        if self._socket is not None:
            try:
                self._socket.close()
            except OSError:
                pass
            self._socket = None


@contextmanager
def post_streamed(
    destination: Destination,
    *,
    body: bytes,
    headers: dict[str, str],
    timeout: float,
    idle_timeout: float,
    max_body: int,
    while_waiting: Callable[[], None] | None = None,
    wait_check_every: float = 1.0,
) -> Iterator[Streamed]:
    """POST `body` to the checked destination and hand over the answer once its head is in.

    Everything, connecting included, ends by `timeout` seconds from now; every wait (connect,
    TLS, the head, each read) ends after `idle_timeout` seconds with nothing; `while_waiting`,
    if given, is called after each `wait_check_every` seconds in which nothing arrived, and
    may raise to give up (the exception comes out of here as it is). Errors are SendError's
    kinds: ConnectFailed, TlsFailed, Dropped (before the answer), TimedOut, TooLarge, Broken.
    The connection is closed when the block ends, however it ends."""
    streamed = Streamed(
        destination,
        timeout=timeout,
        idle_timeout=idle_timeout,
        max_body=max_body,
        while_waiting=while_waiting,
        wait_check_every=wait_check_every,
    )
    try:
        streamed.open(body=body, headers=headers)
        yield streamed
    finally:
        streamed.close()
