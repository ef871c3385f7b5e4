"""Proof that whoever submits an agent card controls the domain it is served from.

The registry gives the submitter a token; they publish it in one of two places on the card
URL's host, and the registry looks:

- **http**: the file `/.well-known/agentserver-verification.txt` on that host, with the card
  URL's scheme and port, holding the line `agentserver-verification=<token>` (other lines may
  be there too: one file can prove several submitters). It proves the domain only over https on
  port 443, where only the host's own server answers with a certificate for the name; over plain
  http or on another port it proves that host and port (`host:port`) and no more: any user of a
  shared host can listen on an unprivileged port, and plain http can be answered by whoever is
  on the path (`covers_domain`, `proven_name`). Fetched through the address guard
  (outbound.ssrf, outbound.client): the submitter chooses the host, so it must be public; no
  redirect is followed (a host that only redirects has not published the file) and at most
  MAX_BODY bytes are read.
- **dns**: a TXT record at `_agentserver-verification.<domain>` whose text (its strings joined,
  as a TXT record's are) is `agentserver-verification=<token>`. Asked of the nameservers in
  REGISTRY_DNS_NAMESERVERS (empty: the system's); never through the address guard, since
  the registry's own resolver, not the submitter, chooses where the query goes.

Plain functions, no models and no database: the registry's services keep the tokens and
call `check`. Nothing the outside world does raises: a card URL that is no URL, a host that
does not resolve, a server or nameserver that does not answer, each gives a failed
`ProofResult` whose `detail` tells the submitter what was found. Only the caller's own
mistakes raise ValueError (a token this module did not make, an unknown method).
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import dns.exception
import dns.name
import dns.nameserver
import dns.rdatatype
import dns.resolver
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from outbound import client, ssrf

TOKEN_PREFIX = "agentserver-verification="
WELL_KNOWN_PATH = "/.well-known/agentserver-verification.txt"
DNS_LABEL = "_agentserver-verification"
# The file is a line or a few: anything longer is read only this far.
MAX_BODY = 4096
USER_AGENT = "agentserver-registry (domain proof)"

Method = Literal["http", "dns"]
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,128}")
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")


@dataclass(frozen=True)
class ProofResult:
    ok: bool
    method: Method
    detail: str  # what was found, in a sentence for the submitter


def new_token() -> str:
    """A fresh token: 256 random bits, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def _check_token(token: str) -> None:
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise ValueError("the token is not one new_token() makes (32-128 URL-safe characters)")


def timeout_setting() -> float:
    return float(getattr(settings, "REGISTRY_PROOF_TIMEOUT", 5.0))


# --- the domain ---------------------------------------------------------------------------


def normalise_host(host: str) -> str:
    """A host name as DNS and HTTP want it: lower-cased, IDNA-encoded (UTS 46 mapping, IDNA
    2008), without a final dot; an IP literal as its canonical text. ValueError for what is
    neither."""
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise ValueError("the host is empty")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        name = dns.name.from_unicode(host.lower(), idna_codec=dns.name.IDNA_2008_Practical)
        ascii_host = name.to_text(omit_final_dot=True).lower()
    except (dns.exception.DNSException, UnicodeError) as exc:
        raise ValueError(f"the host {host!r} is not a valid host name ({exc})") from None
    labels = ascii_host.split(".")
    if len(ascii_host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"the host {host!r} is not a valid host name")
    return ascii_host


def _split(url: str) -> tuple[str, str, int | None]:
    """(scheme, host as written, explicit port) of a URL; ValueError when it has no host."""
    if not isinstance(url, str):
        raise ValueError("the URL is not a string")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a valid URL ({exc})") from None
    if not parts.hostname:
        raise ValueError(f"{url!r} has no host")
    return parts.scheme.lower(), parts.hostname, port


def domain_of(card_url: str) -> str:
    """The host of the card URL: lower-cased and IDNA-encoded (`bücher.example` is
    `xn--bcher-kva.example`), or an IP literal (canonical text, no brackets), for which only
    the http method can work. ValueError when the URL has no usable host."""
    _scheme, host, _port = _split(card_url)
    return normalise_host(host)


def is_ip_literal(domain: str) -> bool:
    try:
        ipaddress.ip_address(domain)
    except ValueError:
        return False
    return True


def _authority(domain: str, port: int | None) -> str:
    shown = f"[{domain}]" if ":" in domain else domain
    return shown if port is None else f"{shown}:{port}"


def well_known_url(card_url: str) -> str:
    """Where the http method looks: the card URL's scheme, host and port, the well-known path."""
    scheme, host, port = _split(card_url)
    return urlunsplit((scheme, _authority(normalise_host(host), port), WELL_KNOWN_PATH, "", ""))


