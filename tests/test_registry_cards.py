"""The registry's reading of an agent card: its format, its problems, its index and hash."""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.cards import (
    CardIndex,
    CardRejected,
    Endpoint,
    Problem,
    Skill,
    card_hash,
    card_urls,
    detect_version,
    normalise,
    search_text,
    validate,
)
from registry.cards.validate import MAX_PROBLEMS
from tests.card_examples import EXAMPLES, a2a_0_1, a2a_0_3, a2a_1_0, acs
from tests.conftest import make_agent

VERSIONS = ["1.0", "0.3", "0.1", "acs"]


def paths(problems: list[Problem]) -> list[str]:
    return [p.path for p in problems]


def message_at(problems: list[Problem], path: str) -> str:
    found = [p.message for p in problems if p.path == path]
    assert found, f"no problem at {path}: {problems}"
    return found[0]


# --- where to look ---------------------------------------------------------------------------


def test_an_origin_is_looked_up_at_the_well_known_card_paths_in_order():
    assert card_urls("https://agents.example.test") == [
        "https://agents.example.test/.well-known/agent-card.json",
        "https://agents.example.test/.well-known/agent.json",
        "https://agents.example.test/.well-known/acs.json",
    ]
    assert card_urls("HTTPS://agents.example.test:8443/?x=1") == [
        "https://agents.example.test:8443/.well-known/agent-card.json",
        "https://agents.example.test:8443/.well-known/agent.json",
        "https://agents.example.test:8443/.well-known/acs.json",
    ]


def test_an_agent_hosted_under_a_path_is_looked_up_there_first_then_at_its_origin():
    assert card_urls("https://host.example.test/agents/acme/echo/") == [
        "https://host.example.test/agents/acme/echo/.well-known/agent-card.json",
        "https://host.example.test/.well-known/agent-card.json",
        "https://host.example.test/.well-known/agent.json",
        "https://host.example.test/.well-known/acs.json",
    ]


@pytest.mark.parametrize(
    "url",
    [
        "https://host.example.test/cards/planner.json",
        "https://host.example.test/.well-known/agent.json",
        "https://host.example.test/x/.well-known/agent-card.json?v=2",
    ],
)
def test_a_url_that_already_names_a_card_is_used_as_it_is(url):
    assert card_urls(url) == [url]


def test_a_url_that_is_not_http_is_passed_on_for_the_fetch_to_refuse():
    assert card_urls("ftp://host.example.test/") == ["ftp://host.example.test/"]
    assert card_urls("not a url") == ["not a url"]


# --- which format ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_each_example_card_is_recognised_as_its_format(version):
    assert detect_version(EXAMPLES[version]()) == version


def test_a_0_1_card_without_authentication_is_recognised_by_where_it_was_served():
    card = a2a_0_1()
    del card["authentication"]
    assert detect_version(card, fetched_from="https://h.example.test/.well-known/agent.json") == "0.1"
    with pytest.raises(CardRejected) as rejected:
        detect_version(card)
    assert "looked for supportedInterfaces" in str(rejected.value)


def test_a_card_with_url_and_capabilities_served_at_agent_card_json_is_read_as_0_3():
    card = a2a_0_1()
    del card["authentication"]
    assert detect_version(card, fetched_from="https://h.example.test/.well-known/agent-card.json") == "0.3"


def test_a_card_with_0_1_authentication_is_0_1_wherever_it_was_served():
    assert detect_version(a2a_0_1(), fetched_from="https://h.example.test/.well-known/agent-card.json") == "0.1"


def test_a_0_2_card_is_read_as_0_3():
    card = a2a_0_3()
    card["protocolVersion"] = "0.2.5"
    assert detect_version(card) == "0.3"
    del card["protocolVersion"]
    assert detect_version(card) == "0.3"  # url with preferredTransport


def test_a_card_naming_an_unknown_protocol_version_is_rejected_at_that_member():
    card = a2a_0_3()
    card["protocolVersion"] = "7.0"
    with pytest.raises(CardRejected) as rejected:
        detect_version(card)
    assert rejected.value.problems[0].path == "/protocolVersion"
    assert "'7.0'" in rejected.value.problems[0].message


