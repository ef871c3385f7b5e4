"""Writes for tenants, members, agents, API keys and issuers.

Every change a request's authentication depends on is announced (`changes.announce`) once it
commits, so that cached lookups in every web process are dropped before the next request.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from outbound import ssrf

from . import changes, sealing, storable
from .models import (
    PRINCIPAL_NAMESPACE_SEPARATOR,
    Agent,
    ApiKey,
    InvitationAnswer,
    Membership,
    MembershipInvitation,
    OidcIssuer,
    Role,
    StaffByMembership,
    Tenant,
)

KEY_PREFIX = "ask"
KEY_ID_HEX_LENGTH = 12  # the key's public id: 6 random bytes in hex
KEY_PRINCIPAL_NAMESPACE = "key"  # a key made without a principal is "key:<prefix>"
OIDC_PRINCIPAL_NAMESPACE = "oidc"  # a bearer token's subject is "oidc:<sub>"
# Names the server gives principals itself (accounts.selectors.Principal): a key naming one would
# be that caller, e.g. list every anonymous caller's tasks on a public agent. Compared casefolded,
# so that no look-alike by case reads as one in the admin or a log.
ANONYMOUS_PRINCIPAL = "anonymous"  # callers without a credential, on a public agent
SHARED_PRINCIPAL = "shared"  # every caller of a shared sandbox
RESERVED_PRINCIPALS = frozenset({ANONYMOUS_PRINCIPAL, SHARED_PRINCIPAL})
# last_used_at moves at most this often per key and process: never one write per request.
LAST_USED_RESOLUTION = timedelta(seconds=60)


class AccountError(ValueError):
    """A change that cannot be made as asked (the message says why)."""


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def principal_reserved(principal: str) -> bool:
    """Whether `principal` is (but for case and surrounding space) a name the server gives."""
    return principal.strip().casefold() in RESERVED_PRINCIPALS


def principal_check(principal: str) -> str:
    """A principal a tenant names itself: not blank, not a name the server gives a principal,
    and outside the server's namespaces."""
    principal = principal.strip()
    if not principal:
        raise AccountError("a principal must not be blank")
    if principal_reserved(principal):
        raise AccountError(
            f"a principal must not be {principal!r}: {', '.join(sorted(RESERVED_PRINCIPALS))} are the server's "
            "(callers without a key, a shared sandbox's callers)"
        )
    if PRINCIPAL_NAMESPACE_SEPARATOR in principal:
        raise AccountError(
            f"a principal must not contain {PRINCIPAL_NAMESPACE_SEPARATOR!r}: names with it are the server's "
            "(key:<prefix>, oidc:<subject>)"
        )
    if len(principal) > ApiKey._meta.get_field("principal").max_length:  # type: ignore[operator]
        raise AccountError("a principal must be at most 150 characters")
    return principal


def made_by_key(prefix: str) -> str:
    """The maker of a key a key made (through the tenant API)."""
    return f"{KEY_PRINCIPAL_NAMESPACE}{PRINCIPAL_NAMESPACE_SEPARATOR}{prefix}"


def made_by_token(issuer: str, subject: str) -> str:
    """The maker of a key an issuer's token made: the subject alone would name another person
    once the tenant trusts another issuer."""
    return f"{OIDC_PRINCIPAL_NAMESPACE}{PRINCIPAL_NAMESPACE_SEPARATOR}{issuer}#{subject}"


def made_by_user(username: str) -> str:
    """The maker of a key made in the admin."""
    return f"admin{PRINCIPAL_NAMESPACE_SEPARATOR}{username}"


def made_by_command(name: str) -> str:
    """The maker of a key a management command made (the server's operator)."""
    return f"command{PRINCIPAL_NAMESPACE_SEPARATOR}{name}"


