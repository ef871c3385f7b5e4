"""Every write of the directory: submitting, proving a domain, curators' decisions, flags,
hosted agents' entries, and the liveness check.

Network I/O (reading a card, a JWKS, a domain proof, probing an endpoint) happens before a
transaction opens, never inside one. A change of state is one short transaction that takes
the entry's row lock, so two curators (or a curator and the liveness job) cannot both decide.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import orjson
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.contrib.postgres.search import SearchVector
from django.db import IntegrityError, connection, transaction
from django.db.models import Q, Value
from django.utils import timezone

from accounts import storable
from accounts.models import Agent, Tenant
from protocols import dialects

from . import attestations, cards, listing_cache, probe, proofs
from .models import (
    CardVersion,
    Decision,
    Entry,
    Facet,
    FacetKind,
    Flag,
    Health,
    HealthCheck,
    Kind,
    ProofMethod,
    State,
)
from .selectors import facet_value

User = AbstractBaseUser | AnonymousUser
Role = Literal["owner", "curator", "system"]


class RegistryError(ValueError):
    """A change that cannot be made as asked; the message says why. `code` tells an API which
    answer fits: invalid (400), forbidden (403), conflict (409), unavailable (502)."""

    def __init__(self, message: str, *, code: str = "invalid", problems: list[cards.Problem] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.problems = problems or []


# Who may move an entry from one state to another. The server itself ("system") only sends a
# changed card back to review and submits an entry whose domain was just proven.
TRANSITIONS: dict[tuple[str, str], frozenset[str]] = {
    (State.DRAFT, State.PENDING): frozenset({"owner", "curator", "system"}),
    (State.REJECTED, State.PENDING): frozenset({"owner", "curator"}),
    # The server approves only a card that went back to the very version a curator approved.
    (State.PENDING, State.APPROVED): frozenset({"curator", "system"}),
    (State.PENDING, State.REJECTED): frozenset({"curator"}),
    (State.PENDING, State.SUSPENDED): frozenset({"curator"}),
    (State.APPROVED, State.PENDING): frozenset({"system"}),
    (State.APPROVED, State.SUSPENDED): frozenset({"curator"}),
    (State.APPROVED, State.DEPRECATED): frozenset({"owner", "curator"}),
    (State.DEPRECATED, State.APPROVED): frozenset({"owner", "curator"}),
    (State.DEPRECATED, State.SUSPENDED): frozenset({"curator"}),
    (State.SUSPENDED, State.APPROVED): frozenset({"curator"}),
    (State.SUSPENDED, State.PENDING): frozenset({"curator"}),
    # An unproven draft expires by itself: after REGISTRY_DRAFT_LIFETIME, or as soon as another
    # submission of its card proves the domain (drafts_expire, entry_verify_domain).
    (State.DRAFT, State.EXPIRED): frozenset({"system"}),
}
# A decision that takes something away says why; approving and submitting may go without.
REASON_REQUIRED = frozenset({State.REJECTED, State.SUSPENDED, State.DEPRECATED})


REASON_LENGTH = 2000


def _text(value: str, *, where: str) -> str:
    """A person's text bound for a column (a reason, a resolution): storable and not too long."""
    try:
        return storable.check_text(value.strip(), where=where, max_length=REASON_LENGTH)
    except storable.Refused as exc:
        raise RegistryError(str(exc)) from None


def allowed_targets(entry: Entry, role: Role) -> list[str]:
    """The states `role` may move `entry` to now (for forms and the API's links): review and
    approval only once the domain is proven."""
    return [
        to
        for (frm, to), roles in TRANSITIONS.items()
        if frm == entry.state
        and role in roles
        and (entry.domain_verified_at is not None or to not in (State.PENDING, State.APPROVED))
    ]


# --- reading a card (network I/O: outside any transaction) ------------------------------


@dataclass(frozen=True)
class ReadCard:
    fetched_from: str
    raw: str
    document: dict[str, Any]
    dialect: str
    index: cards.CardIndex
    hash: str
    etag: str
    signatures: list[dict[str, Any]]