@pytest.mark.parametrize("document", [{}, {"name": "x"}, [], "card", 3, None])
def test_a_document_of_no_known_format_is_rejected_saying_what_was_looked_for(document):
    with pytest.raises(CardRejected) as rejected:
        detect_version(document)
    (problem,) = rejected.value.problems
    assert problem.path == ""
    assert "1 problem" in str(rejected.value)


# --- valid cards and their index ---------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_each_example_card_validates_with_no_problems(version):
    assert validate(EXAMPLES[version](), version) == []


def test_a_1_0_card_normalises_to_its_index():
    index = normalise(a2a_1_0(), "1.0")
    assert index == CardIndex(
        dialect="1.0",
        name="Route Planner",
        description="Plans cycling routes between two places.",
        card_version="2.4.1",
        provider_organization="Example Mobility",
        provider_url="https://mobility.example.test",
        documentation_url="https://docs.example.test/planner",
        icon_url="https://cdn.example.test/planner.png",
        url="https://agents.example.test/planner/rpc",
        endpoints=(
            Endpoint("https://agents.example.test/planner/rpc", "JSONRPC", "1.0"),
            Endpoint("https://agents.example.test/planner", "HTTP+JSON", "1.0", tenant="cyclists"),
        ),
        bindings=("JSONRPC", "HTTP+JSON"),
        protocol_versions=("1.0",),
        capabilities=("streaming", "extended_card"),
        extensions=("https://ext.example.test/elevation/v1",),
        input_modes=("text/plain", "application/json", "application/gpx+xml"),
        output_modes=("text/plain", "application/gpx+xml"),
        security_schemes=("apiKey", "oauth2", "mutualTLS"),
        skills=(
            Skill(
                id="plan-route",
                name="Plan a route",
                description="A route between two places, avoiding busy roads.",
                tags=("cycling", "routes"),
                examples=("From the station to the lake, please", "Quiet roads to Utrecht"),
                input_modes=(),
                output_modes=("application/gpx+xml",),
            ),
            Skill(
                id="elevation",
                name="Elevation profile",
                description="How steep a route is.",
                tags=("elevation",),
                examples=(),
                input_modes=("application/gpx+xml",),
                output_modes=(),
            ),
        ),
        tags=("cycling", "routes", "elevation"),
        signed=False,
    )


def test_a_0_3_card_normalises_its_transports_and_openapi_schemes():
    index = normalise(a2a_0_3(), "0.3")
    assert index.dialect == "0.3"
    assert index.url == "https://agents.example.test/invoices/rpc"
    assert index.endpoints == (
        Endpoint("https://agents.example.test/invoices/rpc", "JSONRPC", "0.3.0"),
        Endpoint("https://grpc.example.test/invoices", "GRPC", "0.3.0"),
        Endpoint("https://agents.example.test/invoices/v1", "HTTP+JSON", "0.3.0"),
    )
    assert index.bindings == ("JSONRPC", "GRPC", "HTTP+JSON")
    assert index.protocol_versions == ("0.3.0",)
    assert index.capabilities == ("push_notifications", "extended_card", "state_transition_history")
    assert index.security_schemes == ("http", "openIdConnect")
    assert index.extensions == ("urn:example:trace",)
    assert index.tags == ("finance", "ocr")
    assert index.input_modes == ("application/pdf", "image/png")


def test_a_0_3_card_without_protocol_version_or_transport_gets_the_defaults():
    card = a2a_0_3()
    for member in ("protocolVersion", "preferredTransport", "additionalInterfaces"):
        del card[member]
    index = normalise(card, "0.3")
    assert index.endpoints == (Endpoint("https://agents.example.test/invoices/rpc", "JSONRPC", "0.3.0"),)


def test_a_0_1_card_normalises_to_one_json_rpc_endpoint_and_its_scheme_names():
    index = normalise(a2a_0_1(), "0.1")
    assert index.endpoints == (Endpoint("https://agents.example.test/weather", "JSONRPC", "0.1.0"),)
    assert index.bindings == ("JSONRPC",)
    assert index.capabilities == ("streaming", "state_transition_history")
    assert index.security_schemes == ("http", "apiKey", "kerberos")
    assert index.input_modes == ("text",) and index.signed is False