def api_key_expiry(*, expires_at: datetime | None = None, never: bool = False) -> datetime | None:
    """A new key's expiry: the one asked for (in the future, at most API_KEY_MAX_LIFETIME away),
    else API_KEY_DEFAULT_LIFETIME from now. None only when `never` is asked for, which only the
    server's operator can ask (`create_api_key --no-expiry`): a key that outlives whatever made
    it is a choice made by hand, never a default."""
    if never:
        if expires_at is not None:
            raise AccountError("a key that never expires takes no expiry")
        return None
    now = timezone.now()
    if expires_at is None:
        return now + timedelta(seconds=settings.API_KEY_DEFAULT_LIFETIME)
    if expires_at <= now:
        raise AccountError("the expiry is in the past")
    latest = now + timedelta(seconds=settings.API_KEY_MAX_LIFETIME)
    if expires_at > latest:
        raise AccountError(
            f"the expiry is too far away: a key may live at most {_days(settings.API_KEY_MAX_LIFETIME)} "
            f"(API_KEY_MAX_LIFETIME), until {latest.isoformat(timespec='seconds')}"
        )
    return expires_at


def _days(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:g} days" if days >= 1 else f"{seconds:g} seconds"


def api_key_check(
    *,
    tenant: Tenant,
    principal: str | None = None,
    agents: Iterable[Agent] = (),
    expires_at: datetime | None = None,
    management_role: str = "",
    never_expires: bool = False,
) -> str | None:
    """The terms of a new key, checked (AccountError says what is wrong); the principal as
    it will be stored, or None for a key that is its own principal. Forms call this too."""
    agents = list(agents)
    foreign = [str(a) for a in agents if a.tenant_id != tenant.pk]
    if foreign:
        raise AccountError(f"a key of {tenant.slug} cannot call another tenant's agents: {', '.join(foreign)}")
    management_role_check(management_role, limited=bool(agents))
    api_key_expiry(expires_at=expires_at, never=never_expires)
    return principal_check(principal) if principal else None


