"""Spellings of names no tenant may claim (accounts.host_services.host_check): addresses in the
special ranges, written as a request or a hand might write them (bracketed, with a port, a final
dot, IPv4-mapped IPv6 in dotted or hex form, upper case, full-width digits), and this machine's
names (`localhost`, `*.localhost`). Drawn by tests/test_tenant_api_more.py and tests/test_admin_hosts.py."""

from __future__ import annotations

import ipaddress

from hypothesis import strategies as st

# One address of each range the claim refuses.
RESERVED_V4 = [
    "127.0.0.1",
    "127.0.0.2",
    "127.255.255.254",
    "0.0.0.0",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "192.0.2.1",
]
RESERVED_V6 = ["::", "::1", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "2001:db8::1", "64:ff9b::a00:1"]
FULL_WIDTH = str.maketrans("0123456789", "０１２３４５６７８９")


def _v4(address: str) -> st.SearchStrategy[str]:
    packed = int(ipaddress.IPv4Address(address))
    mapped_hex = f"::ffff:{packed >> 16:x}:{packed & 0xFFFF:x}"
    forms = [
        address,
        f"{address}.",
        f"{address}:8080",
        f"[::ffff:{address}]",
        f"[::FFFF:{address}]:443",
        f"[{mapped_hex}]",
        f"[0:0:0:0:0:ffff:{address}]",
        address.translate(FULL_WIDTH),
    ]
    return st.sampled_from(forms)


def _v6(address: str) -> st.SearchStrategy[str]:
    exploded = ipaddress.IPv6Address(address).exploded
    return st.sampled_from([f"[{address}]", f"[{address.upper()}]:8000", f"[{exploded}]", address])


LOOPBACK_NAMES = st.sampled_from(["localhost", "LOCALHOST.", "localhost:8000", "a.localhost", "Conformance.LocalHost."])

RESERVED = st.one_of(
    st.sampled_from(RESERVED_V4).flatmap(_v4),
    st.sampled_from(RESERVED_V6).flatmap(_v6),
    LOOPBACK_NAMES,
)