def test_an_acs_document_normalises_its_endpoints_and_capabilities():
    index = normalise(acs(), "acs")
    assert index.dialect == "acs"
    assert index.url == "https://api.example.test/guide/rpc"
    assert index.bindings == ("JSONRPC", "HTTP+JSON", "AMQP")
    assert index.protocol_versions == ("02.02",)
    assert index.capabilities == ("streaming", "push_notifications")
    assert index.security_schemes == ("mutualTLS", "openIdConnect")
    assert index.provider_organization == "Example Culture Lab"
    assert index.skills[0].id == "guide.museums" and index.signed is False


def test_an_acs_document_without_endpoints_has_no_primary_url():
    card = acs()
    card["endPoints"] = []
    assert validate(card, "acs") == []
    assert normalise(card, "acs").url == ""


def test_a_signed_card_is_indexed_as_signed():
    card = a2a_1_0()
    card["signatures"] = [{"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2ln"}]
    assert validate(card, "1.0") == []
    assert normalise(card, "1.0").signed is True


def test_search_text_weighs_the_name_over_skills_over_descriptions_over_examples():
    blocks = search_text(normalise(a2a_1_0(), "1.0"))
    assert blocks["A"] == "Route Planner"
    assert "Plan a route" in blocks["B"] and "cycling" in blocks["B"] and "Example Mobility" in blocks["B"]
    assert "Plans cycling routes" in blocks["C"] and "How steep a route is." in blocks["C"]
    assert "Quiet roads to Utrecht" in blocks["D"]


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"is_public": True},
        {"is_public": True, "shared_sandbox": True, "streaming": False, "push_notifications": False},
        {
            "has_extended_card": True,
            "extensions": [{"uri": "https://ext.example.test/x", "required": True, "params": {"a": 1}}],
            "skills": [
                {
                    "id": "s1",
                    "name": "One",
                    "description": "",
                    "tags": [],
                    "examples": ["try me"],
                    "inputModes": ["image/png"],
                    "outputModes": ["text/markdown"],
                },
                {"id": "s2", "name": "Two", "description": "second", "tags": ["b"]},
            ],
            "input_modes": [],
        },
        {"skills": []},
    ],
)
def test_our_own_hosted_cards_are_valid_1_0_cards(tenant, fields):
    from accounts.services import oidc_issuer_set
    from protocols.cards import agent_card

    agent = make_agent(tenant, "hosted", "echo", **fields)
    oidc_issuer_set(
        tenant=tenant, issuer="https://id.acme.example", audience="agents", jwks_url="https://id.acme.example/jwks"
    )
    card = json.loads(json.dumps(agent_card(agent, base_url="https://agents.example.test")))
    assert detect_version(card) == "1.0"
    assert validate(card, "1.0") == []
    index = normalise(card, "1.0")
    assert index.url == "https://agents.example.test/agents/acme/hosted/"
    assert index.bindings == ("JSONRPC", "HTTP+JSON") and index.protocol_versions == ("1.0",)
    assert "apiKey" in index.security_schemes and "openIdConnect" in index.security_schemes


# --- problems, itemised -------------------------------------------------------------------------


def test_a_card_missing_its_name_is_rejected_with_the_path():
    card = a2a_1_0()
    del card["name"]
    assert validate(card, "1.0") == [Problem("/name", "is missing (required: a non-empty string)")]


def test_member_names_that_look_like_digits_but_are_not_numbers_sort_as_names():
    # '²'.isdigit() is true, but int('²') fails: the sort must not take it for an index.
    card = a2a_1_0()
    card["securitySchemes"] = {"²": "not a scheme", "10": "nor this", "9": "nor this"}
    schemes = [p for p in paths(validate(card, "1.0")) if p.startswith("/securitySchemes/")]
    assert schemes == ["/securitySchemes/9", "/securitySchemes/10", "/securitySchemes/²"]  # numbers first