def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    principal: str | None = None,
    agents: Iterable[Agent] = (),
    expires_at: datetime | None = None,
    management_role: str = "",
    made_by: str = "",
    never_expires: bool = False,
) -> tuple[ApiKey, str]:
    """Create a key; return it with the plaintext, which is shown once and never stored.
    Without `principal` the key is its own principal; with `agents` it calls only those; with
    `management_role` (and no `agents`) it also manages the tenant through its API (/api/v1/)
    with that role. It expires at `expires_at`, else after API_KEY_DEFAULT_LIFETIME
    (`api_key_expiry`); `made_by` records who made it (made_by_key, made_by_token…)."""
    agents = list(agents)
    principal = api_key_check(
        tenant=tenant,
        principal=principal,
        agents=agents,
        expires_at=expires_at,
        management_role=management_role,
        never_expires=never_expires,
    )
    management_role = management_role_check(management_role, limited=bool(agents))
    expires_at = api_key_expiry(expires_at=expires_at, never=never_expires)
    prefix = secrets.token_hex(KEY_ID_HEX_LENGTH // 2)
    plaintext = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        key = ApiKey.objects.create(
            tenant=tenant,
            name=name,
            principal=principal or made_by_key(prefix),
            prefix=prefix,
            key_hash=hash_secret(plaintext),
            expires_at=expires_at,
            management_role=management_role,
            made_by=made_by,
        )
        if agents:
            key.agents.set(agents)
    return key, plaintext


# Each role may do what the roles below it may (as in the admin: accounts.admin_scoping).
ROLE_RANK = {Role.VIEWER.value: 0, Role.OPERATOR.value: 1, Role.OWNER.value: 2}


def role_includes(held: str, needed: str) -> bool:
    """Whether a holder of role `held` may do what `needed` allows."""
    return held in ROLE_RANK and ROLE_RANK[held] >= ROLE_RANK[needed]


def management_role_check(role: str, *, at_most: str | None = None, limited: bool = False) -> str:
    """A key's management role ("" for none), and, given `at_most` (the role of whoever makes
    the key through the API), no more than that: nobody hands out more than they hold. A key
    `limited` to some agents gets none: the tenant API manages the whole tenant (every agent's
    tasks and settings, members, keys), which is more than such a key says it may touch."""
    role = (role or "").strip()
    if role and role not in ROLE_RANK:
        raise AccountError(f"no role {role!r}; roles are {', '.join(Role.values)} (or none)")
    if role and at_most is not None and not role_includes(at_most, role):
        raise AccountError(f"a key you make may hold at most your own role ({at_most}), not {role}")
    if role and limited:
        raise AccountError(
            f"a key limited to some agents cannot have a management role ({role}): the tenant API manages the "
            "whole tenant. Make one key for those agents and another, for all of them, to manage the tenant"
        )
    return role


def api_key_revoke(*, key: ApiKey) -> bool:
    """Revoke the key from the next request on, in every process; False if it already was."""
    with transaction.atomic():
        revoked = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        changes.announce_on_commit()
    key.refresh_from_db(fields=["revoked_at"])
    return bool(revoked)


def api_key_revoke_made_by(*, tenant: Tenant, made_by: str) -> list[ApiKey]:
    """Revoke every key of `tenant` that `made_by` made, and the keys those keys made, and so
    on (they were made with its authority), from the next request on, in every process; the
    keys revoked here (not those revoked before). A leaked token or key is undone in one call."""
    made_by = made_by.strip()
    if not made_by:
        raise AccountError("name who made the keys (made_by): keys made before makers were recorded have none")
    now = timezone.now()
    revoked: list[ApiKey] = []
    makers, seen = {made_by}, set()
    with transaction.atomic():
        while makers:
            seen |= makers
            made = list(ApiKey.objects.select_for_update().filter(tenant=tenant, made_by__in=makers).order_by("pk"))
            live = [key for key in made if key.revoked_at is None]
            ApiKey.objects.filter(pk__in=[key.pk for key in live]).update(revoked_at=now)
            for key in live:
                key.revoked_at = now
            revoked += live
            # Revoked before or now, a key's own keys go too.
            makers = {made_by_key(key.prefix) for key in made} - seen
        changes.announce_on_commit()
    return revoked


def api_key_keep(
    *, tenant: Tenant, name: str, principal: str, plaintext: str = "", made_by: str = ""
) -> tuple[ApiKey, str]:
    """The tenant's one working key named `name`, for `principal`: the key `plaintext` is (one
    made here before, which its caller kept) while it still works, else a new one; every other
    key of that name is revoked. Run as often as one likes (`seed_demo`, at each `make run`), it
    leaves one valid key, not a pile of them."""
    named = ApiKey.objects.filter(tenant=tenant, name=name, revoked_at__isnull=True)
    kept = None
    if plaintext:
        kept = (
            named.filter(key_hash=hash_secret(plaintext), principal=principal)
            .exclude(expires_at__lte=timezone.now())
            .first()
        )
    if kept is None:
        kept, plaintext = api_key_create(tenant=tenant, name=name, principal=principal, made_by=made_by)
    for stale in named.exclude(pk=kept.pk):
        api_key_revoke(key=stale)
    return kept, plaintext


def api_key_touch(*, key_id: int, at: datetime | None = None) -> None:
    """Record that the key was used (callers throttle this: see `LAST_USED_RESOLUTION`)."""
    at = at or timezone.now()
    ApiKey.objects.filter(pk=key_id).exclude(last_used_at__gt=at - LAST_USED_RESOLUTION).update(last_used_at=at)


def tenant_ensure(*, slug: str, name: str) -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
    return tenant


TENANT_NAME_LENGTH = 200


def tenant_rename(*, tenant: Tenant, name: str) -> Tenant:
    """Give the tenant another display name (its slug, in every agent URL, stays): on every
    card of its agents as the provider from the next request on."""
    name = name.strip()
    if not name:
        raise AccountError("a tenant's name must not be blank")
    if len(name) > TENANT_NAME_LENGTH:
        raise AccountError(f"a tenant's name must be at most {TENANT_NAME_LENGTH} characters")
    if any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in name):
        raise AccountError("a tenant's name must not hold control characters")
    tenant.name = name
    tenant.save(update_fields=["name", "updated_at"])
    return tenant