def _read(document: dict[str, Any], *, raw: str, fetched_from: str, etag: str = "") -> ReadCard:
    """A card checked (CardRejected lists its problems) and indexed, its signatures verified."""
    version = cards.detect_version(document, fetched_from=fetched_from)
    problems = cards.validate(document, version)
    if problems:
        raise cards.CardRejected(problems)
    checks = cards.verify_signatures(document, card_url=fetched_from) if document.get("signatures") else []
    return ReadCard(
        fetched_from=fetched_from,
        raw=raw,
        document=document,
        dialect=version,
        index=cards.normalise(document, version),
        hash=cards.card_hash(document),
        etag=etag,
        signatures=[dataclasses.asdict(c) for c in checks],
    )


def read_remote_card(url: str) -> ReadCard:
    """The card behind a submitted URL, fetched through the SSRF guard and checked."""
    fetched = cards.fetch_card(url)
    return _read(
        fetched.document,
        raw=fetched.body.decode("utf-8"),
        fetched_from=fetched.url,
        etag=fetched.etag or "",
    )


def hosted_base_url() -> str:
    return settings.PUBLIC_BASE_URL or settings.REGISTRY_HOSTED_BASE_URL


def read_hosted_card(agent: Agent) -> ReadCard:
    """A hosted agent's card as its clients get it (generated here, nothing fetched)."""
    card = dialects.default().card
    assert card is not None  # the default dialect is A2A's, which has a card
    document = card(agent, base_url=hosted_base_url())
    return _read(document, raw=orjson.dumps(document).decode(), fetched_from=hosted_card_url(agent))


def hosted_card_url(agent: Agent) -> str:
    # An agent's path ends with its slash (/agents/<tenant>/<agent>/).
    return f"{hosted_base_url()}{agent.path}.well-known/agent-card.json"


# --- the shown version's index ---------------------------------------------------------


def _facets(index: dict[str, Any]) -> list[tuple[str, str]]:
    values: list[tuple[str, str]] = []
    values += [(FacetKind.TAG, t) for t in index.get("tags", ())]
    values += [(FacetKind.SKILL, s["id"]) for s in index.get("skills", ()) if s.get("id")]
    values += [(FacetKind.INPUT_MODE, m) for m in index.get("input_modes", ())]
    values += [(FacetKind.OUTPUT_MODE, m) for m in index.get("output_modes", ())]
    values += [(FacetKind.CAPABILITY, c) for c in index.get("capabilities", ())]
    values += [(FacetKind.BINDING, b) for b in index.get("bindings", ())]
    values += [(FacetKind.PROTOCOL_VERSION, v) for v in index.get("protocol_versions", ())]
    values += [(FacetKind.SECURITY, s) for s in index.get("security_schemes", ())]
    seen: set[tuple[str, str]] = set()
    unique = []
    for kind, value in values:
        key = (str(kind), facet_value(kind, value))
        if key not in seen:
            seen.add(key)
            unique.append(key)
    return unique


def _reindex(entry: Entry) -> None:
    """Copy the shown version (the approved one, else the latest) into the entry's columns,
    facets and search vector. Inside the caller's transaction."""
    shown = entry.approved_version or entry.current_version
    if shown is None:
        return
    index = shown.index
    entry.name = str(index.get("name", ""))[:300]
    entry.description = str(index.get("description", ""))
    entry.provider = str(index.get("provider_organization", ""))[:300]
    entry.endpoint_url = str(index.get("url", ""))[:2048]
    entry.dialect = shown.dialect
    valid = [s for s in shown.signatures if s.get("valid")]
    entry.signed = bool(valid)
    entry.signing_kid = str(valid[0].get("kid", ""))[:200] if valid else ""
    entry.save(
        update_fields=[
            "name",
            "description",
            "provider",
            "endpoint_url",
            "dialect",
            "signed",
            "signing_kid",
            "updated_at",
        ]
    )
    Facet.objects.filter(entry=entry).delete()
    Facet.objects.bulk_create([Facet(entry=entry, kind=k, value=v) for k, v in _facets(index)])
    if connection.vendor == "postgresql":
        blocks = cards.search_text(cards.normalise(shown.document, shown.dialect))  # type: ignore[arg-type]
        vector: Any = None
        for weight in ("A", "B", "C", "D"):
            part = SearchVector(Value(blocks.get(weight, "")), config="english", weight=weight)
            vector = part if vector is None else vector + part
        Entry.objects.filter(pk=entry.pk).update(search=vector)


