"""The tenant API's shapes: what it reads and what it answers (the OpenAPI document is derived
from these, so it is the shape clients get). Secrets are write-only: a new key's plaintext is
in the one answer that makes it, an agent's secret is never in any answer (only whether one
is set), push configs show whether they have credentials or a token, never them."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from accounts.models import MADE_BY_LENGTH, SLUG_LENGTH, HostProof, Role, RootCard
from groups.models import Credential, MembershipState
from push.models import ConfigStatus, DeliveryState
from registry.api.serializers import ErrorOut
from tasks_app.lifecycle import Dialect, TaskState

MAX_TEXT = 2000
MAX_URL = 500


def _one_of(values: Any) -> dict[str, str]:
    allowed = ", ".join(str(v) or '""' for v in values)
    return {"invalid_choice": f'"{{input}}" is not allowed here; use one of: {allowed}'}


def _choice(choices: Any, **kwargs: Any) -> serializers.ChoiceField:
    choices = list(choices)
    values = [c[0] if isinstance(c, tuple) else c for c in choices]
    return serializers.ChoiceField(choices=choices, error_messages=_one_of(values), **kwargs)


# A host name of an agent: claimed, or proven and served.
HOST_STATES = ["pending", "bound"]


ROLES = [Role.VIEWER.value, Role.OPERATOR.value, Role.OWNER.value]
MANAGEMENT_ROLES = ["", *ROLES]

__all__ = ["ErrorOut"]


class PageQuery(serializers.Serializer):
    cursor = serializers.CharField(required=False, max_length=500, help_text="The `next` cursor of the page before.")
    page_size = serializers.IntegerField(required=False, default=50, min_value=1, max_value=200)


# --- the tenant -----------------------------------------------------------------------------


class TenantOut(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    your_role = _choice(ROLES, help_text="The caller's role in the tenant API.")
    allowed_executors = serializers.ListField(
        child=serializers.CharField(),
        help_text="Installed executors (plugins) the operator lets this tenant's agents use, besides the built-ins.",
    )


class TenantIn(serializers.Serializer):
    name = serializers.CharField(max_length=200, help_text="The display name (the slug stays).")


# --- members --------------------------------------------------------------------------------


class MemberOut(serializers.Serializer):
    username = serializers.CharField()
    role = _choice(ROLES)
    created_at = serializers.DateTimeField()


class MembersOut(serializers.Serializer):
    results = MemberOut(many=True)
    next = serializers.CharField(allow_null=True)


class MemberIn(serializers.Serializer):
    username = serializers.CharField(
        max_length=150, help_text="Whom to invite: the username they have (or will have) on this server."
    )
    role = _choice(ROLES)


class InvitationOut(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    role = _choice(ROLES)
    invited_by = serializers.CharField(help_text="The user, key (key:<prefix>) or token subject that invited.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(help_text="It cannot be accepted from this time on.")


class InvitationCreatedOut(InvitationOut):
    accept_url = serializers.URLField(
        help_text="The page where the invited user, signed in, accepts or declines; shown once. Only that user "
        "can use it."
    )


class InvitationsOut(serializers.Serializer):
    results = InvitationOut(many=True)
    next = serializers.CharField(allow_null=True)


class MemberRoleIn(serializers.Serializer):
    role = _choice(ROLES)


# --- API keys -------------------------------------------------------------------------------


class KeyOut(serializers.Serializer):
    prefix = serializers.CharField(help_text="The key's public id (ask_<prefix>_…).")
    name = serializers.CharField()
    principal = serializers.CharField()
    management_role = _choice(MANAGEMENT_ROLES, help_text='The tenant API role ("": the key calls agents only).')
    agents = serializers.ListField(child=serializers.CharField(), help_text="Agents it may call (empty: all).")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)
    made_by = serializers.CharField(
        help_text="Who made it: key:<prefix>, oidc:<issuer>#<subject>, admin:<username> or command:<name> "
        '("": made before makers were recorded).'
    )


class KeysQuery(PageQuery):
    made_by = serializers.CharField(
        required=False, max_length=MADE_BY_LENGTH, help_text="Only the keys this maker made (exactly, as `made_by`)."
    )


class KeysRevokeIn(serializers.Serializer):
    made_by = serializers.CharField(
        max_length=MADE_BY_LENGTH,
        help_text="Revoke every key this maker made (exactly, as `made_by`), and the keys those keys made.",
    )


class KeysRevokedOut(serializers.Serializer):
    revoked = serializers.ListField(
        child=serializers.CharField(), help_text="The prefixes of the keys revoked now (not those revoked before)."
    )


class KeysOut(serializers.Serializer):
    results = KeyOut(many=True)
    next = serializers.CharField(allow_null=True)


class KeyCreatedOut(KeyOut):
    key = serializers.CharField(help_text="The whole key: shown in this answer only, never again.")


class KeyIn(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    principal = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=150,
        help_text="Who the key acts as (keys naming the same principal share their tasks); empty: the key itself.",
    )
    agents = serializers.ListField(
        child=serializers.SlugField(max_length=SLUG_LENGTH),
        required=False,
        max_length=100,
        help_text="Only these agents of the tenant (empty: all).",
    )
    expires_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When it stops working, at most API_KEY_MAX_LIFETIME (by default 365 days) away; empty: "
        "API_KEY_DEFAULT_LIFETIME (by default 90 days) from now.",
    )
    management_role = _choice(
        ["", *ROLES],
        required=False,
        default="",
        help_text="A role in the tenant API, at most your own, for a key without `agents`; empty: the key calls "
        "agents only.",
    )


# --- the OpenID Connect issuer --------------------------------------------------------------


class IssuerOut(serializers.Serializer):
    issuer = serializers.CharField()
    audience = serializers.CharField()
    jwks_url = serializers.CharField()
    role_claim = serializers.CharField(help_text="The claim naming a token's role in this API (empty: none).")
    is_active = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class IssuerIn(serializers.Serializer):
    issuer = serializers.URLField(max_length=MAX_URL, help_text="The tokens' iss, exactly.")
    audience = serializers.CharField(max_length=MAX_URL, help_text="The aud a token must carry.")
    jwks_url = serializers.URLField(
        max_length=MAX_URL, help_text="Where the signing keys are (checked by the outbound guard now)."
    )
    role_claim = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=100,
        help_text="A claim naming a token's role in this API (viewer, operator, owner); empty: tokens call "
        "agents only. Left out: unchanged.",
    )


# --- agents ---------------------------------------------------------------------------------


class AgentOut(serializers.Serializer):
    slug = serializers.CharField()
    url = serializers.CharField(help_text="The agent's path on this server.")
    name = serializers.CharField()
    description = serializers.CharField()
    version = serializers.CharField()
    aic = serializers.CharField()
    executor = serializers.CharField()
    settings = serializers.JSONField()
    has_secret = serializers.BooleanField(help_text="Whether the executor's secret is set (it is never shown).")
    provider_organization = serializers.CharField()
    provider_url = serializers.CharField()
    icon_url = serializers.CharField()
    documentation_url = serializers.CharField()
    skills = serializers.JSONField()
    input_modes = serializers.JSONField()
    output_modes = serializers.JSONField()
    extensions = serializers.JSONField()
    has_extended_card = serializers.BooleanField()
    extended_card = serializers.JSONField(allow_null=True)
    streaming = serializers.BooleanField()
    push_notifications = serializers.BooleanField()
    is_public = serializers.BooleanField()
    shared_sandbox = serializers.BooleanField()
    is_active = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class AgentsOut(serializers.Serializer):
    results = AgentOut(many=True)
    next = serializers.CharField(allow_null=True)


class AgentIn(serializers.Serializer):
    """An agent's values; on update, only those given change. Their content (the executor, its
    settings, the card's skills and modes, a secret the executor needs) is checked by
    accounts.agent_services, as the admin and create_agent check it."""

    name = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(max_length=20000, required=False, allow_blank=True)
    version = serializers.CharField(max_length=50, required=False)
    aic = serializers.CharField(max_length=200, required=False, allow_blank=True)
    executor = serializers.CharField(max_length=64, required=False)
    settings = serializers.DictField(required=False, child=serializers.JSONField())
    provider_organization = serializers.CharField(max_length=200, required=False, allow_blank=True)
    provider_url = serializers.CharField(max_length=MAX_URL, required=False, allow_blank=True)
    icon_url = serializers.CharField(max_length=MAX_URL, required=False, allow_blank=True)
    documentation_url = serializers.CharField(max_length=MAX_URL, required=False, allow_blank=True)
    skills = serializers.ListField(required=False, child=serializers.JSONField(), max_length=200)
    input_modes = serializers.ListField(required=False, child=serializers.JSONField(), max_length=100)
    output_modes = serializers.ListField(required=False, child=serializers.JSONField(), max_length=100)
    extensions = serializers.ListField(required=False, child=serializers.JSONField(), max_length=100)
    has_extended_card = serializers.BooleanField(required=False)
    # Its members are checked by accounts.card_content, member by member, as the admin's are.
    extended_card = serializers.DictField(
        required=False,
        allow_null=True,
        child=serializers.JSONField(allow_null=True),
        help_text='What authenticated callers see in addition: {"skills": [...]} added to the card\'s, and '
        "description, documentationUrl, iconUrl in place of the card's. Any other member (url, interfaces, "
        "provider, name, security, signatures, capabilities) is refused: the rest of the card is the server's.",
    )
    streaming = serializers.BooleanField(required=False)
    push_notifications = serializers.BooleanField(required=False)
    is_public = serializers.BooleanField(required=False)
    shared_sandbox = serializers.BooleanField(required=False)
    is_active = serializers.BooleanField(required=False)
    secret = serializers.CharField(
        required=False,
        allow_blank=True,
        write_only=True,
        trim_whitespace=False,
        max_length=1000,
        help_text="The executor's secret (a webhook agent's signing secret, a fronted agent's credential): "
        'stored encrypted, never returned; "" removes it.',
    )


class AgentCreateIn(AgentIn):
    slug = serializers.SlugField(
        max_length=SLUG_LENGTH, help_text="The agent's path segment: /agents/<tenant>/<slug>/."
    )
    name = serializers.CharField(max_length=200)
    executor = serializers.CharField(max_length=64)


# --- tasks ----------------------------------------------------------------------------------


class TaskQuery(PageQuery):
    agent = serializers.SlugField(required=False, max_length=SLUG_LENGTH, help_text="The agent's slug.")
    state = serializers.ListField(
        child=_choice(TaskState.choices), required=False, max_length=10, help_text="Tasks in this state (repeatable)."
    )
    dialect = _choice(Dialect.choices, required=False)
    owner = serializers.CharField(required=False, max_length=150, help_text="The principal that created the task.")
    changed_after = serializers.DateTimeField(required=False, help_text="Last changed at or after this time.")
    changed_before = serializers.DateTimeField(required=False, help_text="Last changed before this time.")
    q = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=1000,
        help_text="A task, context or message id (exactly), or words of a message's text.",
    )


class TaskOut(serializers.Serializer):
    id = serializers.UUIDField()
    agent = serializers.CharField(help_text="The agent's slug.")
    owner = serializers.CharField(help_text="The principal that created it.")
    state = _choice(TaskState.choices)
    dialect = _choice(Dialect.choices)
    context_id = serializers.CharField()
    client_task_id = serializers.CharField(allow_null=True)
    failure = serializers.CharField(help_text="Why the server failed it (empty: it did not).")
    created_at = serializers.DateTimeField()
    status_timestamp = serializers.DateTimeField()
    message_count = serializers.IntegerField()
    artifact_count = serializers.IntegerField()


class TasksOut(serializers.Serializer):
    results = TaskOut(many=True)
    next = serializers.CharField(allow_null=True)


class TimelineEntryOut(serializers.Serializer):
    kind = serializers.CharField(help_text="message (a user's), status, artifact or a message event.")
    seq = serializers.IntegerField(allow_null=True, help_text="The event's seq (a user message has none).")
    at = serializers.DateTimeField()
    payload = serializers.JSONField(help_text="The stored event (or user message), in the store's canonical form.")


class TaskDetailOut(TaskOut):
    failure_status_code = serializers.IntegerField(
        allow_null=True, help_text="The HTTP status of the endpoint's answer that failed it, if one did."
    )
    failure_message = serializers.CharField(
        help_text="What the task's client reads about the failure (its status message; no endpoint's words)."
    )
    failure_reason = serializers.CharField(
        help_text="The server's full reason for a failure, quoting what the endpoint answered (bounded): "
        "operators and owners only, empty for viewers."
    )
    metadata = serializers.JSONField()
    timeline = TimelineEntryOut(many=True)
    timeline_page = serializers.IntegerField()
    timeline_pages = serializers.IntegerField()


class TaskDetailQuery(serializers.Serializer):
    timeline_page = serializers.IntegerField(required=False, default=1, min_value=1, max_value=10_000_000)


class CancelIn(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500)


# --- push -----------------------------------------------------------------------------------


class PushConfigQuery(PageQuery):
    task = serializers.UUIDField(required=False, help_text="Only this task's configs.")


class PushConfigOut(serializers.Serializer):
    id = serializers.IntegerField()
    config_id = serializers.CharField()
    task = serializers.UUIDField()
    url = serializers.CharField()
    auth_scheme = serializers.CharField()
    has_credentials = serializers.BooleanField(help_text="Credentials are set (never shown).")
    has_token = serializers.BooleanField(help_text="A token is set (never shown).")
    status = _choice(ConfigStatus.choices)
    delivered_seq = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class PushConfigsOut(serializers.Serializer):
    results = PushConfigOut(many=True)
    next = serializers.CharField(allow_null=True)


class DeliveryQuery(PageQuery):
    state = _choice(DeliveryState.choices, required=False)
    task = serializers.UUIDField(required=False)


class AttemptOut(serializers.Serializer):
    started_at = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.IntegerField()
    error = serializers.CharField()


class DeliveryOut(serializers.Serializer):
    id = serializers.IntegerField()
    event_id = serializers.CharField(help_text="<task id>:<seq>, what receivers deduplicate on.")
    task = serializers.UUIDField()
    config = serializers.IntegerField(help_text="The push config's id in this API.")
    config_id = serializers.CharField()
    seq = serializers.IntegerField()
    state = _choice(DeliveryState.choices)
    attempts = serializers.IntegerField()
    last_status_code = serializers.IntegerField(allow_null=True)
    last_error = serializers.CharField()
    created_at = serializers.DateTimeField()
    delivered_at = serializers.DateTimeField(allow_null=True)


class DeliveriesOut(serializers.Serializer):
    results = DeliveryOut(many=True)
    next = serializers.CharField(allow_null=True)


class DeliveryDetailOut(DeliveryOut):
    attempt_log = AttemptOut(many=True)


# --- agents' host names ---------------------------------------------------------------------


class HostOut(serializers.Serializer):
    host = serializers.CharField(help_text="Lower-case, IDNA-encoded, without a port.")
    card_version = _choice(
        RootCard.choices, help_text='The card a request naming no A2A version gets at the root ("": 1.0\'s).'
    )
    state = _choice(HOST_STATES, help_text="pending: claimed, served nowhere until proven.")
    proof = _choice(["", *HostProof.values], help_text="How it was bound (empty while pending).")
    proven_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    instructions = serializers.DictField(
        child=serializers.CharField(),
        help_text="While pending, what to publish and where: the DNS TXT record (`dns_name`, `dns_type`, "
        "`dns_value`) or the file (`http_url`, `http_content`); empty once bound.",
    )


class HostsOut(serializers.Serializer):
    results = HostOut(many=True)
    next = serializers.CharField(allow_null=True)


class HostClaimIn(serializers.Serializer):
    host = serializers.CharField(
        max_length=300, help_text="A DNS name or an IP address (no scheme, no path), not one of the server's own."
    )
    card_version = _choice(RootCard.choices, required=False, default="")


class HostVerifyIn(serializers.Serializer):
    method = _choice(
        [HostProof.DNS.value, HostProof.HTTP.value],
        help_text="dns: the TXT record at `_agentserver-verification.<host>`; http: the well-known file.",
    )


class HostVerifyOut(serializers.Serializer):
    bound = serializers.BooleanField(help_text="Whether the name is bound to the agent now.")
    detail = serializers.CharField(help_text="What the proof found, in a sentence.")
    host = HostOut()


# --- AIP group memberships ------------------------------------------------------------------


class GroupMembershipQuery(PageQuery):
    agent = serializers.SlugField(required=False, max_length=SLUG_LENGTH, help_text="The agent's slug.")
    state = _choice(MembershipState.choices, required=False)
    credential = _choice(Credential.choices, required=False)
    muted = serializers.BooleanField(required=False, allow_null=True, default=None)
    q = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=1000,
        help_text="A group id, a Leader's or member's AIC or an owner, exactly (the admin's search).",
    )


class GroupMembershipOut(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.CharField(help_text="The agent's slug.")
    owner = serializers.CharField(help_text="The principal of the Leader that invited the agent.")
    member_aic = serializers.CharField()
    group_id = serializers.CharField()
    leader_aic = serializers.CharField()
    protocol = serializers.CharField()
    partners = serializers.JSONField()
    host = serializers.CharField(help_text="The broker, as the Leader named it.")
    address = serializers.CharField(help_text="The address it resolved to and passed the outbound guard.")
    port = serializers.IntegerField()
    vhost = serializers.CharField()
    username = serializers.CharField(help_text="The broker login (its access token is never shown).")
    exchange = serializers.CharField()
    exchange_type = serializers.CharField()
    routing_key = serializers.CharField()
    queue = serializers.CharField()
    connection_name = serializers.CharField()
    node_name = serializers.CharField()
    state = _choice(MembershipState.choices)
    state_reason = serializers.CharField()
    credential = _choice(Credential.choices)
    api_key = serializers.CharField(allow_null=True, help_text="The prefix of the Leader's API key, if by one.")
    oidc_issuer = serializers.CharField(allow_null=True, help_text="The issuer of the Leader's token, if by one.")
    credential_expires_at = serializers.DateTimeField(allow_null=True)
    muted = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    joined_at = serializers.DateTimeField(allow_null=True)
    left_at = serializers.DateTimeField(allow_null=True)


class GroupMembershipsOut(serializers.Serializer):
    results = GroupMembershipOut(many=True)
    next = serializers.CharField(allow_null=True)


class GroupTaskOut(serializers.Serializer):
    task = serializers.UUIDField(help_text="The task's id in this API (tasks/<id>/).")
    published_seq = serializers.IntegerField(help_text="Updates up to this event went out to the group.")
    done = serializers.BooleanField(help_text="The task is over and its last update went out.")
    created_at = serializers.DateTimeField()


class GroupMembershipDetailOut(GroupMembershipOut):
    tasks = GroupTaskOut(many=True, help_text="The tasks it took in the group, oldest first, a page at a time.")
    tasks_page = serializers.IntegerField()
    tasks_pages = serializers.IntegerField()


class GroupMembershipDetailQuery(serializers.Serializer):
    tasks_page = serializers.IntegerField(required=False, default=1, min_value=1, max_value=10_000_000)
