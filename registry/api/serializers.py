"""The API's shapes: what it reads (a search's query, the bodies of its POSTs) and what it
answers. The answers are built as plain dicts (registry.api.represent) and rendered through
these serializers, so the OpenAPI schema drf-spectacular derives from them is the shape
clients get."""

from __future__ import annotations

from typing import Any

from django.core.validators import URLValidator
from rest_framework import serializers

from ..models import URL_LENGTH, Dialect, Health, Kind, ProofMethod, State

CAPABILITIES = ("streaming", "push_notifications", "extended_card", "state_transition_history")
ORDERS = ("relevance", "recent")
MAX_QUERY = 1000
MAX_VALUE = 200
MAX_VALUES = 10


def _one_of(values: Any) -> dict[str, str]:
    allowed = ", ".join(str(v) for v in values)
    return {
        "invalid_choice": f'"{{input}}" is not allowed here; use one of: {allowed}',
        "required": f"this field is required; use one of: {allowed}",
        "null": f"this field may not be null; use one of: {allowed}",
    }


def _choice(choices: Any, **kwargs: Any) -> serializers.ChoiceField:
    """A choice among `choices` (values, or a model's (value, label) pairs, which the schema
    names by SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]); anything else is refused with the
    allowed values."""
    choices = list(choices)
    values = [c[0] if isinstance(c, tuple) else c for c in choices]
    return serializers.ChoiceField(choices=choices, error_messages=_one_of(values), **kwargs)


def _values(help_text: str, child: serializers.Field | None = None) -> serializers.ListField:
    return serializers.ListField(
        child=child or serializers.CharField(max_length=MAX_VALUE),
        required=False,
        max_length=MAX_VALUES,
        help_text=f"{help_text} Repeat the parameter for several values: entries must have all of them "
        f"(at most {MAX_VALUES}).",
    )


# --- reading --------------------------------------------------------------------------------


class SearchIn(serializers.Serializer):
    """The query of `GET /api/registry/agents/`."""

    q = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=MAX_QUERY,
        help_text="Full-text query over names, skills, tags, descriptions and examples "
        "(web search syntax: quoted phrases, OR, -word).",
    )
    tag = _values("A skill tag (case-insensitive).")
    skill = _values("A skill id (case-insensitive).")
    input_mode = _values("An input media type, e.g. text/plain.")
    output_mode = _values("An output media type, e.g. application/json.")
    capability = _values("A capability.", _choice(CAPABILITIES))
    binding = _values("A protocol binding: JSONRPC, HTTP+JSON, GRPC...")
    protocol_version = _values("A protocol version as cards declare it, e.g. 1.0 or 0.3.0.")
    security = _values("A security scheme type: apiKey, http, oauth2, openIdConnect, mutualTLS.")
    provider = serializers.CharField(
        required=False, allow_blank=True, max_length=300, help_text="The provider's organisation (exact, any case)."
    )
    verified = serializers.BooleanField(required=False, help_text="Whose card's domain is proven (or not).")
    signed = serializers.BooleanField(required=False, help_text="Whose shown card carries a valid signature.")
    healthy = serializers.BooleanField(required=False, help_text="Whose last liveness check passed (or not).")
    kind = _choice(Kind.choices, required=False, help_text="hosted (on this server) or remote.")
    deprecated = serializers.BooleanField(
        required=False, default=False, help_text="Include deprecated entries (left out by default)."
    )
    mine = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Signed in: your own entries (submitted by you or of your tenants), in every state.",
    )
    state = _values("Entries in this state, among those you may see (curators: every entry).", _choice(State.choices))
    order = _choice(
        ORDERS,
        required=False,
        help_text="relevance (the default with q) or recent (the most recently listed first; the default without q).",
    )
    cursor = serializers.CharField(
        required=False, max_length=1000, help_text="The `next` link's cursor: the page after the one it ended."
    )
    page_size = serializers.IntegerField(required=False, default=20, min_value=1, max_value=100)