def test_several_errors_in_one_card_are_several_problems_sorted_by_path():
    card = a2a_1_0()
    card["skills"][1]["tags"] = ["ok", 3]
    card["skills"][0]["name"] = ""
    card["supportedInterfaces"][0]["protocolBinding"] = "SOAP"
    card["capabilities"]["streaming"] = "yes"
    card["defaultInputModes"] = "text/plain"
    problems = validate(card, "1.0")
    assert paths(problems) == [
        "/capabilities/streaming",
        "/defaultInputModes",
        "/skills/0/name",
        "/skills/1/tags/1",
        "/supportedInterfaces/0/protocolBinding",
    ]
    assert message_at(problems, "/capabilities/streaming") == "must be true or false, not a string"
    assert message_at(problems, "/defaultInputModes") == "must be a list of media types, not a string"
    assert message_at(problems, "/skills/0/name") == "must not be empty"
    assert message_at(problems, "/skills/1/tags/1") == "must be a string, not a number"
    assert message_at(problems, "/supportedInterfaces/0/protocolBinding") == (
        'must be one of JSONRPC, GRPC, HTTP+JSON, not "SOAP"'
    )


def test_a_list_of_strings_given_as_a_number_says_so():
    card = a2a_1_0()
    card["skills"][1]["tags"] = 12
    assert validate(card, "1.0") == [Problem("/skills/1/tags", "must be a list of strings, not a number")]


def test_paths_sort_by_index_as_numbers_not_as_text():
    card = a2a_1_0()
    card["skills"] = [{"id": f"s{i}", "name": "n", "description": "", "tags": []} for i in range(12)]
    card["skills"][2]["tags"] = [1]
    card["skills"][10]["tags"] = [1]
    assert paths(validate(card, "1.0")) == ["/skills/2/tags/0", "/skills/10/tags/0"]


def test_a_missing_interface_list_and_an_empty_one_are_both_problems():
    card = a2a_1_0()
    card["supportedInterfaces"] = []
    assert validate(card, "1.0") == [Problem("/supportedInterfaces", "must not be empty")]


@pytest.mark.parametrize(
    "url",
    ["javascript:alert(1)", "ftp://files.example.test/x", "https://", "/relative/path", "https://a b.example.test/"]
    + ["https://user:pw@agents.example.test/", "https://agents.example.test:99999/", "http://[::1/"],
)
def test_an_endpoint_must_be_an_absolute_http_or_https_url(url):
    card = a2a_1_0()
    card["supportedInterfaces"][0]["url"] = url
    (problem,) = validate(card, "1.0")
    assert problem.path == "/supportedInterfaces/0/url"
    assert problem.message.startswith("must be an absolute http or https URL, not ")


def test_shown_values_are_cut_short_and_huge_values_are_not_repeated():
    card = a2a_1_0()
    card["supportedInterfaces"][0]["protocolBinding"] = "X" * 10_000
    card["description"] = "y" * 30_000
    problems = validate(card, "1.0")
    assert message_at(problems, "/description") == "is too long: 30000 characters, at most 20000"
    binding = message_at(problems, "/supportedInterfaces/0/protocolBinding")
    assert len(binding) < 120 and binding.endswith("…")


def test_caps_on_list_lengths_are_problems():
    card = a2a_1_0()
    card["skills"] = [{"id": f"s{i}", "name": "n", "description": "", "tags": ["t"] * 101} for i in range(201)]
    card["supportedInterfaces"] = card["supportedInterfaces"] * 11
    problems = validate(card, "1.0")
    assert message_at(problems, "/skills") == "has too many items: 201, at most 200"
    assert message_at(problems, "/skills/0/tags") == "has too many items: 101, at most 100"
    assert message_at(problems, "/supportedInterfaces") == "has too many items: 22, at most 20"


def test_a_card_with_thousands_of_problems_lists_a_thousand_and_says_how_many_more():
    card = a2a_1_0()
    card["skills"] = [{"id": 1, "name": 2, "description": 3, "tags": 4} for _ in range(600)]
    problems = validate(card, "1.0")
    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[-1].path == "" and "more problems, not listed" in problems[-1].message


def test_a_repeated_skill_id_is_a_problem_at_the_second_one():
    card = a2a_1_0()
    card["skills"][1]["id"] = "plan-route"
    assert validate(card, "1.0") == [Problem("/skills/1/id", 'repeats the id of /skills/0 ("plan-route")')]


def test_a_requirement_naming_an_undeclared_scheme_is_a_problem():
    card = a2a_1_0()
    card["skills"][1]["securityRequirements"] = [{"schemes": {"nope": {"list": []}}}]
    assert paths(validate(card, "1.0")) == ["/skills/1/securityRequirements/0/schemes/nope"]
    card = a2a_0_3()
    card["security"] = [{"basic": []}]
    assert paths(validate(card, "0.3")) == ["/security/0/basic"]
    card = acs()
    card["endPoints"][0]["security"] = [{"mtls": [], "ghost": []}]
    assert paths(validate(card, "acs")) == ["/endPoints/0/security/0/ghost"]


