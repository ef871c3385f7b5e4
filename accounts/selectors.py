"""Reads for tenants, agents and API keys."""

from __future__ import annotations

import hmac
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar

from django.conf import settings

from .models import SLUG_LENGTH, Agent, ApiKey
from .services import KEY_ID_HEX_LENGTH, KEY_PREFIX, hash_secret

_SLUG = re.compile(r"[-a-zA-Z0-9_]+")  # Django's validate_slug
_KEY_ID = re.compile(rf"[0-9a-f]{{{KEY_ID_HEX_LENGTH}}}")  # an ApiKey.prefix, as api_key_create makes them


@dataclass(frozen=True)
class Principal:
    """Who is calling: tasks are owned by, and visible to, one principal of one tenant."""

    name: str
    api_key_id: int | None = None

    ANONYMOUS: ClassVar[Principal]

    @property
    def is_anonymous(self) -> bool:
        return self.api_key_id is None


Principal.ANONYMOUS = Principal(name="anonymous")


class _TTLCache:
    """A small in-process cache of positive lookups, bounded in size and age.

    Every protocol request needs its agent and its caller; reading both from the database
    costs two round trips per request. Entries live `AUTH_CACHE_SECONDS` (0 turns the cache
    off), so a changed agent or a revoked key takes effect within that time in every process.
    Only hits are cached: random keys cannot fill it, and a new agent is served at once.
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self._data: OrderedDict[Any, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries

    def get(self, key: Any) -> Any:
        ttl = settings.AUTH_CACHE_SECONDS
        if ttl <= 0:
            return None
        with self._lock:
            entry = self._data.get(key)
            if entry is None or entry[0] < time.monotonic():
                return None
            return entry[1]

    def put(self, key: Any, value: Any) -> None:
        ttl = settings.AUTH_CACHE_SECONDS
        if ttl <= 0 or value is None:
            return
        with self._lock:
            self._data[key] = (time.monotonic() + ttl, value)
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_agents = _TTLCache()
_keys = _TTLCache()


def _is_slug(value: str) -> bool:
    return len(value) <= SLUG_LENGTH and _SLUG.fullmatch(value) is not None


def agent_get(*, tenant_slug: str, agent_slug: str) -> Agent | None:
    """The active agent at /agents/<tenant_slug>/<agent_slug>/, or None. A path segment that
    cannot be a slug names nothing, and is not looked up."""
    if not (_is_slug(tenant_slug) and _is_slug(agent_slug)):
        return None
    cached = _agents.get((tenant_slug, agent_slug))
    if cached is not None:
        return cached
    agent = (
        Agent.objects.select_related("tenant").filter(tenant__slug=tenant_slug, slug=agent_slug, is_active=True).first()
    )
    _agents.put((tenant_slug, agent_slug), agent)
    return agent


def api_key_authenticate(*, agent: Agent, presented: str) -> Principal | None:
    """The principal behind a presented key, if the key is valid for the agent's tenant."""
    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not _KEY_ID.fullmatch(parts[1]):
        return None
    digest = hash_secret(presented)
    cache_key = (agent.tenant_id, digest)
    cached = _keys.get(cache_key)
    if cached is not None:
        return cached
    key = (
        ApiKey.objects.active()
        .filter(prefix=parts[1], tenant_id=agent.tenant_id)
        .only("id", "principal", "key_hash")
        .first()
    )
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        return None
    principal = Principal(name=key.principal, api_key_id=key.id)
    _keys.put(cache_key, principal)
    return principal


def caller_cached(*, tenant_slug: str, agent_slug: str, presented: str | None) -> tuple[Agent, Principal] | None:
    """The agent and the caller when both are cached (None otherwise): lets an async view skip
    the hop to a database thread on the common request."""
    agent = _agents.get((tenant_slug, agent_slug))
    if agent is None:
        return None
    if not presented:
        return (agent, Principal.ANONYMOUS) if agent.is_public else None
    principal = _keys.get((agent.tenant_id, hash_secret(presented)))
    return (agent, principal) if principal is not None else None


def caches_clear() -> None:
    """Forget cached agents and keys (tests; after bulk changes in a shell)."""
    _agents.clear()
    _keys.clear()
