"""Writes for agents' host names (docs/tenancy.md, "Agents at their own host names"): the
operator binds any name at once; a tenant claims one, publishes the claim's token on that
host, and the claim is bound when the token is found.

The proof is the registry's (a DNS TXT record at `_agentserver-verification.<host>`, or the
file `/.well-known/agentserver-verification.txt` on the host): the registry sits above this
app and hands its checks down through `register_domain_proof` in its `ready`. A proof covers
exactly the name it was made for, as the registry's does: proving `example.com` binds neither
`a.example.com` nor the other way round.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from outbound import ssrf

from .hosts import host_name, is_loopback_name, is_own_host, is_server_name
from .models import Agent, AgentHost, HostProof, RootCard
from .services import AccountError


@dataclass(frozen=True)
class ProofOutcome:
    ok: bool
    detail: str  # what was found, in a sentence for the claimant


@dataclass(frozen=True)
class DomainProof:
    """What the registry lends: `check(host, token, method)` (network I/O; never raises for
    what the outside world does) and `instructions(host, token)` (what to publish where)."""

    check: Callable[[str, str, str], ProofOutcome]
    instructions: Callable[[str, str], dict[str, str]]


_proof: DomainProof | None = None


def register_domain_proof(proof: DomainProof) -> None:
    global _proof
    _proof = proof


def host_check(host: str, *, claim: bool = True) -> str:
    """The name `host` stands for, if it may be bound (AccountError says why not): forms call this too.

    Compared as a request carries it (accounts.hosts.host_name: lower case, IDNA, no final dot
    or port, an IPv4-mapped IPv6 address as its IPv4). Never one of the server's own names
    (ALLOWED_HOSTS' entries, `.domain` patterns included, and PUBLIC_BASE_URL's host). A tenant's
    `claim` is refused this machine's names too (`localhost`, `*.localhost`) and any IP address
    but a public one: the special ranges (loopback, unspecified, private, link-local, multicast,
    reserved, and v4-mapped or NAT64 forms of them; outbound.ssrf's table) name this machine or
    a network behind it, never a tenant's. The operator's binding (`claim=False`) may bind those."""
    name = host_name(host) if isinstance(host, str) else None
    if name is None:
        raise AccountError(f"{str(host)[:100]!r} is not a host name (a DNS name or an IP address, without a path)")
    if is_own_host(name) or is_server_name(name):
        raise AccountError(f"{name} is one of this server's own names (ALLOWED_HOSTS): it serves every agent by path")
    if not claim:
        return name
    if is_loopback_name(name):
        raise AccountError(f"{name} names this machine (RFC 6761): it cannot be claimed")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return name
    refusal = ssrf.address_refusal(address)
    if refusal is not None:
        raise AccountError(f"{name} is {refusal}: only a public address or a DNS name can be claimed")
    return name


def _card_version(value: str) -> str:
    if value not in RootCard.values:
        versions = ", ".join(v for v in RootCard.values if v)
        raise AccountError(f"the root's card is the default's ('') or one of {versions}")
    return value


def _taken(name: str, agent: Agent) -> None:
    holder = (
        AgentHost.objects.select_related("agent__tenant")
        .filter(host=name, proven_at__isnull=False)
        .exclude(agent=agent)
        .first()
    )
    if holder is None:
        return
    if holder.agent.tenant_id != agent.tenant_id:  # another tenant's agent is not named to this one
        raise AccountError(f"{name} is bound to another agent, of another tenant")
    raise AccountError(f"{name} is bound to another agent ({holder.agent}): unbind it there first")


def host_bind(*, agent: Agent, host: str, card_version: str = "", by: Any = None) -> AgentHost:
    """The operator's binding: `agent` answers at the root of `host` from the next request on,
    with no proof asked (idempotent; a pending claim of the agent's is bound). `card_version`:
    the card a request naming no version gets there (RootCard)."""
    name, card_version = host_check(host, claim=False), _card_version(card_version)
    user = by if getattr(by, "pk", None) else None
    try:
        with transaction.atomic():
            _taken(name, agent)
            binding, _ = AgentHost.objects.select_for_update().get_or_create(
                host=name, agent=agent, defaults={"bound_by": user, "card_version": card_version}
            )
            if binding.proven_at is None:
                binding.proof, binding.proven_at, binding.bound_by = HostProof.OPERATOR, timezone.now(), user
            binding.card_version = card_version
            binding.save(update_fields=["proof", "proven_at", "bound_by", "card_version"])
            AgentHost.objects.filter(host=name, proven_at__isnull=True).exclude(pk=binding.pk).delete()
    except IntegrityError:
        raise AccountError(f"{name} was bound to another agent meanwhile") from None
    return binding


def host_claim(*, agent: Agent, host: str, card_version: str = "", by: Any = None) -> AgentHost:
    """A tenant's claim of `host` for `agent`: pending, with a fresh token to publish (the
    claim or binding there is, if the agent has one, with `card_version` as its root's card).
    Served nowhere until `host_verify` finds the token."""
    name, card_version = host_check(host), _card_version(card_version)
    with transaction.atomic():
        _taken(name, agent)
        binding, _ = AgentHost.objects.get_or_create(
            host=name,
            agent=agent,
            defaults={
                "proof_token": secrets.token_urlsafe(32),
                "card_version": card_version,
                "bound_by": by if getattr(by, "pk", None) else None,
            },
        )
        if binding.card_version != card_version:  # the claim or binding there was, its root's card changed
            binding.card_version = card_version
            binding.save(update_fields=["card_version"])
    return binding


def host_instructions(binding: AgentHost) -> dict[str, str]:
    """What a claimant publishes, and where (empty once bound, or with no proof registered)."""
    if binding.proven_at is not None or _proof is None or not binding.proof_token:
        return {}
    return _proof.instructions(binding.host, binding.proof_token)


def host_verify(*, binding: AgentHost, method: str) -> ProofOutcome:
    """Look for a pending claim's token on its host by `method` ("dns" or "http"; network I/O
    first, outside any transaction); when found, the claim is bound and every other claim of
    the name is dropped: the first to prove takes it."""
    if binding.proven_at is not None:
        return ProofOutcome(True, f"{binding.host} is bound already")
    if method not in (HostProof.DNS, HostProof.HTTP):
        raise AccountError(f"method must be {HostProof.DNS.value!r} or {HostProof.HTTP.value!r}")
    if _proof is None:
        raise AccountError("no domain proof is available on this server (the registry app is not installed)")
    outcome = _proof.check(binding.host, binding.proof_token, method)
    if not outcome.ok:
        return outcome
    try:
        with transaction.atomic():
            locked = AgentHost.objects.select_for_update().filter(pk=binding.pk).first()
            if locked is None:
                raise AccountError(f"the claim of {binding.host} was withdrawn")
            _taken(locked.host, locked.agent)
            locked.proof, locked.proven_at = method, timezone.now()
            locked.save(update_fields=["proof", "proven_at"])
            AgentHost.objects.filter(host=locked.host, proven_at__isnull=True).exclude(pk=locked.pk).delete()
    except IntegrityError:
        raise AccountError(f"another claim of {binding.host} was proven first") from None
    binding.refresh_from_db()
    return outcome


def host_unbind(*, binding: AgentHost) -> None:
    """Drop a binding or a claim: the name answers as an unknown one from the next request on."""
    binding.delete()