def _add_version(entry: Entry, card: ReadCard, *, at: datetime) -> CardVersion:
    last = entry.versions.order_by("-number").values_list("number", flat=True).first() or 0
    version = CardVersion.objects.create(
        entry=entry,
        number=last + 1,
        hash=card.hash,
        dialect=card.dialect,
        fetched_from=card.fetched_from[:2048],
        raw=card.raw,
        document=card.document,
        index=dataclasses.asdict(card.index),
        signatures=card.signatures,
        etag=card.etag[:300],
        fetched_at=at,
    )
    entry.current_version = version
    entry.save(update_fields=["current_version", "updated_at"])
    return version


def _decide(entry: Entry, *, to: str, actor: Any, reason: str, version: CardVersion | None, at: datetime) -> None:
    """Every change of an entry's state, the curators' and the server's. One about an entry that
    is or becomes listed changes the directory's counts: every process drops them on commit."""
    if to == State.APPROVED or entry.approved_version_id is not None:
        listing_cache.listing_changed()
    if entry.state == State.APPROVED and to != State.APPROVED:
        # What the directory attested held while the entry was approved; now a curator (or a
        # changed card, or a lapsed proof) says otherwise.
        attestations.revoke(entry=entry, reason=f"the entry is {to} now: {reason}", at=at)
    if to == State.APPROVED:
        # Checked and attested by the next beat, not a conformance interval later.
        entry.next_conformance_at = at
        entry.save(update_fields=["next_conformance_at", "updated_at"])
    Decision.objects.create(
        entry=entry,
        from_state=entry.state,
        to_state=to,
        actor=actor if getattr(actor, "pk", None) else None,
        reason=reason,
        version=version,
        at=at,
    )
    entry.state = to
    entry.state_changed_at = at
    entry.save(update_fields=["state", "state_changed_at", "updated_at"])


# --- submitting -----------------------------------------------------------------------


def entry_submit(*, url: str, user: Any, tenant: Tenant | None = None) -> Entry:
    """A remote agent submitted by its URL: its card fetched, checked and kept as version 1.
    The entry starts as a draft holding a domain-proof token of its own; proving the domain
    submits it for review. Someone else's unproven draft of the same card is no obstacle: each
    submitter proves for themselves, and the first to prove takes the card (the other drafts
    expire). Raises RegistryError (with the card's problems when it is invalid)."""
    url = url.strip()
    _refuse_taken(url, user)
    if getattr(user, "pk", None) and settings.REGISTRY_OPEN_DRAFTS_PER_USER > 0:
        open_drafts = Entry.objects.filter(kind=Kind.REMOTE, state=State.DRAFT, submitted_by=user).count()
        if open_drafts >= settings.REGISTRY_OPEN_DRAFTS_PER_USER:
            raise RegistryError(
                f"you have {open_drafts} unproven drafts: prove their domains (or let them expire) "
                "before submitting more",
                code="conflict",
            )
    card = _read_or_fail(url)
    _refuse_taken(card.fetched_from, user)
    now = timezone.now()
    try:
        with transaction.atomic():
            entry = Entry.objects.create(
                kind=Kind.REMOTE,
                tenant=tenant,
                submitted_by=user if getattr(user, "pk", None) else None,
                card_url=card.fetched_from,
                domain=proofs.domain_of(card.fetched_from),
                state=State.DRAFT,
                state_changed_at=now,
                proof_token=proofs.new_token(),
                # Not checked until its domain is proven: the submitter may not own that host.
                next_check_at=None,
            )
            version = _add_version(entry, card, at=now)
            Decision.objects.create(
                entry=entry,
                from_state="",
                to_state=State.DRAFT,
                actor=entry.submitted_by,
                reason="submitted",
                version=version,
                at=now,
            )
            _reindex(entry)
    except IntegrityError:
        raise RegistryError("this card is in the directory already", code="conflict") from None
    return entry