def covers_domain(*, card_url: str, method: str) -> bool:
    """Whether a proof found by `method` shows control of the card URL's whole domain: a DNS
    record does; the well-known file only when read over https on port 443."""
    if method != "http":
        return True
    try:
        scheme, _host, port = _split(card_url)
    except ValueError:
        return False
    return scheme == "https" and port in (None, 443)


def proven_name(*, card_url: str, method: str) -> str:
    """What a proof found by `method` shows control of: the domain (`example.com`), or, for the
    well-known file over plain http or on a port other than 443, that host and port only
    (`example.com:8080`, `example.com:80`). ValueError for a card URL with no usable host."""
    scheme, host, port = _split(card_url)
    domain = normalise_host(host)
    if covers_domain(card_url=card_url, method=method):
        return domain
    return _authority(domain, port if port is not None else (443 if scheme == "https" else 80))


def dns_name(domain: str) -> str:
    return f"{DNS_LABEL}.{domain}"


def instructions(*, card_url: str, token: str) -> dict[str, str]:
    """What the submitter publishes, for either method (ValueError for a card URL with no
    usable host):

    - `domain`: the domain being proven;
    - `http_url`, `http_content`: the file to serve (as text/plain) and its line; `http_proves`,
      what that file proves when it is not the domain (`host:port`: plain http or a port other
      than 443);
    - `dns_name`, `dns_type` ("TXT"), `dns_value`: the record to publish, or, for a card
      URL whose host is an IP address, `dns_unavailable` saying why there is none.
    """
    _check_token(token)
    domain = domain_of(card_url)
    line = TOKEN_PREFIX + token
    steps = {"domain": domain, "http_url": well_known_url(card_url), "http_content": line}
    if not covers_domain(card_url=card_url, method="http"):
        steps["http_proves"] = f"{proven_name(card_url=card_url, method='http')} only, not the domain {domain}"
    if is_ip_literal(domain):
        steps["dns_unavailable"] = _ip_has_no_dns(domain)
    else:
        steps.update({"dns_name": dns_name(domain), "dns_type": "TXT", "dns_value": line})
    return steps


def _ip_has_no_dns(domain: str) -> str:
    return (
        f"the card's host {domain} is an IP address, which has no DNS name to hold a TXT record: "
        "only the http method can prove it"
    )


# --- the checks ---------------------------------------------------------------------------


def check(*, card_url: str, token: str, method: Method) -> ProofResult:
    """Look for the token by `method` ("http" or "dns") with the configured timeout."""
    if method == "http":
        return check_http(card_url=card_url, token=token)
    if method == "dns":
        return check_dns(card_url=card_url, token=token)
    raise ValueError(f"unknown proof method {method!r}: 'http' or 'dns'")


def check_http(*, card_url: str, token: str, timeout: float | None = None) -> ProofResult:
    """GET the well-known file on the card URL's host; proven if one of its lines is
    `agentserver-verification=<token>` (a 200 answer; redirects are not followed)."""
    _check_token(token)

    def failed(detail: str) -> ProofResult:
        return ProofResult(ok=False, method="http", detail=detail)

    try:
        url = well_known_url(card_url)
    except ValueError as exc:
        return failed(f"the card URL is not usable: {exc}")
    try:
        destination = ssrf.check(url)
    except ssrf.Refused as exc:
        return failed(f"refused by the address guard: {exc}")
    except ssrf.Unresolved as exc:
        return failed(f"could not reach {url}: {exc}")
    assert destination is not None  # not unresolvable_ok
    try:
        response = client.get(
            destination,
            headers={"Accept": "text/plain", "User-Agent": USER_AGENT},
            timeout=timeout if timeout is not None else timeout_setting(),
            max_body=MAX_BODY,
        )
    except client.SendError as exc:
        return failed(f"no answer from {url}: {no_answer_reason(str(exc))} ({exc})")
    if 300 <= response.status < 400:
        location = response.headers.get("location")
        to = f" to {location}" if location else ""
        return failed(
            f"the file at {url} answered {response.status}, a redirect{to}, which is not followed: "
            "serve the file at this URL itself"
        )
    if response.status != 200:
        return failed(f"the file at {url} answered {response.status}")
    lines = response.body.decode("utf-8", "replace").lstrip("\ufeff").strip().splitlines()
    if response.truncated and lines:
        lines.pop()  # the last line read may be cut short
    expected = TOKEN_PREFIX + token
    if any(line.strip() == expected for line in lines):
        detail = f"found the token at {url}"
        if not covers_domain(card_url=card_url, method="http"):
            detail += (
                f": {proven_name(card_url=card_url, method='http')} is proven, not the domain "
                "(only https on port 443, or a DNS record, proves the domain)"
            )
        return ProofResult(ok=True, method="http", detail=detail)
    detail = f"the file at {url} does not hold the line {expected}"
    if response.truncated:
        detail += f" within its first {MAX_BODY} bytes (no more is read)"
    elif any(line.strip().startswith(TOKEN_PREFIX) for line in lines):
        detail += " (it holds another token)"
    return failed(detail)


