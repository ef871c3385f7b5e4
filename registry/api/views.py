"""The directory's REST API (`/api/registry/`): search and read entries, submit a remote agent,
prove its domain, move it through curation, flag it; a token for programs.

Who sees what is registry.selectors' business (entries_visible_to, shown_version, versions_of);
every write is a registry.services call. An entry a caller may not see is answered exactly as
an entry that does not exist (404, the same body), whatever the operation. Authentication runs
before a body is read (DRF authenticates in `initial()`, the body is parsed on first access);
bodies are read strictly (registry.api.errors.StrictJSONParser) and every refusal is JSON with
`detail`."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.contrib.auth import authenticate
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import logins
from accounts.models import Role, Tenant
from accounts.selectors import tenant_ids_of

from .. import selectors, services, tokens
from ..models import Entry, State
from ..search_params import BadSearch, search_from_query
from . import represent
from . import serializers as s
from .errors import NOT_FOUND, StrictJSONParser, exception_handler
from .throttles import WriteThrottle

TAG = "registry"


def _errors(*codes: int) -> dict[int, Any]:
    what = {
        400: "The request is not valid (`errors` or `problems` itemise why).",
        401: "Not signed in (send `Authorization: Token <token>`).",
        403: "Signed in, but not allowed to do this.",
        404: NOT_FOUND,
        409: "Conflicts with the entry's state or an earlier request.",
        413: "The body is too large.",
        429: "Too many writes from this caller (REGISTRY_WRITE_RATE): try again after Retry-After seconds.",
        502: "The agent's card or domain could not be read.",
    }
    return {code: OpenApiResponse(s.ErrorOut, description=what[code]) for code in codes}


class RegistryView(APIView):
    parser_classes = [StrictJSONParser]
    renderer_classes = [JSONRenderer]
    throttle_classes = [WriteThrottle]

    def get_exception_handler(self) -> Any:
        return exception_handler


# Values of a search's query that may be repeated (?tag=a&tag=b).
_REPEATED = ("tag", "skill", "input_mode", "output_mode", "capability", "binding", "protocol_version", "security")


def _query(request: Request) -> dict[str, Any]:
    """The query string as a plain dict (repeated parameters as lists): a QueryDict would make
    an absent boolean False rather than absent."""
    params = request.query_params
    repeated = (*_REPEATED, "state")
    return {key: params.getlist(key) if key in repeated else params.get(key) for key in params}


def visible(request: Request, pk: int, *, heavy: bool = False) -> Entry:
    """The entry `pk` if the caller may see it; else 404, the same as for no entry at all."""
    qs = selectors.entries_visible_to(request.user).select_related("approved_version", "current_version")
    if not heavy:
        qs = qs.defer(*represent.LIST_DEFERRED)
    entry = qs.filter(pk=pk).first()
    if entry is None:
        raise exceptions.NotFound(NOT_FOUND)
    return entry


def acting_role(request: Request, entry: Entry, doing: str) -> services.Role:
    role = selectors.role_of(request.user, entry)
    if role is None:
        raise exceptions.PermissionDenied(f"only the entry's owners and curators may {doing}")
    return role


def detail(request: Request, pk: int) -> dict[str, Any]:
    """The entry's detail as the caller may see it, read afresh (after a change too)."""
    return s.EntryOut(represent.detail(visible(request, pk, heavy=True), request)).data


