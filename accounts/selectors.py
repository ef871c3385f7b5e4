"""Reads for tenants, agents, API keys and issuers, and who a caller is."""

from __future__ import annotations

import hmac
import logging
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from . import agent_kinds, changes
from .models import (
    SLUG_LENGTH,
    Agent,
    ApiKey,
    InvitationAnswer,
    Membership,
    MembershipInvitation,
    OidcIssuer,
    Role,
    Tenant,
)
from .services import (
    ANONYMOUS_PRINCIPAL,
    KEY_ID_HEX_LENGTH,
    KEY_PREFIX,
    LAST_USED_RESOLUTION,
    SHARED_PRINCIPAL,
    hash_secret,
    invitation_hash,
    principal_reserved,
)

log = logging.getLogger(__name__)

_SLUG = re.compile(r"[-a-zA-Z0-9_]+")  # Django's validate_slug
_KEY_ID = re.compile(rf"[0-9a-f]{{{KEY_ID_HEX_LENGTH}}}")  # an ApiKey.prefix, as api_key_create makes them


@dataclass(frozen=True)
class Principal:
    """Who is calling. Tasks record the `name` of the principal that created them, and only
    that principal reaches them (tasks_app.selectors): a key's, a bearer subject's, or the
    anonymous caller's, who reaches a task only by its id and lists none."""

    name: str
    authenticated: bool = True  # presented a valid API key or bearer token
    can_list: bool = True  # ListTasks shows it its tasks
    api_key_id: int | None = None
    # When the credential stops being valid (a key's expires_at, a bearer token's exp) and
    # what a rate limit counts the caller as (protocols.auth): a group membership the caller
    # makes keeps both, as it outlives the request (groups).
    expires_at: datetime | None = None
    identity: str = ""

    ANONYMOUS: ClassVar[Principal]

    @property
    def is_anonymous(self) -> bool:
        return not self.authenticated

    def shared(self) -> Principal:
        """The same caller on an agent that is a shared sandbox: every caller is one principal."""
        return replace(self, name=SHARED_PRINCIPAL, can_list=True)


Principal.ANONYMOUS = Principal(name=ANONYMOUS_PRINCIPAL, authenticated=False, can_list=False)


@dataclass(frozen=True)
class KeyGrant:
    """What a valid API key allows: its tenant's agents (all, or `agent_ids`), until `expires_at`."""

    key_id: int
    tenant_id: int
    principal: str
    agent_ids: frozenset[int] | None  # None: every agent of the tenant
    expires_at: datetime | None

    def allows(self, agent: Agent) -> bool:
        return agent.tenant_id == self.tenant_id and (self.agent_ids is None or agent.pk in self.agent_ids)