def no_answer_reason(message: str) -> str:
    """What a client.SendError message ("ConnectError: [Errno 111] Connection refused") means,
    in a few words: timed out, connection refused, TLS failure, connection reset..."""
    kind, _, text = message.partition(":")
    text = text.lower()
    if "Timeout" in kind:
        return {
            "ConnectTimeout": "timed out connecting",
            "ReadTimeout": "timed out waiting for the answer",
            "WriteTimeout": "timed out sending the request",
        }.get(kind, "timed out")
    if "refused" in text:
        return "connection refused"
    if "ssl" in text or "certificate" in text or "tls" in text:
        return "TLS failure"
    if "reset" in text:
        return "connection reset"
    if "unreachable" in text:
        return "unreachable"
    if kind == "RemoteProtocolError":
        return "the connection closed without a valid HTTP answer"
    if kind == "ConnectError":
        return "could not connect"
    return "no HTTP answer"


def check_dns(*, card_url: str, token: str, timeout: float | None = None) -> ProofResult:
    """Ask for the TXT records at `_agentserver-verification.<domain>`; proven if one of them
    reads `agentserver-verification=<token>` (its strings joined)."""
    _check_token(token)

    def failed(detail: str) -> ProofResult:
        return ProofResult(ok=False, method="dns", detail=detail)

    try:
        domain = domain_of(card_url)
    except ValueError as exc:
        return failed(f"the card URL is not usable: {exc}")
    if is_ip_literal(domain):
        return failed(_ip_has_no_dns(domain))
    name = dns_name(domain)
    seconds = timeout if timeout is not None else timeout_setting()
    try:
        qname = dns.name.from_text(name)
        answer = resolver(timeout=seconds).resolve(qname, dns.rdatatype.TXT, search=False)
    except dns.resolver.NXDOMAIN:
        return failed(f"no TXT record at {name}: the name does not exist")
    except dns.resolver.NoAnswer:
        return failed(f"no TXT record at {name}: the name exists but holds no TXT record")
    except dns.resolver.LifetimeTimeout:
        return failed(f"no nameserver answered within {seconds:g} s when asked for the TXT records at {name}")
    except dns.resolver.NoNameservers as exc:
        return failed(f"no nameserver could answer for the TXT records at {name} ({exc})")
    except dns.resolver.NoResolverConfiguration:
        return failed(
            "there is no nameserver to ask: REGISTRY_DNS_NAMESERVERS is empty and the system's resolv.conf names none"
        )
    except (dns.exception.DNSException, OSError) as exc:
        return failed(f"the DNS lookup of the TXT records at {name} failed: {exc}")
    expected = TOKEN_PREFIX + token
    texts = [b"".join(rdata.strings).decode("utf-8", "replace").strip() for rdata in answer]
    if expected in texts:
        return ProofResult(ok=True, method="dns", detail=f"found the token in a TXT record at {name}")
    detail = f"the TXT records at {name} do not hold this token ({len(texts)} found; expected {expected})"
    if any(text.startswith(TOKEN_PREFIX) for text in texts):
        detail += "; one holds another token"
    return failed(detail)


def resolver(*, timeout: float) -> dns.resolver.Resolver:
    """A resolver asking REGISTRY_DNS_NAMESERVERS (or, when empty, those of the system's
    resolv.conf: NoResolverConfiguration if it names none), with no cache, giving up after
    `timeout` seconds in all."""
    servers = list(getattr(settings, "REGISTRY_DNS_NAMESERVERS", []))
    if servers:
        found = dns.resolver.Resolver(configure=False)
        found.nameservers = [nameserver(value) for value in servers]
    else:
        found = dns.resolver.Resolver(configure=True)
    found.cache = None
    found.timeout = timeout
    found.lifetime = timeout
    return found


def nameserver(value: str) -> dns.nameserver.Do53Nameserver:
    """One REGISTRY_DNS_NAMESERVERS entry: "ip", "ip:port" or "[ipv6]:port"."""
    value = value.strip()
    host, port = value, 53
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                raise ImproperlyConfigured(f"REGISTRY_DNS_NAMESERVERS: {value!r} is not ip, ip:port or [ipv6]:port")
            port = int(rest[1:])
    elif value.count(":") == 1:
        host, _, digits = value.partition(":")
        if not digits.isdigit():
            raise ImproperlyConfigured(f"REGISTRY_DNS_NAMESERVERS: {value!r} is not ip, ip:port or [ipv6]:port")
        port = int(digits)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ImproperlyConfigured(f"REGISTRY_DNS_NAMESERVERS: {value!r} is not an IP address") from None
    if not 0 < port < 65536:
        raise ImproperlyConfigured(f"REGISTRY_DNS_NAMESERVERS: the port of {value!r} is out of range")
    return dns.nameserver.Do53Nameserver(str(address), port)