def _refuse_taken(url: str, user: Any) -> None:
    """409 for a card whose domain someone proved already, or that `user` submitted already."""
    remote = Entry.objects.filter(kind=Kind.REMOTE, card_url=url)
    proven = remote.filter(domain_verified_at__isnull=False).values_list("pk", flat=True).first()
    if proven is not None:
        raise RegistryError(f"this card is in the directory already (entry {proven})", code="conflict")
    if getattr(user, "pk", None):
        own = remote.filter(state=State.DRAFT, submitted_by=user).values_list("pk", flat=True).first()
        if own is not None:
            raise RegistryError(
                f"you submitted this card already (entry {own}): publish that entry's proof token and verify",
                code="conflict",
            )


def _read_or_fail(url: str) -> ReadCard:
    try:
        return read_remote_card(url)
    except cards.FetchFailed as exc:
        raise RegistryError(f"the card could not be read: {exc}", code="unavailable") from None
    except cards.CardRejected as exc:
        raise RegistryError(str(exc), problems=exc.problems) from None


# --- proving the domain ---------------------------------------------------------------


def entry_verify_domain(*, entry: Entry, method: str, actor: Any) -> proofs.ProofResult:
    """Look for the entry's token on its domain (network I/O first); on success the domain is
    proven and a draft goes to review, and every other submitter's draft of the same card
    expires: the first to prove takes the card."""
    if entry.kind != Kind.REMOTE:
        raise RegistryError("a hosted agent's domain is this server's: there is nothing to prove")
    if method not in (ProofMethod.HTTP, ProofMethod.DNS):
        raise RegistryError(f"method must be {ProofMethod.HTTP.value!r} or {ProofMethod.DNS.value!r}")
    if entry.state == State.EXPIRED:
        raise RegistryError(_EXPIRED, code="conflict")
    result = proofs.check(card_url=entry.card_url, token=entry.proof_token, method=method)  # type: ignore[arg-type]
    if not result.ok:
        return result
    now = timezone.now()
    lost_to: int | None = None
    with transaction.atomic():
        # Every entry of this card, locked in one order: two submitters proving at once queue here.
        group = list(Entry.objects.select_for_update().filter(kind=Kind.REMOTE, card_url=entry.card_url).order_by("pk"))
        locked = next((e for e in group if e.pk == entry.pk), None)
        if locked is None or locked.state == State.EXPIRED:
            raise RegistryError(_EXPIRED, code="conflict")
        winner = next((e for e in group if e.pk != locked.pk and e.domain_verified_at is not None), None)
        if winner is not None and locked.domain_verified_at is None:
            _expire_lost(locked, winner=winner, at=now)
            lost_to = winner.pk
        else:
            locked.domain_verified_at = now
            locked.domain_verified_by = method
            locked.next_check_at = locked.next_check_at or now
            # Proven again: a lapse is over, and the next re-check is a full interval away.
            locked.proof_checked_at, locked.proof_failures, locked.proof_lapsed_at = now, 0, None
            locked.next_proof_check_at = now + timedelta(seconds=settings.REGISTRY_PROOF_RECHECK_INTERVAL)
            locked.save(
                update_fields=[
                    "domain_verified_at",
                    "domain_verified_by",
                    "next_check_at",
                    "proof_checked_at",
                    "proof_failures",
                    "proof_lapsed_at",
                    "next_proof_check_at",
                    "updated_at",
                ]
            )
            if locked.state == State.DRAFT:
                _decide(
                    locked,
                    to=State.PENDING,
                    actor=actor,
                    reason=f"{_proven_what(locked)} proven ({result.detail}); submitted for review",
                    version=locked.current_version,
                    at=now,
                )
            for rival in group:
                if rival.pk != locked.pk and rival.state == State.DRAFT and rival.domain_verified_at is None:
                    _expire_lost(rival, winner=locked, at=now)
    if lost_to is not None:
        raise RegistryError(
            f"another submission of this card (entry {lost_to}) proved its domain first: this draft expired",
            code="conflict",
        )
    entry.refresh_from_db()
    return result


def _proven_what(entry: Entry) -> str:
    # The well-known file over plain http or another port than 443 proves a host:port, not the domain.
    return f"domain {entry.domain}" if entry.domain_proven else entry.proven


_EXPIRED = "this draft expired (its domain was not proven in time, or another submission proved it first)"


def _expire_lost(draft: Entry, *, winner: Entry, at: datetime) -> None:
    _decide(
        draft,
        to=State.EXPIRED,
        actor=None,
        reason=f"another submission of this card (entry {winner.pk}) proved control of {winner.domain} first",
        version=draft.current_version,
        at=at,
    )