class _TTLCache:
    """A small in-process cache of positive lookups, bounded in size and age.

    Every protocol request needs its agent and its caller; reading both from the database
    costs two round trips per request. Entries live at most `AUTH_CACHE_SECONDS`, and only
    while `changes` hears of every change (a change clears every cache at once). A lookup
    that began before a clear does not store what it read. Only hits are cached: random keys
    cannot fill it.
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self._data: OrderedDict[Any, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries
        self.generation = 0
        changes.on_change(self.clear)

    def get(self, key: Any) -> Any:
        if not changes.caches_usable():
            return None
        with self._lock:
            entry = self._data.get(key)
            if entry is None or entry[0] < time.monotonic():
                return None
            return entry[1]

    def put(self, key: Any, value: Any, generation: int) -> None:
        if value is None or not changes.caches_usable():
            return
        with self._lock:
            if generation != self.generation:  # cleared while this value was being read
                return
            self._data[key] = (time.monotonic() + settings.AUTH_CACHE_SECONDS, value)
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self.generation += 1
            self._data.clear()


_agents = _TTLCache()
_keys = _TTLCache()
_last_touched: dict[int, float] = {}
_reserved_logged: set[int] = set()


def _is_slug(value: str) -> bool:
    return len(value) <= SLUG_LENGTH and _SLUG.fullmatch(value) is not None


def agent_cached(*, tenant_slug: str, agent_slug: str) -> Agent | None:
    return _agents.get((tenant_slug, agent_slug))


def agent_get(*, tenant_slug: str, agent_slug: str) -> Agent | None:
    """The active agent at /agents/<tenant_slug>/<agent_slug>/, or None. A path segment that
    cannot be a slug names nothing, and is not looked up."""
    if not (_is_slug(tenant_slug) and _is_slug(agent_slug)):
        return None
    cached = _agents.get((tenant_slug, agent_slug))
    if cached is not None:
        return cached
    generation = _agents.generation
    # The tenant's issuer comes along (a reverse one-to-one joins): see `oidc_issuer_of`.
    agent = (
        Agent.objects.select_related("tenant", "tenant__oidc_issuer")
        .filter(tenant__slug=tenant_slug, slug=agent_slug, is_active=True)
        .first()
    )
    _agents.put((tenant_slug, agent_slug), agent, generation)
    return agent


def _key_parts(presented: str) -> list[str] | None:
    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not _KEY_ID.fullmatch(parts[1]):
        return None
    return parts


def key_grant_cached(presented: str) -> KeyGrant | None:
    return _keys.get(hash_secret(presented)) if _key_parts(presented) else None


def key_grant(presented: str) -> KeyGrant | None:
    """What the presented key allows, if it is a key this server made and has not revoked
    (expiry is the caller's to check: it passes while the grant is cached)."""
    parts = _key_parts(presented)
    if parts is None:
        return None
    digest = hash_secret(presented)
    cached = _keys.get(digest)
    if cached is not None:
        return cached
    generation = _keys.generation
    # One query: a row per agent the key is limited to (one row with None when it is not).
    rows = list(
        ApiKey.objects.active()
        .filter(prefix=parts[1])
        .values_list("id", "tenant_id", "principal", "key_hash", "expires_at", "agents__id")
    )
    if not rows or not hmac.compare_digest(rows[0][3], digest):
        return None
    key_id, tenant_id, principal, _, expires_at, _ = rows[0]
    if principal_reserved(principal):
        # Made before such names were refused (docs/tenancy.md): it would be the server's own
        # principal. Refused, not renamed: its tasks keep the owner they were made with.
        if key_id not in _reserved_logged:  # once per process, not at every request it sends
            _reserved_logged.add(key_id)
            log.warning("API key %s (tenant %s) refused: its principal %r is reserved", parts[1], tenant_id, principal)
        return None
    agent_ids = frozenset(row[5] for row in rows if row[5] is not None)
    grant = KeyGrant(
        key_id=key_id,
        tenant_id=tenant_id,
        principal=principal,
        agent_ids=agent_ids or None,
        expires_at=expires_at,
    )
    _keys.put(digest, grant, generation)
    return grant


def key_touch_due(key_id: int) -> bool:
    """Whether this process should record the key's use now (once per LAST_USED_RESOLUTION)."""
    last = _last_touched.get(key_id)
    return last is None or time.monotonic() - last >= LAST_USED_RESOLUTION.total_seconds()


def key_touched(key_id: int) -> None:
    _last_touched[key_id] = time.monotonic()


def oidc_issuer_of(agent: Agent) -> OidcIssuer | None:
    """The agent's tenant's active OpenID Connect issuer, if it accepts bearer tokens (read
    with the agent by `agent_get`: no query)."""
    try:
        issuer = agent.tenant.oidc_issuer
    except OidcIssuer.DoesNotExist:
        return None
    return issuer if issuer.is_active else None


def tenant_ids_of(user: User, *, roles: tuple[str, ...] = tuple(Role.values)) -> QuerySet[Membership, int]:
    """The ids of the tenants `user` is a member of with one of `roles`."""
    return Membership.objects.filter(user=user, role__in=roles).values_list("tenant_id", flat=True)


def tenants_of(user: User) -> QuerySet[Tenant]:
    return Tenant.objects.filter(memberships__user=user)


def caches_clear() -> None:
    """Forget cached agents (with their issuers) and keys (tests; after bulk changes in a shell)."""
    _agents.clear()
    _keys.clear()


# --- executors a tenant may use (docs/tenancy.md, "Executors") ----------------------------

GRANT_HINT = "its operator grants installed executors"


def executors_for(tenant: Tenant) -> list[str]:
    """The executors `tenant`'s agents may use: every built-in one, and the installed ones
    (plugins) its operator granted that this install has."""
    granted = set(tenant.allowed_executors or [])
    return sorted(name for name, kind in agent_kinds.kinds().items() if kind.built_in or name in granted)


def executor_refusal(tenant: Tenant, executor: str) -> str | None:
    """Why `tenant`'s agents may not use `executor` now (not installed, or not granted), or None."""
    kind = agent_kinds.kinds().get(executor)
    if kind is None:
        usable = ", ".join(executors_for(tenant)) or "none"
        return f"no executor {executor!r} is installed on this server; {tenant.slug} may use {usable}"
    if not kind.built_in and executor not in (tenant.allowed_executors or []):
        return f"executor {executor!r} is not allowed for tenant {tenant.slug}; {GRANT_HINT}"
    return None


def executor_withdrawn(*, tenant_slug: str, executor: str) -> str | None:
    """At a run: why the agent's installed executor may no longer run for its tenant (the
    grant was withdrawn), or None: `executor_refusal`, for the tenant a run knows by its slug."""
    tenant = Tenant.objects.filter(slug=tenant_slug).only("slug", "allowed_executors").first()
    return executor_refusal(tenant, executor) if tenant is not None else None


@dataclass(frozen=True)
class Stranded:
    """An agent whose executor cannot run it now, and why (for the operator's overview)."""

    agent: Agent
    why: str


def agents_stranded(tenant_ids: list[int] | None = None) -> list[Stranded]:
    """Active agents whose executor is not installed (a plugin removed after they were saved)
    or no longer allowed for their tenant; `tenant_ids` None: every tenant's."""
    known = agent_kinds.kinds()
    plugins = {name for name, kind in known.items() if not kind.built_in}
    agents = Agent.objects.filter(is_active=True).select_related("tenant").order_by("tenant__slug", "slug")
    if tenant_ids is not None:
        agents = agents.filter(tenant_id__in=tenant_ids)
    # Only agents on something other than a built-in executor can be stranded.
    agents = agents.exclude(executor__in=[name for name, kind in known.items() if kind.built_in])
    found = []
    for agent in agents:
        if agent.executor in plugins and agent.executor in (agent.tenant.allowed_executors or []):
            continue
        why = executor_refusal(agent.tenant, agent.executor)
        if why is not None:
            found.append(Stranded(agent=agent, why=why))
    return found


# --- invitations ----------------------------------------------------------------------------


def invitations_pending() -> QuerySet[MembershipInvitation]:
    """Invitations that may still be accepted: unanswered, unexpired."""
    return MembershipInvitation.objects.filter(answer=InvitationAnswer.PENDING, expires_at__gt=timezone.now())


def invitations_pending_of(tenant: Tenant) -> QuerySet[MembershipInvitation]:
    return invitations_pending().filter(tenant=tenant).select_related("tenant")


def invitations_pending_for(user: User) -> QuerySet[MembershipInvitation]:
    """The pending invitations addressed to `user` (by their username), newest first."""
    return invitations_pending().filter(username=user.get_username()).select_related("tenant").order_by("-created_at")


def invitation_by_token(token: str) -> MembershipInvitation | None:
    """The invitation a link's token names (any state: the services say whether it is usable)."""
    if not token or len(token) > 200:
        return None
    return MembershipInvitation.objects.filter(token_hash=invitation_hash(token)).select_related("tenant").first()