def _is_last_owner(membership: Membership) -> bool:
    others = Membership.objects.filter(tenant_id=membership.tenant_id, role=Role.OWNER).exclude(pk=membership.pk)
    return membership.role == Role.OWNER and not others.exists()


def member_role_set(*, membership: Membership, role: str) -> Membership:
    """Change a member's role; the tenant's last owner stays an owner."""
    if role not in Role.values:
        raise AccountError(f"no role {role!r}; roles are {', '.join(Role.values)}")
    with transaction.atomic():
        # Two owners demoting each other at once must not leave the tenant without one.
        list(Membership.objects.select_for_update().filter(tenant_id=membership.tenant_id, role=Role.OWNER))
        membership.refresh_from_db(fields=["role"])
        if role != Role.OWNER and _is_last_owner(membership):
            raise AccountError("the tenant's last owner stays an owner: make another member owner first")
        membership.role = role
        membership.save(update_fields=["role"])
    return membership


def member_remove(*, membership: Membership, last_owner_may_go: bool = False) -> None:
    """End a membership; the tenant's last owner stays (but for a superuser's repair,
    `last_owner_may_go`). The user's last membership ending takes back the staff that accepting
    one gave them (`StaffByMembership`), never staff given otherwise, never a superuser's."""
    with transaction.atomic():
        list(Membership.objects.select_for_update().filter(tenant_id=membership.tenant_id, role=Role.OWNER))
        membership.refresh_from_db(fields=["role"])
        if not last_owner_may_go and _is_last_owner(membership):
            raise AccountError("the tenant's last owner stays: make another member owner first")
        user_id = membership.user_id
        membership.delete()
        _staff_by_membership_end(user_id)


def _staff_by_membership_end(user_id: int) -> None:
    # Locked, so that an acceptance committing at once sees the user's staff as it is after this.
    user = User.objects.select_for_update().get(pk=user_id)
    if Membership.objects.filter(user_id=user_id).exists():
        return
    granted = StaffByMembership.objects.filter(user_id=user_id).delete()[0]
    if granted and user.is_staff and not user.is_superuser:
        user.is_staff = False
        user.save(update_fields=["is_staff"])


def _staff_by_membership_give(user: User) -> None:
    # Members work in the admin, which lets in staff only; what they see there is scoped. Staff
    # that was given otherwise is not recorded, so that the membership's end never takes it.
    if not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
        StaffByMembership.objects.get_or_create(user=user)


def member_add(*, tenant: Tenant, user: User, role: str) -> Membership:
    """Make `user` a member of `tenant` with `role`, or change the role they have (idempotent),
    without asking them: the server's operator at a shell (add_member, seed_demo). Everyone else
    invites (`membership_invite`)."""
    if role not in Role.values:
        raise AccountError(f"no role {role!r}; roles are {', '.join(Role.values)}")
    with transaction.atomic():
        user = User.objects.select_for_update().get(pk=user.pk)
        membership, _ = Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
        _staff_by_membership_give(user)
    return membership


def staff_make(*, user: User) -> User:
    """Make `user` staff on the operator's word (a curator): kept when their memberships end."""
    with transaction.atomic():
        user = User.objects.select_for_update().get(pk=user.pk)
        StaffByMembership.objects.filter(user=user).delete()
        if not user.is_staff:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
    return user


# --- invitations ----------------------------------------------------------------------------

INVITATION_TOKEN_BYTES = 32


