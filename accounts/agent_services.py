"""The one way an agent's configuration is checked and written: the admin's agent form, the
`create_agent` command and the tenant API all come here, so the same input gets the same
answer everywhere (docs/executors.md, "Checked when saved").

`agent_check` says what is wrong with every field at once (AgentInvalid.problems, by field);
`agent_save` checks, then writes in a short transaction. Checking may take time: a fronted
agent's upstream card is fetched (its executor's `on_save`, through the outbound guard), so
it never runs inside a transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction

from outbound import ssrf

from . import agent_kinds, changes, sealing, storable
from .models import Agent, Tenant
from .selectors import executor_refusal
from .services import AccountError, agent_secret_check, agent_secret_set

ALL = "__all__"  # Django's NON_FIELD_ERRORS: a problem of the agent as a whole
SECRET = "secret"
# What a caller may set; the tenant and the slug are arguments of their own, the rest is the server's.
SETTABLE: frozenset[str] = frozenset(
    f.name for f in Agent._meta.concrete_fields if f.editable and f.name not in {"id", "tenant", "slug"}
)
# Card content an executor may offer (a fronted agent's upstream's), taken where it is empty.
OFFERABLE = ("name", "description", "skills", "input_modes", "output_modes")
_JSON_FIELDS = frozenset(f.name for f in Agent._meta.concrete_fields if f.get_internal_type() == "JSONField")
MAX_JSON_BYTES = 256 * 1024  # of one JSON field, serialized
_NOT_ALLOWED = ssrf.not_allowed("")
_NETS_HINT = " (this server reaches public addresses only, and the networks its OUTBOUND_ALLOW_NETS lists)"


class AgentInvalid(AccountError):
    """The agent cannot be saved as given; `problems` lists every problem by field (an Agent
    field's name, "secret", or "__all__")."""

    def __init__(self, problems: dict[str, list[str]]) -> None:
        self.problems = problems
        super().__init__(
            "; ".join(
                f"{field}: {message}" if field != ALL else message
                for field, messages in problems.items()
                for message in messages
            )
        )


@dataclass(frozen=True)
class Checked:
    """An agent's values as they will be stored (every settable field and the slug), and the
    secret to store (None: keep the one there is)."""

    slug: str
    values: dict[str, Any]
    secret: str | None


def agent_check(
    *, tenant: Tenant, slug: str, values: dict[str, Any], secret: str | None = None, agent: Agent | None = None
) -> dict[str, Any]:
    """The agent's values as they will be stored (every settable field and `slug`), with card
    content its executor offers filled in where it is empty; or AgentInvalid with every
    problem. `agent`: the one being changed (only the fields in `values` change); `secret`:
    None keeps the stored one, "" removes it, any other string sets it."""
    checked = check(tenant=tenant, slug=slug, values=values, secret=secret, agent=agent)
    return {"slug": checked.slug, **checked.values}


def agent_save(
    *, tenant: Tenant, slug: str, values: dict[str, Any], secret: str | None = None, agent: Agent | None = None
) -> Agent:
    """Check (as `agent_check`, outside any transaction: it may fetch a card over the
    network), then create or change the agent, its secret sealed; announced to every process."""
    checked = check(tenant=tenant, slug=slug, values=values, secret=secret, agent=agent)
    return agent_write(tenant=tenant, checked=checked, agent=agent)


def check(
    *, tenant: Tenant, slug: str, values: dict[str, Any], secret: str | None = None, agent: Agent | None = None
) -> Checked:
    """`agent_check`'s work, kept for a caller that writes later with `agent_write` (the admin
    checks in its form's clean and writes in save_model, without fetching twice)."""
    problems: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        problems.setdefault(field, []).append(message)

    if agent is not None and agent.tenant_id != tenant.pk:
        raise AgentInvalid({ALL: [f"the agent is not one of {tenant.slug}'s"]})
    if not isinstance(values, dict):
        raise AgentInvalid({ALL: ["the values must be an object of the agent's fields"]})
    candidate = _candidate(tenant, agent)
    given: dict[str, Any] = {}
    for key, value in values.items():
        if not isinstance(key, str) or key not in SETTABLE:
            add(ALL, f"{storable.brief(key)} is not a field of an agent that can be set")
            continue
        problem = _storable(value, field=key, json_field=key in _JSON_FIELDS)
        if problem:
            add(key, problem)
            continue
        given[key] = value
        setattr(candidate, key, value)
    if not isinstance(slug, str):
        add("slug", "must be a string")
    elif problem := _storable(slug, field="slug", json_field=False):
        add("slug", problem)
    else:
        candidate.slug = slug
    if secret is not None:
        if not isinstance(secret, str):
            add(SECRET, "must be a string")
        elif secret:
            try:
                agent_secret_check(secret)
            except AccountError as exc:
                add(SECRET, str(exc))

    # Name and description may be left for the executor's offer (or the defaults) to fill.
    empty = {f for f in OFFERABLE if f not in problems and _empty(getattr(candidate, f, None))}
    try:
        candidate.full_clean(
            exclude=[*problems, *(f for f in ("name", "description") if f in empty)],
            validate_unique=False,
            validate_constraints=False,
        )
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            for message in messages:
                add(field, message)
    if "slug" not in problems:
        taken = Agent.objects.filter(tenant=tenant, slug=candidate.slug)
        if agent is not None:
            taken = taken.exclude(pk=agent.pk)
        if taken.exists():
            add("slug", f"{tenant.slug} has an agent {candidate.slug!r} already")

    offered = _executor_checks(tenant, candidate, agent, given, secret, add, problems)
    for field in sorted(empty):
        if field in problems:
            continue
        value = _offered(candidate, field, offered.get(field))
        if value is None and field == "name":
            value = candidate.slug
        elif value is None and field == "description":
            value = f"The {candidate.slug} agent."
        if value is not None:
            setattr(candidate, field, value)
    if problems:
        raise AgentInvalid(problems)
    return Checked(
        slug=candidate.slug,
        values={field: getattr(candidate, field) for field in sorted(SETTABLE)},
        secret=secret,
    )


def agent_write(*, tenant: Tenant, checked: Checked, agent: Agent | None = None) -> Agent:
    """Store what `check` returned, in one short transaction (no network)."""
    try:
        with transaction.atomic():
            if agent is None:
                saved = Agent(tenant=tenant, slug=checked.slug, **checked.values)
                if checked.secret:
                    agent_secret_set(agent=saved, secret=checked.secret, save=False)
                saved.save(force_insert=True)
            else:
                saved = Agent.objects.select_for_update().select_related("tenant").get(pk=agent.pk, tenant=tenant)
                changed = [f for f, v in checked.values.items() if getattr(saved, f) != v]
                for field in changed:
                    setattr(saved, field, checked.values[field])
                if saved.slug != checked.slug:
                    saved.slug = checked.slug
                    changed.append("slug")
                if checked.secret is not None:
                    agent_secret_set(agent=saved, secret=checked.secret, save=False)
                    changed.append("secret_sealed")
                if changed:
                    saved.save(update_fields=[*changed, "updated_at"])
            changes.announce_on_commit()
    except IntegrityError:
        # Another save took the slug between the check and this write.
        raise AgentInvalid({"slug": [f"{tenant.slug} has an agent {checked.slug!r} already"]}) from None
    return saved


def tenant_executors_check(*, tenant: Tenant | None, executors: list[str]) -> list[str]:
    """The grant as it will be stored (sorted, once each), or AccountError saying what cannot
    be granted: a built-in executor (every tenant has those), or a name this install does not
    have, unless `tenant` holds it already (a plugin removed since stays grantable: its
    agents are flagged, not changed)."""
    if isinstance(executors, str | bytes) or not all(isinstance(name, str) for name in executors):
        raise AccountError("executors must be a list of executor names")
    known = agent_kinds.kinds()
    names = sorted(set(executors))
    built_in = [n for n in names if n in known and known[n].built_in]
    if built_in:
        raise AccountError(
            f"{', '.join(map(repr, built_in))} {'is' if len(built_in) == 1 else 'are'} built in: every tenant may "
            "use the built-in executors"
        )
    held = set(tenant.allowed_executors or []) if tenant is not None else set()
    missing = [n for n in names if n not in known and n not in held]
    if missing:
        installed = sorted(n for n, kind in known.items() if not kind.built_in)
        raise AccountError(
            f"no installed executor {', '.join(map(storable.brief, missing))}; this server has "
            f"{', '.join(installed) or 'none installed'}"
        )
    return names


def tenant_executors_set(*, tenant: Tenant, executors: list[str]) -> Tenant:
    """The installed executors (plugins) `tenant`'s agents may use besides the built-in ones:
    the operator's grant (AccountError says what cannot be granted). An agent whose executor
    is withdrawn keeps it; its runs fail as misconfigured, and the overview flags it."""
    names = tenant_executors_check(tenant=tenant, executors=executors)
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        locked.allowed_executors = names
        locked.save(update_fields=["allowed_executors", "updated_at"])
        changes.announce_on_commit()
    tenant.allowed_executors = names
    return locked


# --- the parts -----------------------------------------------------------------------------


def _candidate(tenant: Tenant, agent: Agent | None) -> Agent:
    """An unsaved copy of `agent` (or a new agent) to set the values on and validate."""
    if agent is None:
        return Agent(tenant=tenant)
    copy = Agent(**{f.attname: getattr(agent, f.attname) for f in Agent._meta.concrete_fields})
    copy.tenant = tenant
    copy._state.adding = False
    return copy


def _executor_checks(
    tenant: Tenant,
    candidate: Agent,
    agent: Agent | None,
    given: dict[str, Any],
    secret: str | None,
    add: Any,
    problems: dict[str, list[str]],
) -> dict[str, Any]:
    """The executor is one the tenant may use, its settings fit it, it has the secret it
    needs, and its own check when saved passes; what it offers for the card. Only when the
    executor, its settings or the secret change: an agent whose executor was withdrawn may
    still be edited otherwise (switched off, its card changed)."""
    if {"executor", "settings", SECRET} & problems.keys():
        return {}
    changing = (
        agent is None
        or candidate.executor != agent.executor
        or ("settings" in given and candidate.settings != agent.settings)
        or secret is not None
    )
    if not changing:
        return {}
    refusal = executor_refusal(tenant, candidate.executor)
    if refusal:
        add("executor", refusal)
        return {}
    for problem in agent_kinds.settings_problems(candidate.executor, candidate.settings):
        add("settings" if problem.startswith("settings") else "executor", _hinted(problem))
    kind = agent_kinds.kinds()[candidate.executor]
    current = _secret_now(agent, secret)
    if current is None:
        if kind.secret_required or kind.on_save is not None:
            add(
                SECRET,
                "the stored secret cannot be decrypted with this server's keys (PUSH_CREDENTIALS_KEY): set it again",
            )
        return {}
    if kind.secret_required and not current:
        add(
            SECRET,
            f"a {candidate.executor} agent needs a secret (its runs are signed or authenticated with it): "
            "generate one or set one",
        )
    if problems or kind.on_save is None:
        return {}
    found, offered = agent_kinds.on_save_problems(candidate.executor, candidate.settings, current)
    for problem in found:
        add("settings" if problem.startswith("settings") else "executor", _hinted(problem))
    return offered


def _secret_now(agent: Agent | None, secret: str | None) -> str | None:
    """The secret the agent will have; None when the stored one cannot be opened."""
    if secret is not None:
        return secret
    if agent is None:
        return ""
    try:
        return sealing.unseal(agent.secret_sealed)
    except sealing.Unsealable:
        return None


def _offered(candidate: Agent, field: str, value: Any) -> Any:
    """An offered value the field takes as it is, else None (an upstream's card is not ours
    to refuse the agent for: a skill our schema does not take is left out)."""
    if value is None or _empty(value) or _storable(value, field=field, json_field=field in _JSON_FIELDS):
        return None
    model_field = Agent._meta.get_field(field)
    assert isinstance(model_field, models.Field)  # the card's fields are the model's own, never relations
    if isinstance(value, str):
        value = value[: model_field.max_length] if model_field.max_length else value
    try:
        return model_field.clean(value, candidate)
    except ValidationError:
        return None


def _hinted(problem: str) -> str:
    """A refusal by the outbound guard names the setting that decides it (create_agent runs
    with its shell's environment, which may not be the server's)."""
    return problem + _NETS_HINT if _NOT_ALLOWED in problem and "OUTBOUND_ALLOW_NETS" not in problem else problem


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _storable(value: Any, *, field: str, json_field: bool) -> str | None:
    """What the store would refuse of `value` (storable.check's rules, named by `field`), or a
    JSON field's value larger than the agent's columns take; None when it can be stored."""
    try:
        storable.check(value, where=field)
    except storable.Refused as exc:
        return str(exc)
    if json_field and len(storable.dumps(value)) > MAX_JSON_BYTES:
        return f"is larger than {MAX_JSON_BYTES} bytes as JSON"
    return None