# --- decisions ------------------------------------------------------------------------


def entry_decide(*, entry: Entry, to: str, actor: Any, role: Role, reason: str = "", version_hash: str = "") -> Entry:
    """Move an entry to state `to` as `role` (the caller checked the role is the actor's).
    Approving pins the current card version; `version_hash`, when given, must still be the
    current card's (the curator approves what they looked at, not a card that changed since)."""
    reason = _text(reason, where="the reason")
    if to in REASON_REQUIRED and not reason:
        raise RegistryError(f"a reason is required to make an entry {to}")
    now = timezone.now()
    with transaction.atomic():
        locked = Entry.objects.select_for_update(of=("self",)).select_related("current_version").get(pk=entry.pk)
        roles = TRANSITIONS.get((locked.state, to))
        if roles is None:
            raise RegistryError(f"an entry cannot go from {locked.state} to {to}", code="conflict")
        if role not in roles:
            raise RegistryError(
                f"only {' or '.join(sorted(roles))} may move an entry from {locked.state} to {to}", code="forbidden"
            )
        current = locked.current_version
        if to == State.PENDING and locked.domain_verified_at is None:
            raise RegistryError("prove control of the card's domain first (see proof instructions)")
        if to == State.APPROVED:
            if locked.domain_verified_at is None:
                raise RegistryError("the card's domain is not proven yet: it cannot be approved")
            if locked.proof_lapsed_at is not None:
                raise RegistryError(
                    "the domain proof lapsed (the token was not found again): prove the domain again first",
                    code="conflict",
                )
            if current is None:
                raise RegistryError("the entry has no card")
            if version_hash and version_hash != current.hash:
                raise RegistryError(
                    "the card changed since it was shown to you: review the new version", code="conflict"
                )
            if locked.state == State.DEPRECATED and locked.approved_version_id != current.pk:
                raise RegistryError(
                    "the card changed since it was approved: it goes through review first", code="conflict"
                )
        _decide(locked, to=to, actor=actor, reason=reason or _default_reason(to), version=current, at=now)
        if to == State.APPROVED:
            locked.approved_version = current
            locked.listed_at = locked.listed_at or now
            locked.save(update_fields=["approved_version", "listed_at", "updated_at"])
            _reindex(locked)
    return locked


def _default_reason(to: str) -> str:
    defaults: dict[str, str] = {State.APPROVED: "approved", State.PENDING: "submitted for review"}
    return defaults.get(to, to)


# --- flags ------------------------------------------------------------------------------


def entry_flag(*, entry: Entry, user: Any, reason: str) -> Flag:
    reason = _text(reason, where="a flag's reason")
    if not reason:
        raise RegistryError("say what is wrong with the entry")
    try:
        with transaction.atomic():
            return Flag.objects.create(entry=entry, user=user, reason=reason)
    except IntegrityError:
        raise RegistryError("you have flagged this entry already; a curator will look at it", code="conflict") from None


def flag_resolve(*, flag: Flag, user: Any, resolution: str) -> Flag:
    flag.resolved_at = timezone.now()
    flag.resolved_by = user
    flag.resolution = _text(resolution, where="the resolution") or "resolved"
    flag.save(update_fields=["resolved_at", "resolved_by", "resolution"])
    return flag


# --- hosted agents ----------------------------------------------------------------------


def hosted_entry_sync(*, agent_id: int) -> Entry | None:
    """A hosted agent's entry, made or brought up to date with its card. A new one goes
    straight to review (the domain is this server's); a changed card goes back to review."""
    agent = Agent.objects.select_related("tenant").filter(pk=agent_id).first()
    if agent is None:
        return None
    card = read_hosted_card(agent)
    now = timezone.now()
    with transaction.atomic():
        entry = Entry.objects.select_for_update().filter(agent=agent).first()
        if entry is None:
            entry = Entry.objects.create(
                kind=Kind.HOSTED,
                tenant=agent.tenant,
                agent=agent,
                card_url=hosted_card_url(agent),
                domain=proofs.domain_of(hosted_card_url(agent)),
                state=State.DRAFT,
                state_changed_at=now,
                domain_verified_at=now,
                domain_verified_by=ProofMethod.HOSTED,
                next_check_at=now,
            )
            version = _add_version(entry, card, at=now)
            _decide(
                entry, to=State.PENDING, actor=None, reason="hosted here: submitted for review", version=version, at=now
            )
            _reindex(entry)
        else:
            _follow_url(entry, hosted_card_url(agent))
            _apply_card(entry, card, at=now)
        _set_health(
            entry,
            ok=agent.is_active,
            at=now,
            card_ok=True,
            detail="" if agent.is_active else "the agent is switched off",
        )
    return entry


