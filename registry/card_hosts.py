"""Flags for a card that points away from the host whose control was proven: an endpoint on
another host, or a signature whose key set (`jku`) is on another host. Read from a card version,
never stored: they change exactly when the card does. No I/O, no writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import proofs
from .models import CardVersion, Entry


@dataclass(frozen=True)
class HostFlag:
    code: str  # "endpoint_host" or "jku_host"
    host: str  # the other host
    detail: str  # a sentence for the page


def _host(url: Any) -> str:
    if not isinstance(url, str) or not url:
        return ""
    try:
        return proofs.domain_of(url)
    except ValueError:
        return ""


def host_flags(entry: Entry, version: CardVersion | None) -> list[HostFlag]:
    """What in `version` points away from the host whose control was proven (entry.domain):
    an endpoint on another host (the proof says nothing of who answers there), a signature
    whose keys were fetched from another host (whoever runs that host vouches for the card)."""
    if version is None:
        return []
    flags: list[HostFlag] = []
    seen: set[tuple[str, str]] = set()
    index = version.index if isinstance(version.index, dict) else {}
    endpoints = index.get("endpoints")
    for endpoint in endpoints if isinstance(endpoints, list) else []:
        host = _host(endpoint.get("url") if isinstance(endpoint, dict) else None)
        if host and host != entry.domain and ("endpoint_host", host) not in seen:
            seen.add(("endpoint_host", host))
            flags.append(
                HostFlag(
                    "endpoint_host",
                    host,
                    f"an endpoint is on {host}, not on the proven card host {entry.domain}",
                )
            )
    signatures = version.signatures if isinstance(version.signatures, list) else []
    for check in signatures:
        host = _host(check.get("jku") if isinstance(check, dict) else None)
        if host and host != entry.domain and ("jku_host", host) not in seen:
            seen.add(("jku_host", host))
            flags.append(
                HostFlag(
                    "jku_host",
                    host,
                    f"a signature's key set (jku) is on {host}, not on the card's host {entry.domain}",
                )
            )
    return flags