def _valid(serializer_class: type[Any], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class AgentsView(RegistryView):
    @extend_schema(
        operation_id="registry_agents_search",
        tags=[TAG],
        summary="Search the directory",
        description="Listed entries (approved, or pending with their approved version still listed), "
        "by text query and filters, a page at a time (keyset cursors: follow `next`). Signed in, "
        "`mine=true` lists your own entries in every state; `state` narrows to entries in that state "
        "among those you may see (curators: all).",
        parameters=[s.SearchIn],
        responses={200: s.SearchOut, **_errors(400, 401)},
    )
    def get(self, request: Request) -> Response:
        v = _valid(s.SearchIn, _query(request))
        user = request.user
        states: list[str] = v.get("state") or []
        base: QuerySet[Entry]
        if v["mine"]:
            if not user.is_authenticated:
                raise exceptions.NotAuthenticated("sign in to list your own entries")
            base = Entry.objects.filter(selectors.owned_by(user))
        elif states:
            base = selectors.entries_visible_to(user)
        else:
            base = Entry.objects.listed()
        if states:
            base = base.filter(state__in=states)
        # The serializer documents and checks the API's own parameters; the search itself is
        # read as the directory page reads it (registry.search_params), once.
        try:
            search = search_from_query(request.query_params)
        except BadSearch as exc:
            raise exceptions.ValidationError({exc.param: [str(exc)]}) from None
        if v["mine"] or State.DEPRECATED in states:
            search = dataclasses.replace(search, include_deprecated=True)
        qs = (
            selectors.entry_search(search, base=base)
            .select_related("approved_version", "current_version")
            .defer(*represent.LIST_DEFERRED)
        )
        try:
            found = selectors.page(qs, order=search.ordering, cursor=v.get("cursor"), size=v["page_size"])
        except selectors.BadCursor as exc:
            raise exceptions.ValidationError({"cursor": [str(exc)]}) from None
        ranked = search.ordering == "relevance"
        results = [represent.summary(entry, request, ranked=ranked) for entry in found.entries]
        next_url = None
        if found.next_cursor:
            query = request.query_params.copy()
            query["cursor"] = found.next_cursor
            next_url = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
        return Response(s.SearchOut({"results": results, "next": next_url}).data)

    @extend_schema(
        operation_id="registry_agents_submit",
        tags=[TAG],
        summary="Submit a remote agent by its URL",
        description="The card is fetched, validated and kept as version 1; the entry starts as a draft. "
        "Publish the token as `proof.instructions` say, then POST verify: a proven domain goes to review. "
        "Others' unproven drafts of the same card do not stand in the way: each submitter gets a token of their "
        "own, and the first to prove the domain takes the card (the other drafts expire). An unproven draft "
        "expires at `proof.expires_at` and is never fetched or probed meanwhile. 409: the card's domain is "
        "proven by an entry already, or you have a draft of it.",
        request=s.SubmitIn,
        responses={201: s.EntryOut, **_errors(400, 401, 403, 409, 413, 429, 502)},
    )
    def post(self, request: Request) -> Response:
        v = _valid(s.SubmitIn, request.data)
        tenant = None
        if v.get("tenant"):
            operated = tenant_ids_of(request.user, roles=(Role.OPERATOR, Role.OWNER))
            tenant = Tenant.objects.filter(slug=v["tenant"], pk__in=operated).first()
            if tenant is None:
                raise exceptions.PermissionDenied(
                    f"you are not an operator or owner of a tenant {v['tenant']!r}: submit without it, or ask its owner"
                )
        entry = services.entry_submit(url=v["url"], user=request.user, tenant=tenant)
        body = detail(request, entry.pk)
        return Response(body, status=status.HTTP_201_CREATED, headers={"Location": body["url"]})


class AgentView(RegistryView):
    @extend_schema(
        operation_id="registry_agents_retrieve",
        tags=[TAG],
        summary="One entry",
        description="The entry's summary, the card you may see (the approved one for the public), its "
        "versions, health history and trust signals; for its owners and curators also its decisions, "
        "the domain proof and the moves they may make.",
        responses={200: s.EntryOut, **_errors(401, 404)},
    )
    def get(self, request: Request, pk: int) -> Response:
        return Response(detail(request, pk))


class VersionView(RegistryView):
    @extend_schema(
        operation_id="registry_agents_version",
        tags=[TAG],
        summary="One version of an entry's card",
        description="The card as served, as parsed, its index and its signatures' checks. The public sees "
        "the versions up to the approved one.",
        responses={200: s.VersionOut, **_errors(401, 404)},
    )
    def get(self, request: Request, pk: int, number: int) -> Response:
        entry = visible(request, pk)
        version = selectors.versions_of(entry, user=request.user).filter(number=number).first()
        if version is None:
            raise exceptions.NotFound(f"no version {number} of this entry (or not one you may see)")
        return Response(s.VersionOut(represent.version(version, entry)).data)


class VerifyView(RegistryView):
    @extend_schema(
        operation_id="registry_agents_verify",
        tags=[TAG],
        summary="Prove control of the card's domain",
        description="Looks for the entry's token by `method` (see `proof.instructions`). Found: the domain is "
        "proven and a draft goes to review (and other submitters' drafts of the card expire). Not found is "
        "still 200, with `verified: false` and what was found in `detail`. 409: the draft expired, or another "
        "submission of the card proved its domain first.",
        request=s.VerifyIn,
        responses={200: s.VerifyOut, **_errors(400, 401, 403, 404, 409, 413, 429)},
    )
    def post(self, request: Request, pk: int) -> Response:
        entry = visible(request, pk)
        acting_role(request, entry, "prove its domain")
        v = _valid(s.VerifyIn, request.data)
        result = services.entry_verify_domain(entry=entry, method=v["method"], actor=request.user)
        state = Entry.objects.filter(pk=entry.pk).values_list("state", flat=True).first() or entry.state
        return Response(
            s.VerifyOut({"verified": result.ok, "method": result.method, "detail": result.detail, "state": state}).data
        )


class TransitionView(RegistryView):
    @extend_schema(
        operation_id="registry_agents_transition",
        tags=[TAG],
        summary="Move an entry to another state",
        description="Owners submit for review, deprecate and un-deprecate; curators also approve, reject, "
        "suspend and reinstate. A reason is required to reject, suspend or deprecate. Answers the entry.",
        request=s.TransitionIn,
        responses={200: s.EntryOut, **_errors(400, 401, 403, 404, 409, 413, 429)},
    )
    def post(self, request: Request, pk: int) -> Response:
        entry = visible(request, pk)
        role = acting_role(request, entry, "change its state")
        v = _valid(s.TransitionIn, request.data)
        services.entry_decide(
            entry=entry,
            to=v["to"],
            actor=request.user,
            role=role,
            reason=v["reason"],
            version_hash=v["version_hash"],
        )
        return Response(detail(request, pk))


class FlagView(RegistryView):
    @extend_schema(
        operation_id="registry_agents_flag",
        tags=[TAG],
        summary="Flag an entry for the curators",
        description="Anyone signed in who can see the entry; one open flag per user and entry (a second is 409).",
        request=s.FlagIn,
        responses={201: s.FlagOut, **_errors(400, 401, 403, 404, 409, 413, 429)},
    )
    def post(self, request: Request, pk: int) -> Response:
        entry = visible(request, pk)
        v = _valid(s.FlagIn, request.data)
        flag = services.entry_flag(entry=entry, user=request.user, reason=v["reason"])
        body = {"id": flag.pk, "entry": entry.pk, "reason": flag.reason, "created_at": flag.created_at}
        return Response(s.FlagOut(body).data, status=status.HTTP_201_CREATED)


class TokenView(RegistryView):
    """A new token for a username and password, shown once. Password guesses are counted in
    Redis per username and per address (accounts.logins): past the limit, 429 for a while."""

    permission_classes: list[Any] = []

    @extend_schema(
        operation_id="registry_token_obtain",
        tags=[TAG],
        summary="A token for your username and password",
        description="A new token each time, shown only in this answer (the server keeps its SHA-256), valid "
        "until `expires_at` (REGISTRY_TOKEN_LIFETIME). After too many wrong passwords for a username or "
        "from an address, sign-in is refused (429, Retry-After) for LOGIN_LOCKOUT_SECONDS.",
        request=s.TokenIn,
        responses={200: s.TokenOut, **_errors(400, 413, 429)},
        auth=[],
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        v = _valid(s.TokenIn, request.data)
        address = logins.client_address(request)
        lock = logins.locked(username=v["username"], address=address)
        if lock is not None:
            raise exceptions.Throttled(wait=lock.retry_after, detail=lock.message)
        user = authenticate(request._request, username=v["username"], password=v["password"])
        if user is None:
            lock = logins.failed(username=v["username"], address=address)
            if lock is not None:
                raise exceptions.Throttled(wait=lock.retry_after, detail=lock.message)
            raise exceptions.ValidationError({"non_field_errors": ["Unable to log in with provided credentials."]})
        logins.succeeded(username=v["username"])
        token, secret = tokens.token_create(user=user)
        return Response(s.TokenOut({"token": secret, "expires_at": token.expires_at}).data)


class AttestationView(RegistryView):
    @extend_schema(
        operation_id="registry_agents_attestation",
        tags=[TAG],
        summary="The directory's attestation of an entry",
        description="The newest statement the directory signed about the entry (what it verified: card hash, "
        "proven domain, health, conformance results, when), its standing (valid, revoked with the reason, "
        "expired) and, while valid, the JWS itself, verifiable offline with the keys at `jwks_url`. 404: none yet.",
        responses={200: s.AttestationOut, **_errors(401, 404)},
    )
    def get(self, request: Request, pk: int) -> Response:
        entry = visible(request, pk)
        found = represent.attestation(selectors.attestation_of(entry), request, entry.pk)
        if found is None:
            raise exceptions.NotFound("the directory has not attested this entry yet")
        return Response(s.AttestationOut(found).data)