class InvitationUnusable(AccountError):
    """The invitation cannot be answered by this user: unknown, someone else's, expired, revoked
    or answered already. One message for all, so that a token's holder learns nothing."""

    def __init__(self) -> None:
        super().__init__("no pending invitation for you with this link")


def invitation_hash(token: str) -> str:
    return hash_secret(token)


def membership_invite(
    *, tenant: Tenant, username: str, role: str, invited_by: User | None = None, invited_as: str = ""
) -> tuple[MembershipInvitation, str]:
    """Invite the user named `username` to `tenant` with `role`: an invitation and its token (the
    link's secret, shown once; only its hash is kept). Made alike whether or not such a user
    exists (the user table is not read), so the inviter learns nothing of who has an account; a
    pending invitation of the same name is replaced. Someone who is a member already is refused
    (the inviter sees the members): change their role instead."""
    token = secrets.token_urlsafe(INVITATION_TOKEN_BYTES)
    now = timezone.now()
    with transaction.atomic():
        # Two invitations of one name at once: the second waits for the first, then replaces it.
        list(Tenant.objects.select_for_update().filter(pk=tenant.pk))
        username = membership_invite_check(tenant=tenant, username=username, role=role)
        MembershipInvitation.objects.filter(tenant=tenant, username=username, answer=InvitationAnswer.PENDING).update(
            answer=InvitationAnswer.REVOKED, answered_at=now
        )
        invitation = MembershipInvitation.objects.create(
            tenant=tenant,
            username=username,
            role=role,
            invited_by=invited_by,
            invited_as=invited_as or (invited_by.get_username() if invited_by is not None else ""),
            token_hash=invitation_hash(token),
            expires_at=now + timedelta(days=settings.MEMBERSHIP_INVITATION_DAYS),
        )
    return invitation, token


def membership_invite_check(*, tenant: Tenant, username: str, role: str) -> str:
    """The username `membership_invite` would invite (stripped), or why it would refuse. Reads
    memberships only, never the user table: the same work for any name."""
    if role not in Role.values:
        raise AccountError(f"no role {role!r}; roles are {', '.join(Role.values)}")
    username = username.strip()
    if not username:
        raise AccountError("a username must not be blank")
    try:
        storable.check_text(username, where="a username", max_length=150)
    except storable.Refused as exc:
        raise AccountError(str(exc)) from None
    if Membership.objects.filter(tenant=tenant, user__username=username).exists():
        raise AccountError("already a member of this tenant: change their role instead")
    return username


def _answerable(invitation_pk: int, user: User) -> MembershipInvitation:
    found = MembershipInvitation.objects.select_for_update().filter(pk=invitation_pk).first()
    if (
        found is None
        or found.answer != InvitationAnswer.PENDING
        or found.expires_at <= timezone.now()
        or not user.is_active
        or found.username != user.get_username()
    ):
        raise InvitationUnusable()
    return found


def membership_accept(*, invitation: MembershipInvitation, user: User) -> Membership:
    """`user` accepts an invitation addressed to them (pending, unexpired): they become a member
    with its role and, if they were not staff, staff (recorded, so that it is taken back when
    their last membership ends). A superuser stays as they are."""
    with transaction.atomic():
        user = User.objects.select_for_update().get(pk=user.pk)
        found = _answerable(invitation.pk, user)
        membership, _ = Membership.objects.get_or_create(
            tenant_id=found.tenant_id, user=user, defaults={"role": found.role}
        )
        _staff_by_membership_give(user)
        found.answer, found.answered_at = InvitationAnswer.ACCEPTED, timezone.now()
        found.save(update_fields=["answer", "answered_at"])
    return membership


def membership_decline(*, invitation: MembershipInvitation, user: User) -> None:
    """`user` declines an invitation addressed to them; nothing else changes."""
    with transaction.atomic():
        found = _answerable(invitation.pk, user)
        found.answer, found.answered_at = InvitationAnswer.DECLINED, timezone.now()
        found.save(update_fields=["answer", "answered_at"])


