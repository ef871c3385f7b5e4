"""What the registry does with an agent card document: find and fetch it (through the SSRF
guard), tell its format (A2A 1.0, 0.3, 0.1 or ACPs ACS), validate it with itemised problems,
index it, hash it, and check its signatures. Pure: no models, no database.

Settings (read at each call, with these defaults): REGISTRY_CARD_MAX_BYTES (262144) caps a
card's body, REGISTRY_JWKS_MAX_BYTES (65536) a key set's, REGISTRY_CARD_FETCH_TIMEOUT (10 s)
each GET."""

from .canonical import card_hash
from .detect import detect_version
from .fetch import card_urls, fetch_card
from .normalise import normalise, search_text
from .signatures import verify_signatures
from .types import (
    CardIndex,
    CardRejected,
    Endpoint,
    Fetched,
    FetchFailed,
    Problem,
    SignatureCheck,
    Skill,
    Version,
)
from .validate import is_web_url, validate

__all__ = [
    "CardIndex",
    "CardRejected",
    "Endpoint",
    "FetchFailed",
    "Fetched",
    "Problem",
    "SignatureCheck",
    "Skill",
    "Version",
    "card_hash",
    "card_urls",
    "detect_version",
    "fetch_card",
    "is_web_url",
    "normalise",
    "search_text",
    "validate",
    "verify_signatures",
]