class SubmitIn(serializers.Serializer):
    url = serializers.CharField(
        max_length=URL_LENGTH,
        help_text="The agent's card URL, or the agent's URL (its /.well-known/agent-card.json is read).",
    )
    tenant = serializers.SlugField(
        required=False,
        allow_blank=True,
        max_length=100,
        help_text="The tenant the entry belongs to: one you are an operator or owner of.",
    )

    def validate_url(self, value: str) -> str:
        value = value.strip()
        URLValidator(schemes=["http", "https"], message="enter an http or https URL")(value)
        return value


class VerifyIn(serializers.Serializer):
    method = _choice(
        [ProofMethod.HTTP.value, ProofMethod.DNS.value],
        help_text="Where to look for the token: http (the file at the card host's "
        "/.well-known/agentserver-verification.txt) or dns (the TXT record at _agentserver-verification.<host>).",
    )


class TransitionIn(serializers.Serializer):
    to = _choice(State.choices, help_text="The state to move the entry to (see allowed_transitions).")
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=2000,
        help_text="Why; required to reject, suspend or deprecate.",
    )
    version_hash = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=64,
        help_text="Approving: the hash of the card version you reviewed (refused with 409 if the card changed).",
    )


class FlagIn(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, help_text="What is wrong with the entry.")


# --- answering ------------------------------------------------------------------------------


class ErrorOut(serializers.Serializer):
    detail = serializers.CharField(help_text="What went wrong, in a sentence.")
    errors = serializers.DictField(
        required=False, help_text="A refused body or query: field -> messages.", child=serializers.JSONField()
    )
    problems = serializers.ListField(
        required=False,
        help_text="A refused card: each problem with its JSON pointer.",
        child=serializers.DictField(child=serializers.CharField()),
    )


