"""The card's canonical form, from accounts.canonical: the server signs its own cards
(protocols.card_signing, a lower layer) with the same canonicalisation the directory checks
other people's with, so there is one."""

from accounts.canonical import canonical, card_hash, depth, without_empty

__all__ = ["canonical", "card_hash", "depth", "without_empty"]