def _follow_url(entry: Entry, card_url: str) -> None:
    """A hosted entry's card URL is where the server serves its card now (PUBLIC_BASE_URL or
    REGISTRY_HOSTED_BASE_URL may have changed since the entry was made). Row locked."""
    if entry.card_url != card_url:
        entry.card_url, entry.domain = card_url, proofs.domain_of(card_url)
        entry.save(update_fields=["card_url", "domain", "updated_at"])


def _apply_card(entry: Entry, card: ReadCard, *, at: datetime) -> CardVersion | None:
    """Make `card` the entry's current one: a card seen before (the same canonical hash) is
    that version again, any other is kept as a new one. An approved entry whose card changed
    goes back to review (its approved version stays listed); one whose card is the approved
    one again, with nothing decided since the server sent it to review, is approved again.
    Inside a transaction, row locked. The version made, or None."""
    current = entry.current_version
    if current is not None and current.hash == card.hash:
        return None
    attestations.revoke_changed_card(entry=entry, card_hash=card.hash, at=at)
    earlier = entry.versions.filter(hash=card.hash).order_by("-number").first()
    if earlier is not None:
        entry.current_version = earlier
        entry.save(update_fields=["current_version", "updated_at"])
        last = entry.decisions.order_by("-at", "-id").first()
        reverted = (
            earlier.pk == entry.approved_version_id
            and entry.state == State.PENDING
            and entry.proof_lapsed_at is None
            and last is not None
            and last.actor_id is None
            and last.from_state == State.APPROVED
        )
        if reverted:
            _decide(
                entry,
                to=State.APPROVED,
                actor=None,
                reason=f"the card is the approved version {earlier.number} again",
                version=earlier,
                at=at,
            )
        if entry.approved_version_id is None:
            _reindex(entry)
        return None
    version = _add_version(entry, card, at=at)
    if entry.state == State.APPROVED:
        entry_back_to_review(entry=entry, why=f"the card changed (version {version.number})", version=version, at=at)
    if entry.approved_version_id is None:
        _reindex(entry)
    return version


def entry_back_to_review(*, entry: Entry, why: str, version: CardVersion | None, at: datetime) -> None:
    """The server sends an approved entry back to review (its card changed, its domain proof
    lapsed): its approved version stays listed, its attestation is withdrawn. Inside the
    caller's transaction, row locked; an entry in another state is left as it is."""
    if entry.state != State.APPROVED:
        return
    approved = entry.approved_version.number if entry.approved_version else "?"
    _decide(
        entry,
        to=State.PENDING,
        actor=None,
        reason=f"{why}; version {approved} stays listed until a curator decides",
        version=version,
        at=at,
    )


# --- liveness ---------------------------------------------------------------------------


def entries_due(*, now: datetime | None = None, limit: int = 200) -> list[int]:
    """Entries whose check is due, their next check moved on (a lease: the beat job does not
    hand the same entry out again while its check runs)."""
    now = now or timezone.now()
    with transaction.atomic():
        ids = list(
            Entry.objects.select_for_update(skip_locked=True)
            .filter(next_check_at__lte=now)
            .exclude(state__in=(State.REJECTED, State.EXPIRED))
            # Nothing is fetched for a card whose domain nobody proved: a submitter could
            # otherwise have the server poll any host, for ever.
            .exclude(kind=Kind.REMOTE, domain_verified_at__isnull=True)
            .order_by("next_check_at")
            .values_list("pk", flat=True)[:limit]
        )
        Entry.objects.filter(pk__in=ids).update(next_check_at=now + timedelta(seconds=settings.REGISTRY_CHECK_INTERVAL))
    return ids


