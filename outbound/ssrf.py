"""The SSRF guard: outgoing requests go only to public addresses.

Someone else chooses the URLs this server sends to (a client its push receiver, a tenant its
issuer's JWKS), so without a guard the server would reach whatever they name: the cloud
metadata service, a database on the private network, the admin on loopback. The rules:

- only http and https, no credentials in the URL;
- the host is resolved once, every address it resolves to must be permitted, and the
  connection then goes to that checked address (`Destination.address`): a name that answers
  differently a moment later (DNS rebinding) cannot move the connection;
- refused: loopback, private, link-local, multicast, reserved, carrier-grade NAT and the other
  special-purpose ranges, IPv4 and IPv6, including v4-mapped/-compatible and NAT64 forms of
  them, unless `OUTBOUND_ALLOW_NETS` names the address;
- the HTTP client (outbound.client) follows no redirects and caps what it reads;
- a refusal tells the caller only that the host it gave is not allowed, the same for a name
  that does not resolve: what a name resolves to, and why that is refused, go to the log.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# (network, why it is refused). Python's is_global/is_private miss some of these (multicast
# counts as global, 2002::/16 and fec0::/10 too), so the table is explicit.
_REFUSED_V4: list[tuple[str, str]] = [
    ("0.0.0.0/8", "a 'this network' address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a carrier-grade NAT address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address"),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol assignment"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
]
_REFUSED_V6: list[tuple[str, str]] = [
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("::/96", "an IPv4-compatible address"),
    ("100::/64", "a discard-only address"),
    ("2001::/23", "an IETF protocol assignment"),
    ("2001:db8::/32", "a documentation address"),
    ("2002::/16", "a 6to4 address"),
    ("3fff::/20", "a documentation address"),
    ("5f00::/16", "a segment-routing address"),
    ("fc00::/7", "a private (unique local) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
]
_NAT64 = [ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48")]
_TABLE: list[tuple[IPNetwork, str]] = [(ipaddress.ip_network(net), why) for net, why in (*_REFUSED_V4, *_REFUSED_V6)]


# The one place names are resolved (tests replace it: no test may send a DNS query).
_getaddrinfo = socket.getaddrinfo


class Refused(Exception):
    """The URL may not be sent to. `str()` is what a caller may be told: about the URL it gave
    (its form), or for an address the guard refuses only "not allowed" and the host as given,
    never what the name resolves to or why that address is refused, which would map a private
    network for whoever asks. `detail` is the whole reason, for the server's log (logged here)."""

    def __init__(self, public: str, detail: str | None = None) -> None:
        super().__init__(public)
        self.detail = detail or public


class Unresolved(Exception):
    """The name could not be resolved just now: a fact of the moment (the resolver, the
    network, a record not yet published), not a decision, so whoever sends tries again later.
    `str()` is the same text as a refused address's (a caller must not tell a name that does not
    resolve from one that resolves to a private address); `detail` says what happened."""

    def __init__(self, public: str, detail: str | None = None) -> None:
        super().__init__(public)
        self.detail = detail or public


def not_allowed(host: str) -> str:
    """What a caller is told about a host the guard refused or could not resolve."""
    return f"this address is not allowed: {host}"


@dataclass(frozen=True)
class Destination:
    """A URL that passed the guard, with the address the connection must go to."""

    scheme: str
    host: str  # as written in the URL (for Host and TLS SNI)
    port: int
    target: str  # path and query
    address: IPAddress


def parse_networks(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    networks = []
    for value in values:
        value = value.strip()
        if value:
            networks.append(ipaddress.ip_network(value, strict=False))
    return tuple(networks)


@lru_cache(maxsize=8)
def _allow_list(raw: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return parse_networks(raw)


def allowed_networks() -> tuple[IPNetwork, ...]:
    return _allow_list(tuple(settings.OUTBOUND_ALLOW_NETS))


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a v6 address stands for (v4-mapped, NAT64), which decides its fate."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    for net in _NAT64:
        if ip in net:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(ip: IPAddress, allow: Iterable[IPNetwork] = ()) -> str | None:
    """Why `ip` may not be connected to, or None if it may. `allow` overrides the table."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_v4(ip)
        if embedded is not None:
            return address_refusal(embedded, allow)
    allow = tuple(allow)
    if any(ip.version == net.version and ip in net for net in allow):
        return None
    for net, why in _TABLE:
        if ip.version == net.version and ip in net:
            return why
    if not ip.is_global:
        return "not a public address"
    return None


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to (an IP literal resolves to itself, without DNS)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = _getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if ip not in found:
            found.append(ip)
    return found


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _parse(url: str) -> tuple[str, str, int, str]:
    if not isinstance(url, str) or not url:
        raise Refused("the url is empty")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"the url {url!r} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused(f"the url {url!r} must use http or https")
    if parts.username is not None or parts.password is not None:
        raise Refused("the url must not carry credentials (user:password@)")
    host = parts.hostname
    if not host:
        raise Refused(f"the url {url!r} has no host")
    if not host.isascii() and not _is_literal(host):
        # The name as it goes on the wire (Host, TLS SNI, the resolver): its A-labels.
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise Refused(f"the host {host!r} is not a valid host name ({exc})") from None
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return scheme, host, port or (443 if scheme == "https" else 80), target


def check(url: str, *, unresolvable_ok: bool = False) -> Destination | None:
    """The checked destination of `url`; Refused (a decision: final), or Unresolved when the
    name does not resolve now (transient: try again later).

    With `unresolvable_ok` (creating a config: the name may resolve later, and delivery checks
    again) an unresolved name gives None. Resolving is network I/O: never call this inside a
    database transaction.
    """
    scheme, host, port, target = _parse(url)
    try:
        address = check_host(host, port)
    except Unresolved:
        if unresolvable_ok:
            return None
        raise
    return Destination(scheme=scheme, host=host, port=port, target=target, address=address)


def check_host(host: str, port: int) -> IPAddress:
    """The address to connect to for `host` (a name or an IP literal) on `port`, when every
    address it resolves to is permitted: the same rules as `check`, for what is not a URL (an
    AMQP broker a group Leader names). Refused or Unresolved as `check`; network I/O."""
    try:
        addresses = resolve(host, port)
    except UnicodeError as exc:  # IDNA cannot encode it: no resolver ever will
        raise Refused(f"the host {host!r} is not a valid host name ({exc})") from None
    except OSError as exc:
        raise _unresolved(host, f"the host {host!r} could not be resolved ({exc})") from None
    if not addresses:
        raise _unresolved(host, f"the host {host!r} has no address")
    allow = allowed_networks()
    for ip in addresses:
        why = address_refusal(ip, allow)
        if why is not None:
            shown = host if _is_literal(host) else f"{host} (which resolves to {ip})"
            detail = (
                f"requests may not be sent to {shown}: it is {why}; only public addresses "
                "are allowed (an operator can allow networks with OUTBOUND_ALLOW_NETS)"
            )
            log.info("outbound: refused %s", detail)
            raise Refused(not_allowed(_shown(host)), detail)
    return addresses[0]


def _unresolved(host: str, detail: str) -> Unresolved:
    log.info("outbound: %s", detail)
    return Unresolved(not_allowed(_shown(host)), detail)


def _shown(host: str) -> str:
    # An IPv6 literal as a URL writes it, so the caller recognises the host it gave.
    return f"[{host}]" if ":" in host else host
