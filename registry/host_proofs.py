"""The registry's domain proof, lent to accounts for agents' host names (accounts.host_services):
the same token, DNS TXT record and well-known file as an entry's, on the name being claimed."""

from __future__ import annotations

from accounts.host_services import DomainProof, ProofOutcome

from . import proofs


def _url(host: str) -> str:
    # The well-known file is read over https, as a card served at that name would be.
    return f"https://[{host}]/" if ":" in host else f"https://{host}/"


def check(host: str, token: str, method: str) -> ProofOutcome:
    result = proofs.check(card_url=_url(host), token=token, method=method)  # type: ignore[arg-type]
    return ProofOutcome(result.ok, result.detail)


def instructions(host: str, token: str) -> dict[str, str]:
    return proofs.instructions(card_url=_url(host), token=token)


DOMAIN_PROOF = DomainProof(check=check, instructions=instructions)