class SkillOut(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()


def _strings(help_text: str = "") -> serializers.ListField:
    return serializers.ListField(child=serializers.CharField(), help_text=help_text)


class EntrySummaryOut(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.URLField(help_text="This entry in the API.")
    page_url = serializers.URLField(help_text="This entry's page in the directory.")
    name = serializers.CharField()
    description = serializers.CharField()
    provider = serializers.CharField(help_text="The provider's organisation ('' if the card names none).")
    kind = _choice(Kind.choices)
    state = _choice(State.choices)
    dialect = serializers.CharField(help_text=f"The card's format: {', '.join(Dialect.values)}.")
    protocol_versions = _strings()
    bindings = _strings()
    endpoint_url = serializers.CharField(help_text="The agent's primary endpoint ('' if none).")
    tags = _strings()
    skills = SkillOut(many=True)
    capabilities = _strings(f"Of {', '.join(CAPABILITIES)}.")
    input_modes = _strings()
    output_modes = _strings()
    security = _strings("The security scheme types the card declares.")
    verified = serializers.BooleanField(
        help_text="The submitter proved control of the card's whole domain (not only a host:port: see `proven`)."
    )
    proven = serializers.CharField(
        allow_null=True,
        help_text="What the proof found shows control of: the domain (DNS, the well-known file over https on "
        "443, or hosted here), or only `host:port` (the file over plain http or another port); null while unproven.",
    )
    verified_by = serializers.CharField(allow_null=True, help_text="How `proven` was proven: http, dns or hosted.")
    signed = serializers.BooleanField(help_text="The shown card carries a valid signature.")
    signing_kid = serializers.CharField(allow_null=True, help_text="The key id of that signature.")
    health = _choice(Health.choices)
    last_checked_at = serializers.DateTimeField(allow_null=True)
    latency_ms = serializers.IntegerField(allow_null=True)
    listed_at = serializers.DateTimeField(allow_null=True, help_text="When it was first approved.")
    rank = serializers.IntegerField(allow_null=True, help_text="Relevance to q (ordering by relevance), else null.")


class SearchOut(serializers.Serializer):
    results = EntrySummaryOut(many=True)
    next = serializers.URLField(allow_null=True, help_text="The next page, or null after the last.")


class VersionBriefOut(serializers.Serializer):
    number = serializers.IntegerField()
    hash = serializers.CharField()
    dialect = serializers.CharField()
    fetched_at = serializers.DateTimeField()
    url = serializers.URLField()


class CheckOut(serializers.Serializer):
    at = serializers.DateTimeField()
    ok = serializers.BooleanField()
    card_ok = serializers.BooleanField()
    endpoint_ok = serializers.BooleanField()
    status = serializers.IntegerField(allow_null=True, help_text="The endpoint's HTTP status.")
    latency_ms = serializers.IntegerField(allow_null=True)
    detail = serializers.CharField(allow_blank=True)


# Uptime's members ("1d", "7d", "30d") are no Python names: the class is made from a dict.
UptimeOut = type(
    "UptimeOut",
    (serializers.Serializer,),
    {
        f"{days}d": serializers.FloatField(allow_null=True, help_text=f"% of good checks in {days} days (null: none).")
        for days in (1, 7, 30)
    },
)


class HealthOut(serializers.Serializer):
    state = _choice(Health.choices)
    last_checked_at = serializers.DateTimeField(allow_null=True)
    last_ok_at = serializers.DateTimeField(allow_null=True)
    latency_ms = serializers.IntegerField(allow_null=True)
    consecutive_failures = serializers.IntegerField()
    uptime = UptimeOut()
    checks = CheckOut(many=True, help_text="The last 50 checks, newest first.")


class SignatureOut(serializers.Serializer):
    kid = serializers.CharField(allow_blank=True)
    alg = serializers.CharField(allow_blank=True)
    valid = serializers.BooleanField()
    reason = serializers.CharField(allow_blank=True)


class HostFlagOut(serializers.Serializer):
    code = serializers.ChoiceField(choices=["endpoint_host", "jku_host"])
    host = serializers.CharField()
    detail = serializers.CharField()


class TrustOut(serializers.Serializer):
    domain = serializers.CharField(help_text="The card URL's host.")
    verified = serializers.BooleanField(help_text="Control of the whole domain is proven.")
    proven = serializers.CharField(
        allow_null=True,
        help_text="What the proof found shows control of: the domain (DNS, the well-known file over https on "
        "443, or hosted here), or only `host:port` (the file over plain http or another port); null while unproven.",
    )
    verified_by = serializers.CharField(allow_null=True)
    verified_at = serializers.DateTimeField(allow_null=True)
    signed = serializers.BooleanField()
    signing_kid = serializers.CharField(allow_null=True)
    signatures = SignatureOut(many=True, help_text="Each signature of the shown card, checked.")
    proof_checked_at = serializers.DateTimeField(
        allow_null=True, help_text="When the domain proof was last found again (re-checked on a schedule)."
    )
    proof_lapsed_at = serializers.DateTimeField(
        allow_null=True, help_text="When the proof lapsed (not found again): the entry waits for a new proof."
    )
    flags = HostFlagOut(many=True, help_text="What in the shown card points away from the proven card host.")


class ConformanceResultOut(serializers.Serializer):
    check = serializers.CharField(help_text="card, interface, unknown_task, malformed, denied_streaming, ...")
    dialect = serializers.CharField(allow_blank=True)
    binding = serializers.CharField(allow_blank=True, help_text="JSONRPC, HTTP+JSON...; '' for the card.")
    url = serializers.CharField(allow_blank=True)
    outcome = serializers.ChoiceField(choices=["passed", "failed", "skipped"])
    detail = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()


class ConformanceOut(serializers.Serializer):
    at = serializers.DateTimeField(allow_null=True, help_text="When the latest run was; null: never run.")
    results = ConformanceResultOut(many=True)


class AttestationOut(serializers.Serializer):
    state = serializers.ChoiceField(choices=["valid", "revoked", "expired"])
    reason = serializers.CharField(allow_null=True, help_text="Why it was withdrawn or expired; null while valid.")
    url = serializers.CharField(help_text="The entry's current statement (JWS), or 410 with the reason.")
    status_url = serializers.CharField(help_text="This statement's status, whatever becomes of the entry.")
    jwks_url = serializers.CharField(help_text="The directory's public keys, to verify the JWS offline.")
    jti = serializers.CharField()
    card_sha256 = serializers.CharField()
    issued_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)
    token = serializers.CharField(allow_null=True, help_text="The compact JWS while valid; else null.")


class DecisionOut(serializers.Serializer):
    from_state = serializers.CharField(allow_blank=True, help_text="'' for the first.")
    to_state = _choice(State.choices)
    actor = serializers.CharField(allow_null=True, help_text="The user's name; null: the server itself.")
    reason = serializers.CharField()
    at = serializers.DateTimeField()
    version = serializers.IntegerField(allow_null=True, help_text="The card version it was made on.")


class ProofOut(serializers.Serializer):
    token = serializers.CharField()
    verified = serializers.BooleanField()
    methods = _strings("The methods the domain can be proven by.")
    instructions = serializers.DictField(
        child=serializers.CharField(),
        help_text="What to publish: domain, http_url + http_content (a text file), dns_name + dns_type + "
        "dns_value (a TXT record), or dns_unavailable saying why there is none.",
    )
    expires_at = serializers.DateTimeField(
        allow_null=True,
        help_text="When an unproven draft expires (REGISTRY_DRAFT_LIFETIME); null once the domain is proven. "
        "Another submitter of the same card may prove it first: their entry takes the card and this one expires.",
    )


class EntryOut(EntrySummaryOut):
    state_changed_at = serializers.DateTimeField()
    card_url = serializers.CharField()
    card = serializers.JSONField(allow_null=True, help_text="The shown card (for owners and curators the latest).")
    card_version = serializers.IntegerField(allow_null=True, help_text="The shown card's version number.")
    versions = VersionBriefOut(many=True, help_text="The versions you may see, newest first.")
    health = HealthOut(help_text="Liveness: state, uptime and the last checks.")  # type: ignore[assignment]
    trust = TrustOut()
    conformance = ConformanceOut(help_text="The directory's own conformance checks of the approved card.")
    attestation = AttestationOut(
        allow_null=True, help_text="The directory's newest signed statement about the entry; null: none yet."
    )
    decisions = DecisionOut(
        many=True, allow_null=True, help_text="Owners and curators: the entry's history, newest first; else null."
    )
    proof = ProofOut(allow_null=True, help_text="Owners and curators of a remote entry: the domain proof; else null.")
    allowed_transitions = serializers.ListField(
        child=_choice(State.choices),
        allow_null=True,
        help_text="Owners and curators: the states you may move the entry to now; else null.",
    )


class VersionOut(serializers.Serializer):
    entry = serializers.IntegerField()
    number = serializers.IntegerField()
    hash = serializers.CharField()
    dialect = serializers.CharField()
    fetched_from = serializers.CharField()
    fetched_at = serializers.DateTimeField()
    etag = serializers.CharField(allow_blank=True)
    approved = serializers.BooleanField(help_text="This is the approved (listed) version.")
    raw = serializers.CharField(allow_blank=True, help_text="The card exactly as served.")
    document = serializers.JSONField()
    index = serializers.JSONField(help_text="The normalised index the directory searches.")
    signatures = SignatureOut(many=True)


class VerifyOut(serializers.Serializer):
    verified = serializers.BooleanField(
        help_text="Whether the token was found (the domain is proven, or only host:port: `detail` says which)."
    )
    method = serializers.CharField()
    detail = serializers.CharField(help_text="What was found, in a sentence.")
    state = _choice(State.choices, help_text="The entry's state now.")


class FlagOut(serializers.Serializer):
    id = serializers.IntegerField()
    entry = serializers.IntegerField()
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()


class TokenIn(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=1000, style={"input_type": "password"}, trim_whitespace=False)


class TokenOut(serializers.Serializer):
    token = serializers.CharField(help_text="Send it as `Authorization: Token <token>`. Shown this once only.")
    expires_at = serializers.DateTimeField(help_text="When the token stops working.")