def membership_revoke(*, invitation: MembershipInvitation) -> bool:
    """The tenant's owners withdraw a pending invitation: it can no longer be accepted. Whether
    it was pending (revoking an answered one changes nothing)."""
    return bool(
        MembershipInvitation.objects.filter(pk=invitation.pk, answer=InvitationAnswer.PENDING).update(
            answer=InvitationAnswer.REVOKED, answered_at=timezone.now()
        )
    )


def superuser_ensure(*, username: str, password: str) -> tuple[User, bool]:
    """A superuser named `username`: made with `password` if there is none, else left as it
    is (its password may be its owner's own now). With whether `password` signs it in. For a
    development machine (`make run` keeps the password in its run directory), never a server."""
    user = User.objects.filter(username=username).first()
    if user is None:
        return User.objects.create_superuser(username=username, email="", password=password), True
    return user, bool(user.is_active and user.is_superuser and user.check_password(password))


def agent_ensure(*, tenant: Tenant, slug: str, defaults: dict[str, Any]) -> Agent:
    """Create the agent, or bring an existing one's fields up to `defaults` (idempotent)."""
    agent, created = Agent.objects.get_or_create(tenant=tenant, slug=slug, defaults=defaults)
    if not created:
        changed = [field for field, value in defaults.items() if getattr(agent, field) != value]
        for field in changed:
            setattr(agent, field, defaults[field])
        if changed:
            agent.save(update_fields=[*changed, "updated_at"])
    return agent


# Standard Webhooks' secret form: "whsec_" and the base64 of the key's bytes (24 to 64 of them).
SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
MAX_SECRET_LENGTH = 1000


def agent_secret_generate() -> str:
    """A new secret in Standard Webhooks' form, for an agent's signing key."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def agent_secret_check(secret: str) -> str:
    """The secret, if it can be sent in a header as typed; else AccountError saying why."""
    if len(secret) > MAX_SECRET_LENGTH:
        raise AccountError(f"the secret is longer than {MAX_SECRET_LENGTH} characters")
    if secret != secret.strip() or any(ord(c) < 32 or ord(c) >= 127 for c in secret):
        raise AccountError("the secret must be printable ASCII without spaces at its ends")
    return secret


def agent_secret_set(*, agent: Agent, secret: str, save: bool = True) -> None:
    """Seal and store the agent's secret ("" removes it); with save=False only seal it onto
    `agent`, for a caller saving the agent anyway. Its executor reads it at each run."""
    agent_secret_check(secret)
    agent.secret_sealed = sealing.seal(secret)
    if save:
        agent.save(update_fields=["secret_sealed", "updated_at"])


def oidc_issuer_set(
    *, tenant: Tenant, issuer: str, audience: str, jwks_url: str, role_claim: str | None = None
) -> OidcIssuer:
    """Accept bearer tokens from `issuer` for `tenant`'s agents (replacing any issuer it had).
    The JWKS URL must pass the outbound guard now, not first on a caller's request. With
    `role_claim`, tokens carrying that claim naming a role also manage the tenant through its
    API (None keeps the claim the issuer had; "" removes it)."""
    try:
        ssrf.check(jwks_url, unresolvable_ok=True)
    except ssrf.Refused as exc:
        raise AccountError(f"jwks_url refused: {exc}") from None
    defaults: dict[str, Any] = {"issuer": issuer, "audience": audience, "jwks_url": jwks_url, "is_active": True}
    if role_claim is not None:
        defaults["role_claim"] = role_claim.strip()
    found, _ = OidcIssuer.objects.update_or_create(tenant=tenant, defaults=defaults)
    return found


def oidc_issuer_remove(*, tenant: Tenant) -> bool:
    """Stop accepting the tenant's issuer's tokens (from the next request on, in every
    process); False if it had none."""
    deleted, _ = OidcIssuer.objects.filter(tenant=tenant).delete()
    return bool(deleted)