def test_a_1_0_security_scheme_must_wrap_exactly_one_known_kind():
    card = a2a_1_0()
    card["securitySchemes"]["key"] = {"type": "apiKey", "in": "header", "name": "k"}  # the 0.3 shape
    card["securitySchemes"]["two"] = {
        "mtlsSecurityScheme": {},
        "httpAuthSecurityScheme": {"scheme": "bearer"},
    }
    problems = validate(card, "1.0")
    assert "is not a security scheme of A2A 1.0" in message_at(problems, "/securitySchemes/key/type")
    assert message_at(problems, "/securitySchemes/two").startswith("must hold exactly one scheme")


def test_a_0_3_scheme_missing_what_its_type_requires_is_a_problem():
    card = a2a_0_3()
    card["securitySchemes"]["key"] = {"type": "apiKey"}
    card["securitySchemes"]["odd"] = {"type": "magic"}
    problems = validate(card, "0.3")
    assert message_at(problems, "/securitySchemes/key/in") == "is missing (required for a scheme of type apiKey)"
    assert message_at(problems, "/securitySchemes/key/name") == "is missing (required for a scheme of type apiKey)"
    assert message_at(problems, "/securitySchemes/odd/type").startswith("must be one of apiKey, http, oauth2")


def test_an_acs_endpoint_url_must_suit_its_transport():
    card = acs()
    card["endPoints"][0]["url"] = "amqps://mq.example.test/acps"
    card["endPoints"][2]["url"] = "https://mq.example.test/acps"
    card["endPoints"][1]["transport"] = "HTTP+JSON"  # ACS spells it HTTP_JSON
    problems = validate(card, "acs")
    assert message_at(problems, "/endPoints/0/url").startswith("must be an absolute http or https URL")
    assert message_at(problems, "/endPoints/2/url").startswith("must be an amqp or amqps URL")
    assert message_at(problems, "/endPoints/1/transport").startswith("must be one of JSONRPC, HTTP_JSON, AMQP")


def test_an_acs_document_missing_registry_fields_is_still_valid_but_its_own_are_required():
    card = acs()
    for member in ("aic", "active", "lastModifiedTime"):
        del card[member]  # the registry assigns them
    assert validate(card, "acs") == []
    del card["skills"][0]["version"]
    card["capabilities"]["messageQueue"] = ["carrier-pigeon:1"]
    card["lastModifiedTime"] = "yesterday"
    problems = validate(card, "acs")
    assert paths(problems) == ["/capabilities/messageQueue/0", "/lastModifiedTime", "/skills/0/version"]


def test_a_0_1_card_needs_its_authentication_schemes_as_a_list():
    card = a2a_0_1()
    card["authentication"] = {"schemes": "Bearer"}
    assert validate(card, "0.1") == [Problem("/authentication/schemes", "must be a list of strings, not a string")]


def test_script_in_strings_is_kept_as_data():
    card = a2a_1_0()
    card["name"] = "<script>alert('x')</script>"
    card["skills"][0]["examples"] = ["<img src=x onerror=alert(1)>"]
    assert validate(card, "1.0") == []
    index = normalise(card, "1.0")
    assert index.name == "<script>alert('x')</script>"
    assert index.skills[0].examples == ("<img src=x onerror=alert(1)>",)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (math.nan, "is not a finite number"),
        (math.inf, "is not a finite number"),
        (2**60, "is an integer too large to exchange exactly"),
        ("a\x00b", "contains U+0000"),
        ("a\ud800b", "contains a lone surrogate (U+D800)"),
    ],
)
def test_values_no_json_exchange_can_carry_exactly_are_problems_where_they_are(value, says):
    card = a2a_1_0()
    card["capabilities"]["extensions"][0]["params"]["odd"] = value
    problems = validate(card, "1.0")
    assert paths(problems) == ["/capabilities/extensions/0/params/odd"]
    assert says in problems[0].message


