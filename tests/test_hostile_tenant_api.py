"""Nothing a caller sends to a write route of the tenant API is an internal error, and nothing a
refusal answers changes anything stored: malformed JSON, wrong types, huge bodies, odd Unicode
(tests/hostile.py's values and body breakers), on every route that takes a body. Refusals are
400 with `detail` (and `errors` naming the field, for a body that parsed), or 413; values it
takes are read back as they were sent."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests import hostile
from tests.tenant_api_world import API, Side, build, routes
from tests.test_isolation_tenant_api import stored

# The routes that take a body, with a body they take.
WRITES = {
    (method, path.replace("/ta/", "/{t}/")): body
    for method, path, _, body in routes(Side("ta", {}, "TASK", 0, 0, "PREFIX"))
    if body is not None
}


@pytest.fixture
def world(db, client, django_user_model):
    return build(client, django_user_model)


def target(world, method: str, path: str) -> str:
    return path.replace("{t}", "ta").replace("TASK", world.a.task_id).replace("PREFIX", world.a.key_prefix)


def send(client, world, method: str, path: str, raw: bytes):
    response = client.generic(
        method, target(world, method, path), raw, "application/json", HTTP_X_API_KEY=world.a.keys["owner"]
    )
    return response.status_code, response.content


def check(status: int, content: bytes, before: tuple) -> dict:
    assert status < 500, content[:500]
    body = orjson.loads(content) if content else {}
    if status >= 400:
        assert isinstance(body.get("detail"), str) and body["detail"], body
        assert stored() == before, "a refusal changed what is stored"
    return body


ROUTES = sorted(WRITES)


@pytest.mark.parametrize("route", ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
@pytest.mark.parametrize("wrong", [[], {"x": 1}, True, None], ids=["list", "object", "bool", "null"])
def test_a_value_of_the_wrong_type_is_400_naming_the_field_and_changes_nothing(client, world, route, wrong):
    method, path = route
    for field in WRITES[route]:
        before = stored()
        body = {**WRITES[route], field: wrong}
        status, content = send(client, world, method, path, orjson.dumps(body))
        answer = check(status, content, before)
        assert status == 400, (field, answer)
        assert field in answer["errors"], (field, answer)


@pytest.mark.parametrize("route", ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_a_huge_body_is_413_and_not_read(client, world, route):
    method, path = route
    before = stored()
    huge = orjson.dumps({**WRITES[route], "padding": "x" * (70 * 1024)})
    status, content = send(client, world, method, path, huge)
    # A re-dispatch takes no body: it is not read at all, and the route answers as it would.
    if path.endswith("/redispatch/"):
        assert status == 200, content
        return
    check(status, content, before)
    assert status == 413


@pytest.mark.parametrize("route", ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_hostile_values_and_broken_bodies_are_refused_cleanly_or_taken_as_sent(client, world, route, data):
    # One world for every example of a route (the examples run in the test's one transaction).
    method, path = route
    template = WRITES[route]
    before = stored()
    choice = data.draw(st.sampled_from(["value", "breaker", "anything"]))
    if choice == "value":
        field = data.draw(st.sampled_from([*template, "unknown_member"]))
        value = data.draw(hostile.HOSTILE_VALUES)
        raw = hostile.encode({**template, field: value}, ascii_only=data.draw(st.booleans())).encode(
            "utf-8", "surrogatepass"
        )
    elif choice == "breaker":
        name, breaker = data.draw(hostile.BODY_BREAKERS)
        note(name)
        raw = breaker(orjson.dumps(template))
    else:
        raw = hostile.encode(data.draw(hostile.json_values())).encode("utf-8", "surrogatepass")
    note(raw[:300])
    status, content = send(client, world, method, path, raw)
    check(status, content, before)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(extended=hostile.tenant_card_objects())
def test_an_extended_card_s_members_the_server_vouches_for_are_refused_by_name(client, world, extended):
    from accounts.card_content import EXTENDED_MEMBERS

    before = stored()
    body = orjson.dumps({"has_extended_card": True, "extended_card": extended})
    status, content = send(client, world, "PATCH", f"{API}/{{t}}/agents/echo/", body)
    answer = check(status, content, before)
    if status == 400:
        problems = answer["errors"]["extended_card"]
        for member in set(extended) - set(EXTENDED_MEMBERS):
            assert any(p.startswith(f"extended_card[{member!r}]: ") for p in problems), (member, problems)
    else:
        assert status == 200 and set(answer["extended_card"]) <= set(EXTENDED_MEMBERS), answer


ODD = ["\u202eevil\u202c", "\U0001f600" * 3, "\u200f", "\ufeffname", "a\u2028b", "é" * 150, "\\\"'", "名前"]


@pytest.mark.parametrize("text", ODD)
def test_odd_unicode_a_tenant_s_name_takes_is_read_back_as_sent(client, world, text):
    status, content = send(client, world, "PATCH", "/api/v1/tenants/{t}/", orjson.dumps({"name": text}))
    assert status == 200, content
    body = orjson.loads(client.get(f"{API}/ta/", HTTP_X_API_KEY=world.a.keys["viewer"]).content)
    assert body["name"] == text.strip()


@pytest.mark.parametrize("raw", [b'{"name": "a\\u0000b"}', b'{"name": "\\ud800"}', b'{"name": "x\\udfff"}'])
def test_text_postgres_cannot_store_is_refused_before_anything_is_stored(client, world, raw):
    before = stored()
    status, content = send(client, world, "PATCH", "/api/v1/tenants/{t}/", raw)
    check(status, content, before)
    assert status == 400 and "not usable JSON" in orjson.loads(content)["detail"]


# Path segments that name objects, each replaced by what no object is called.
ODD_SEGMENTS = [
    "%00",
    "a%00b",
    "x" * 5000,
    "%C3%A9" * 300,
    "%E2%80%AE",
    "..",
    "%20",
    "-1",
    "0",
    "1e400",
    "%F0%9F%98%80",
    "9" * 40,
]
NAMED = [
    "members/{}/",
    "keys/{}/",
    "tasks/{}/",
    "tasks/{}/cancel/",
    "tasks/{}/redispatch/",
    "tasks/{}/files/message/1/0/",
    "push-configs/{}/",
    "deliveries/{}/",
    "agents/echo/hosts/{}/",
    "agents/echo/hosts/{}/verify/",
    "group-memberships/{}/",
    "invitations/{}/",
]


@pytest.mark.parametrize("segment", ODD_SEGMENTS)
def test_an_odd_object_name_in_a_path_is_404_never_an_error(client, world, segment):
    before = stored()
    for route in NAMED:
        for method in ("GET", "POST", "PATCH", "DELETE"):
            response = client.generic(
                method,
                f"{API}/ta/{route.format(segment)}",
                b"{}",
                "application/json",
                HTTP_X_API_KEY=world.a.keys["owner"],
            )
            assert response.status_code in (404, 405), (method, route, response.content[:300])
            assert orjson.loads(response.content)["detail"]
    assert stored() == before


def _token_like(parts: list[str]) -> str:
    return ".".join(parts)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    credential=st.one_of(
        st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=300),
        st.builds(lambda s: f"ask_{s}", st.text(alphabet="0123456789abcdef_", max_size=80)),
        st.lists(
            st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123456789-_", max_size=60), min_size=3, max_size=5
        ).map(_token_like),
    ),
    as_bearer=st.booleans(),
)
def test_no_credential_a_caller_makes_up_gets_in_or_breaks_anything(client, world, credential, as_bearer):
    header = {"HTTP_AUTHORIZATION": f"Bearer {credential}"} if as_bearer else {"HTTP_X_API_KEY": credential}
    response = client.get(f"{API}/ta/", **header)
    assert response.status_code == 401, response.content
    assert orjson.loads(response.content)["detail"]


@pytest.mark.parametrize("maker", [*ODD_SEGMENTS, "x" * 701, "%0A", "key%3A"])
def test_an_odd_maker_in_the_keys_filter_is_a_400_or_an_empty_list(client, world, maker):
    response = client.get(f"{API}/ta/keys/?made_by={maker}", HTTP_X_API_KEY=world.a.keys["owner"])
    assert response.status_code in (200, 400), response.content[:300]
    body = orjson.loads(response.content)
    assert body["results"] == [] if response.status_code == 200 else body["errors"]["made_by"]
