"""Which agent answers at the root of a host name (docs/tenancy.md, "Agents at their own host
names"): the name as a request carries it, read once, and the lookup of the bound names.

Every request asks, so the lookup costs no statement on the server's own names (those
ALLOWED_HOSTS lists exactly, and PUBLIC_BASE_URL's): they are never bound, nor is a name an
ALLOWED_HOSTS `.domain` matches (`is_server_name`, which claims and bindings are refused). Any other name is
looked up in a per-process copy of every binding, read in one statement and kept while
`changes` hears of every change (a binding's save or delete, an agent's), at most
AUTH_CACHE_SECONDS; without that (no Redis, or the cache off) each lookup reads the one row.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

import idna
from django.conf import settings
from django.utils.http import is_same_domain

from . import changes
from .models import AgentHost

# A host name's length in DNS; a Host header longer than this names nothing.
HOST_LENGTH = 253
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


@dataclass(frozen=True)
class Bound:
    """The agent a host name is bound to, and the card its root gives a request naming no version."""

    tenant: str
    agent: str
    card_version: str = ""


# Clients send a few names over and over; garbage cannot grow this past its size.
@lru_cache(maxsize=4096)
def host_name(raw: str) -> str | None:
    """The host name `raw` (a Host header: `Name:port`, `[v6]:port`, or a name as typed) names:
    lower-case, IDNA-encoded (`bücher.example` is `xn--bcher-kva.example`), without port or
    final dot; an IP literal as its canonical text (no brackets; an IPv4-mapped IPv6 address as
    its IPv4 address). None for anything else."""
    if not isinstance(raw, str) or not raw or len(raw) > HOST_LENGTH + 8:
        return None
    host = raw.strip().lower()
    if host.startswith("["):
        inside, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not _is_port(rest[1:]) or (rest and rest[0] != ":")):
            return None
        return _ipv6(inside)
    if host.count(":") > 1:  # a bare IPv6 address, as stored and as a URL's path names it
        return _ipv6(host)
    name, colon, port = host.rpartition(":")
    if colon:
        if not _is_port(port):
            return None
        host = name
    host = host.removesuffix(".")
    if not host or len(host) > HOST_LENGTH:
        return None
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError, ValueError):
            return None
        try:  # full-width digits map to an address
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            pass
    labels = host.split(".")
    if len(host) > HOST_LENGTH or not all(_is_label(label) for label in labels):
        return None
    if labels[-1].isdigit():  # 1.2.3 is no name, and no address either
        return None
    return host


def _ipv6(text: str) -> str | None:
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    # ::ffff:127.0.0.1 is 127.0.0.1, one name in two spellings.
    return str(address.ipv4_mapped or address)


def _is_port(text: str) -> bool:
    return 0 < len(text) <= 5 and text.isdigit()


def _is_label(label: str) -> bool:
    return 0 < len(label) <= 63 and set(label) <= _LABEL_CHARS and label[0] != "-" and label[-1] != "-"


def own_hosts() -> frozenset[str]:
    """The server's own names: ALLOWED_HOSTS' exact entries (not `*` or `.domain`) and
    PUBLIC_BASE_URL's host. They serve the path-based URLs, the admin and the APIs; none is bound."""
    names = {host_name(h) for h in settings.ALLOWED_HOSTS if h and h != "*" and not h.startswith(".")}
    if settings.PUBLIC_BASE_URL:
        names.add(host_name(urlsplit(settings.PUBLIC_BASE_URL).netloc))
    return frozenset(n for n in names if n)


def is_server_name(name: str) -> bool:
    """Whether the server answers on `name` (a normalised name) as itself: one of `own_hosts`,
    or a name an ALLOWED_HOSTS pattern `.domain` matches (Django's `is_same_domain`). `*` names
    nothing here: with it, the server's own are PUBLIC_BASE_URL's host and the exact entries."""
    if name in own_hosts():
        return True
    for pattern in settings.ALLOWED_HOSTS:
        if isinstance(pattern, str) and pattern.startswith(".") and (base := host_name(pattern[1:])):
            if is_same_domain(name, f".{base}"):
                return True
    return False


def is_loopback_name(name: str) -> bool:
    """`localhost` and the names below it (RFC 6761): this machine, whatever DNS says."""
    return name == "localhost" or name.endswith(".localhost")


class _Bindings:
    """Every bound name -> its Bound, read at once and dropped on any change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._map: dict[str, Bound] | None = None
        self._until = 0.0
        self._generation = 0
        self._own: tuple[tuple[object, str], frozenset[str]] | None = None
        changes.on_change(self.clear)

    def own(self) -> frozenset[str]:
        # Recomputed when the settings change (tests override them).
        key = (settings.ALLOWED_HOSTS, settings.PUBLIC_BASE_URL)
        cached = self._own
        if cached is None or cached[0][0] is not key[0] or cached[0][1] != key[1]:
            cached = ((key[0], key[1]), own_hosts())
            self._own = cached
        return cached[1]

    def cached(self, host: str) -> tuple[bool, Bound | None]:
        """(known, agent): whether the answer is known without a statement, and the answer."""
        if host in self.own():
            return True, None
        bindings = self._map
        if bindings is None or time.monotonic() > self._until or not changes.caches_usable():
            return False, None
        return True, bindings.get(host)

    def read(self, host: str) -> Bound | None:
        known, found = self.cached(host)
        if known:
            return found
        if not changes.caches_usable():
            row = (
                AgentHost.objects.filter(host=host, proven_at__isnull=False, agent__is_active=True)
                .values_list("agent__tenant__slug", "agent__slug", "card_version")
                .first()
            )
            return Bound(*row) if row else None
        generation = self._generation
        rows = AgentHost.objects.filter(proven_at__isnull=False, agent__is_active=True).values_list(
            "host", "agent__tenant__slug", "agent__slug", "card_version"
        )
        bindings = {name: Bound(tenant, agent, version) for name, tenant, agent, version in rows}
        with self._lock:
            if generation == self._generation:  # not cleared while it was read
                self._map, self._until = bindings, time.monotonic() + settings.AUTH_CACHE_SECONDS
        return bindings.get(host)

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._map = None


_bindings = _Bindings()


def agent_at_cached(host: str) -> tuple[bool, Bound | None]:
    """For async callers: (known, Bound or None) without touching the database; when not
    known, `agent_at` (on a database thread) answers."""
    return _bindings.cached(host)


def agent_at(host: str) -> Bound | None:
    """The active agent bound to `host` (a normalised name), or None."""
    return _bindings.read(host)


def is_own_host(host: str) -> bool:
    return host in _bindings.own()