def test_a_member_name_that_is_not_text_is_a_problem_and_its_pointer_stays_printable():
    card = a2a_1_0()
    card["capabilities"]["extensions"][0]["params"]["bad\ud800name"] = 1
    (problem,) = validate(card, "1.0")
    assert problem.path == "/capabilities/extensions/0/params/bad\\ud800name"
    problem.path.encode("utf-8")


def test_deep_nesting_is_a_problem_not_a_recursion_error():
    deep: Any = "bottom"
    for _ in range(100_000):
        deep = [deep]
    card = a2a_1_0()
    card["capabilities"]["extensions"][0]["params"]["deep"] = deep
    problems = validate(card, "1.0")
    assert len(problems) == 1 and "nests deeper than 64 levels" in problems[0].message
    assert problems[0].path.startswith("/capabilities/extensions/0/params/deep/0/0")


def test_json_pointers_escape_slashes_and_tildes_in_member_names():
    card = a2a_1_0()
    card["securitySchemes"]["a/b~c"] = {"bogus": {}}
    assert paths(validate(card, "1.0")) == ["/securitySchemes/a~1b~0c/bogus"]


@pytest.mark.parametrize("document", [[], "card", 1, None, True])
def test_a_document_that_is_not_an_object_is_one_problem_at_the_root(document):
    (problem,) = validate(document, "1.0")
    assert problem.path == "" and problem.message.startswith("must be a JSON object")


def test_an_unknown_version_is_a_programming_error():
    with pytest.raises(ValueError):
        validate({}, "2.0")  # type: ignore[arg-type]


def test_card_rejected_says_how_many_problems_and_the_first_few():
    rejected = CardRejected([Problem(f"/p{i}", "is wrong") for i in range(5)])
    assert str(rejected) == "the card has 5 problems: /p0: is wrong; /p1: is wrong; /p2: is wrong (and 2 more)"
    assert len(rejected.problems) == 5


# --- the hash ---------------------------------------------------------------------------------


def test_the_hash_is_sha256_of_the_canonical_json_whatever_the_order_or_spacing():
    assert card_hash({"b": 1, "a": "é"}) == hashlib.sha256('{"a":"é","b":1}'.encode()).hexdigest()
    card = a2a_1_0()
    reordered = json.loads(json.dumps(dict(reversed(list(card.items()))), indent=3))
    assert card_hash(reordered) == card_hash(card)
    card["description"] += "!"
    assert card_hash(card) != card_hash(reordered)


def test_the_hash_of_a_document_with_no_canonical_form_is_a_value_error():
    with pytest.raises(ValueError):
        card_hash({"n": 2**60})
    deep: Any = 1
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(ValueError):
        card_hash({"deep": deep})


# --- properties ---------------------------------------------------------------------------------

# Any JSON value, lone surrogates, NUL, NaN and huge integers included (what a Python caller
# could hand over; a fetched card cannot carry all of them).
_any_text = st.text(st.characters(exclude_categories=[]), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _any_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_any_text, children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.sampled_from(VERSIONS))
def test_validate_never_raises_for_any_json_value(value, version):
    problems = validate(value, version)
    assert all(isinstance(p, Problem) for p in problems)


# Well-formed cards of each format, built from the format's rules, with any text in their
# strings (markup, right-to-left marks, emoji...); none of them may have a problem.
_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)
_word = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20)
_host = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True).map(lambda h: f"{h}.example.test")
_path = st.from_regex(r"(/[A-Za-z0-9._~%-]{0,8}){0,3}", fullmatch=True)
_url = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}{path}", st.sampled_from(["http", "https"]), _host, _path
)
_modes = st.lists(
    st.sampled_from(["text/plain", "Text/Markdown", "application/json", "image/*", "text"]) | _word, max_size=4
)
_flag = st.booleans()


def _skills(extra: dict[str, Any] | None = None) -> st.SearchStrategy[list[dict[str, Any]]]:
    skill = st.fixed_dictionaries(
        {"id": _word, "name": _word, "description": _text, "tags": st.lists(_word, max_size=5), **(extra or {})},
        optional={"examples": st.lists(_text, max_size=3), "inputModes": _modes, "outputModes": _modes},
    )
    return st.lists(skill, max_size=4, unique_by=lambda s: s["id"])