def entry_check(*, entry_id: int, now: datetime | None = None) -> HealthCheck | None:
    """Re-read an entry's card and probe its endpoint; record the check and the entry's health.
    Safe to run twice: a check within half an interval of the last one is skipped."""
    now = now or timezone.now()
    gap = timedelta(seconds=settings.REGISTRY_CHECK_INTERVAL / 2)
    claimed = (
        Entry.objects.filter(pk=entry_id)
        .filter(Q(last_checked_at__isnull=True) | Q(last_checked_at__lte=now - gap))
        .update(last_checked_at=now)
    )
    if not claimed:
        return None
    entry = Entry.objects.select_related("agent").get(pk=entry_id)
    if entry.agent is not None:
        hosted_entry_sync(agent_id=entry.agent.pk)
        entry.refresh_from_db()
        assert entry.agent is not None
        return _record_check(
            entry,
            at=now,
            card_ok=True,
            endpoint_ok=entry.agent.is_active,
            status=None,
            latency=0,
            detail="" if entry.agent.is_active else "the agent is switched off",
        )
    card: ReadCard | None = None
    detail = ""
    try:
        card = read_remote_card(entry.card_url)
    except cards.FetchFailed as exc:
        detail = f"card: {exc}"
    except cards.CardRejected as exc:
        detail = f"card no longer valid: {exc}"
    endpoint = (card.index.url if card else "") or entry.endpoint_url
    result = probe.probe(url=endpoint) if endpoint else None
    if result is None:
        detail = "; ".join(filter(None, [detail, "no endpoint to probe"]))
    elif not result.ok:
        detail = "; ".join(filter(None, [detail, f"endpoint: {result.detail}"]))
    with transaction.atomic():
        locked = (
            Entry.objects.select_for_update(of=("self",))
            .select_related("current_version", "approved_version")
            .get(pk=entry_id)
        )
        if card is not None:
            _apply_card(locked, card, at=now)
        return _record_check(
            locked,
            at=now,
            card_ok=card is not None,
            endpoint_ok=bool(result and result.ok),
            status=result.status if result else None,
            latency=result.latency_ms if result else None,
            detail=detail,
        )


def _record_check(
    entry: Entry,
    *,
    at: datetime,
    card_ok: bool,
    endpoint_ok: bool,
    status: int | None,
    latency: int | None,
    detail: str,
) -> HealthCheck:
    check = HealthCheck.objects.create(
        entry=entry,
        at=at,
        ok=card_ok and endpoint_ok,
        card_ok=card_ok,
        endpoint_ok=endpoint_ok,
        status=status,
        latency_ms=latency,
        detail=detail[:2000],
    )
    entry.latency_ms = latency
    _set_health(entry, ok=check.ok, at=at, card_ok=card_ok, detail=detail)
    return check


def _set_health(entry: Entry, *, ok: bool, at: datetime, card_ok: bool, detail: str) -> None:
    if ok:
        entry.consecutive_failures = 0
        entry.last_ok_at = at
        entry.health = Health.HEALTHY
    else:
        # The row is locked by the caller: counting here cannot lose an update.
        entry.consecutive_failures += 1
        stale = entry.consecutive_failures >= settings.REGISTRY_STALE_AFTER_FAILURES or (
            entry.last_ok_at is not None and at - entry.last_ok_at > timedelta(seconds=settings.REGISTRY_STALE_AFTER)
        )
        entry.health = Health.STALE if stale else Health.DEGRADED
    entry.last_checked_at = at
    entry.save(
        update_fields=["consecutive_failures", "last_ok_at", "health", "last_checked_at", "latency_ms", "updated_at"]
    )


def checks_prune(*, older_than: timedelta, now: datetime | None = None) -> int:
    """Drop health checks older than `older_than` (uptime is reported over at most 30 days)."""
    deleted, _ = HealthCheck.objects.filter(at__lt=(now or timezone.now()) - older_than).delete()
    return deleted


def hosted_entries_sync() -> int:
    """Every hosted agent has its entry (an agent made before the registry, or while its
    signal was missed, gets one here)."""
    missing = list(Agent.objects.filter(registry_entry__isnull=True).values_list("pk", flat=True))
    for agent_id in missing:
        hosted_entry_sync(agent_id=agent_id)
    return len(missing)