_extensions = st.lists(
    st.fixed_dictionaries(
        {"uri": _url}, optional={"description": _text, "required": _flag, "params": st.dictionaries(_word, _text)}
    ),
    max_size=2,
)
_provider = st.fixed_dictionaries({"organization": _text, "url": _url})
_signatures = st.lists(
    st.fixed_dictionaries({"protected": _word, "signature": _word}, optional={"header": st.dictionaries(_word, _text)}),
    max_size=2,
)
_location = st.sampled_from(["query", "header", "cookie"])
_openapi_scheme = st.one_of(
    st.fixed_dictionaries({"type": st.just("apiKey"), "in": _location, "name": _word}),
    st.fixed_dictionaries({"type": st.just("http"), "scheme": _word}, optional={"bearerFormat": _text}),
    st.fixed_dictionaries({"type": st.just("openIdConnect"), "openIdConnectUrl": _url}),
    st.fixed_dictionaries({"type": st.just("mutualTLS")}, optional={"description": _text}),
    st.fixed_dictionaries(
        {
            "type": st.just("oauth2"),
            "flows": st.fixed_dictionaries(
                {
                    "clientCredentials": st.fixed_dictionaries(
                        {"tokenUrl": _url, "scopes": st.dictionaries(_word, _text)}
                    )
                }
            ),
        }
    ),
)
_a2a_1_0_scheme = st.one_of(
    st.fixed_dictionaries({"apiKeySecurityScheme": st.fixed_dictionaries({"location": _location, "name": _word})}),
    st.fixed_dictionaries({"httpAuthSecurityScheme": st.fixed_dictionaries({"scheme": _word})}),
    st.fixed_dictionaries({"openIdConnectSecurityScheme": st.fixed_dictionaries({"openIdConnectUrl": _url})}),
    st.fixed_dictionaries({"mtlsSecurityScheme": st.fixed_dictionaries({}, optional={"description": _text})}),
    st.fixed_dictionaries(
        {
            "oauth2SecurityScheme": st.fixed_dictionaries(
                {
                    "flows": st.fixed_dictionaries(
                        {"deviceCode": st.fixed_dictionaries({"deviceAuthorizationUrl": _url, "tokenUrl": _url})}
                    )
                }
            )
        }
    ),
)
_basics = {
    "name": _word,
    "description": _text,
    "version": _text,
    "defaultInputModes": _modes,
    "defaultOutputModes": _modes,
}
_bindings = st.sampled_from(["JSONRPC", "GRPC", "HTTP+JSON"])
_a2a_capabilities = {"streaming": _flag, "pushNotifications": _flag, "extensions": _extensions}

WELL_FORMED: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "1.0": st.fixed_dictionaries(
        {
            **_basics,
            "supportedInterfaces": st.lists(
                st.fixed_dictionaries(
                    {"url": _url, "protocolBinding": _bindings, "protocolVersion": st.sampled_from(["1.0", "0.3"])},
                    optional={"tenant": _text},
                ),
                min_size=1,
                max_size=3,
            ),
            "capabilities": st.fixed_dictionaries({}, optional={**_a2a_capabilities, "extendedAgentCard": _flag}),
            "skills": _skills(),
        },
        optional={
            "provider": _provider,
            "documentationUrl": _url,
            "iconUrl": _url,
            "securitySchemes": st.dictionaries(_word, _a2a_1_0_scheme, max_size=3),
            "signatures": _signatures,
        },
    ),
    "0.3": st.fixed_dictionaries(
        {
            **_basics,
            "url": _url,
            "capabilities": st.fixed_dictionaries({}, optional={**_a2a_capabilities, "stateTransitionHistory": _flag}),
            "skills": _skills(),
        },
        optional={
            "preferredTransport": _bindings,
            "additionalInterfaces": st.lists(st.fixed_dictionaries({"url": _url, "transport": _bindings}), max_size=3),
            "protocolVersion": st.sampled_from(["0.3.0", "0.2.5"]),
            "provider": _provider,
            "iconUrl": _url,
            "securitySchemes": st.dictionaries(_word, _openapi_scheme, max_size=3),
            "supportsAuthenticatedExtendedCard": _flag,
            "signatures": _signatures,
        },
    ),
    "0.1": st.fixed_dictionaries(
        {
            **_basics,
            "url": _url,
            "capabilities": st.fixed_dictionaries(
                {}, optional={"streaming": _flag, "pushNotifications": _flag, "stateTransitionHistory": _flag}
            ),
            "skills": _skills(),
        },
        optional={
            "provider": _provider,
            "documentationUrl": _url,
            "authentication": st.fixed_dictionaries(
                {"schemes": st.lists(_word, max_size=3)}, optional={"credentials": _text}
            ),
        },
    ),
    "acs": st.fixed_dictionaries(
        {
            **_basics,
            "protocolVersion": st.sampled_from(["02.02", "01.00"]),
            "provider": st.fixed_dictionaries({}, optional={"organization": _text, "url": _url, "license": _text}),
            "securitySchemes": st.dictionaries(_word, _openapi_scheme, max_size=3),
            "endPoints": st.lists(
                st.fixed_dictionaries({"url": _url, "transport": st.sampled_from(["JSONRPC", "HTTP_JSON"])})
                | st.fixed_dictionaries(
                    {
                        "url": _host.map(lambda h: f"amqps://{h}:5671/acps?inbox=inbox_{{AIC}}"),
                        "transport": st.just("AMQP"),
                    }
                ),
                max_size=3,
            ),
            "capabilities": st.fixed_dictionaries(
                {
                    "streaming": _flag,
                    "notification": _flag,
                    "messageQueue": st.lists(st.just("rabbitmq:3.*"), max_size=1),
                }
            ),
            "skills": _skills({"version": _text}),
        },
        optional={
            "aic": st.just("1.2.156.3088.1.1.34C2.478BDF.3GF546.0JU4"),
            "active": _flag,
            "webAppUrl": _url,
            "entityMeta": st.dictionaries(_word, _text),
        },
    ),
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(VERSIONS))
def test_any_well_formed_card_validates_and_normalises(data, version):
    card = data.draw(WELL_FORMED[version], label="card")
    assert validate(card, version) == []
    index = normalise(card, version)
    assert index.dialect == version and index.name == card["name"]
    assert len(index.skills) == len(card["skills"])
    search_text(index)
    card_hash(card)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(VERSIONS))
def test_any_card_with_random_values_at_random_places_validates_without_raising(data, version):
    card = data.draw(WELL_FORMED[version], label="card")
    for _ in range(data.draw(st.integers(0, 3), label="changes")):
        path = data.draw(st.sampled_from(_typed_paths(card)), label="path")
        parent = card
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = data.draw(json_values, label="value")
    problems = validate(card, version)
    index = normalise(card, version)  # never raises, even for a card with problems
    if not problems:
        assert index.dialect == version
        card_hash(card)


REQUIRED = {
    "1.0": ["name", "description", "supportedInterfaces", "version", "capabilities", "skills"],
    "0.3": ["name", "description", "url", "version", "capabilities", "skills"],
    "0.1": ["name", "url", "capabilities", "defaultInputModes", "skills"],
    "acs": ["name", "endPoints", "capabilities", "provider", "securitySchemes", "skills"],
}


def _typed_paths(value: Any, path: tuple = ()) -> list[tuple]:
    """The path of every member and item of an example card, but inside free-form objects
    (extension params), where any value is allowed."""
    found: list[tuple] = [path] if path else []
    if path[-1:] == ("params",):
        return found
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in children:
        found += _typed_paths(child, (*path, key))
    return found


def _other_kind(value: Any) -> Any:
    if isinstance(value, bool):
        return "true"
    if isinstance(value, str):
        return 42
    if isinstance(value, list):
        return {"not": "a list"}
    if isinstance(value, dict):
        return ["not", "an object"]
    return "a string"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VERSIONS), st.data())
def test_a_mutated_valid_card_has_problems_and_never_raises(version, data):
    card = EXAMPLES[version]()
    if data.draw(st.booleans(), label="drop a required member"):
        del card[data.draw(st.sampled_from(REQUIRED[version]), label="member")]
    else:
        path = data.draw(st.sampled_from(_typed_paths(card)), label="path")
        parent = card
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = _other_kind(parent[path[-1]])
    problems = validate(card, version)
    assert problems, "a mutation went unnoticed"
    normalise(card, version)


def test_validating_does_not_change_the_document():
    card = a2a_1_0()
    before = copy.deepcopy(card)
    validate(card, "1.0")
    normalise(card, "1.0")
    assert card == before
