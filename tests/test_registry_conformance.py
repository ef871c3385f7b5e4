"""The directory's conformance checks (registry/conformance.py): a few safe questions to each
interface of an approved card, their answers judged and recorded, shown on the page and in the
API. The agents are a fake A2A server on 127.0.0.1 (tests/card_server.py, reached through a
FakeDns name and the test settings' OUTBOUND_ALLOW_NETS) and, at the end, this server itself
run by daphne on loopback; nothing here sends traffic off the machine."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from registry import conformance, services
from registry.models import ConformanceResult, Entry, Outcome, State
from tests.card_server import CardServer, Page
from tests.conformance_agent import (
    CARD_PATH,
    HOST,
    SAFE_METHODS,
    approved_entry,
    conforming_jsonrpc,
    error,
    running_agent,
)
from tests.registry_factories import card_document, make_entry


@pytest.fixture
def agent(dns):
    yield from running_agent(dns)


def sent(agent: CardServer) -> list[dict[str, Any]]:
    """The JSON-RPC requests the agent got (the malformed one left out)."""
    requests = []
    for body in agent.bodies:
        try:
            requests.append(orjson.loads(body))
        except orjson.JSONDecodeError:
            continue
    return requests


def outcomes(entry: Entry) -> dict[tuple[str, str], str]:
    return {(r.name, r.binding): r.outcome for r in ConformanceResult.objects.filter(entry=entry)}


@pytest.mark.django_db
def test_a_conforming_agent_passes_every_check_and_each_is_recorded_with_its_interface(agent):
    entry = approved_entry(agent)
    results, attestation = conformance.entry_conformance_run(entry_id=entry.pk)
    assert outcomes(entry) == {
        ("card", ""): Outcome.PASSED,
        ("unknown_task", "JSONRPC"): Outcome.PASSED,
        ("malformed", "JSONRPC"): Outcome.PASSED,
        ("denied_streaming", "JSONRPC"): Outcome.PASSED,
        ("denied_push", "JSONRPC"): Outcome.PASSED,
        ("denied_extended_card", "JSONRPC"): Outcome.PASSED,
    }
    assert {r.dialect for r in results} == {"1.0"}
    assert all(r.at == results[0].at and r.card_hash == entry.approved_version.hash for r in results)
    entry.refresh_from_db()
    assert entry.conformance_at == results[0].at
    assert attestation is not None and attestation.card_hash == entry.approved_version.hash
    unknown = next(r for r in results if r.name == "unknown_task")
    assert unknown.detail.startswith("answered error -32001") and unknown.url == agent.url("/rpc", host=HOST)


@pytest.mark.django_db
def test_nothing_sent_could_act_on_the_world(agent):
    entry = approved_entry(agent)
    conformance.entry_conformance_run(entry_id=entry.pk)
    methods = []
    for body in agent.bodies:
        try:
            methods.append(orjson.loads(body)["method"])
        except orjson.JSONDecodeError:
            methods.append(None)  # the malformed request
    assert set(methods) - {None} <= SAFE_METHODS and methods.count(None) == 1
    # Every task id asked about was made up for the run: no agent has it.
    ids = {
        r["params"].get("taskId", r["params"].get("id")) for r in sent(agent) if r["method"] != "GetExtendedAgentCard"
    }
    assert len(ids) == 1 and len(str(next(iter(ids)))) == 36
    assert all(seen.headers["user-agent"] == conformance.USER_AGENT for seen in agent.requests if seen.method == "POST")


@pytest.mark.django_db
def test_a_capability_the_card_declares_is_not_asked_about(agent):
    entry = approved_entry(agent, capabilities=["streaming", "push_notifications", "extended_card"])
    conformance.entry_conformance_run(entry_id=entry.pk)
    assert set(outcomes(entry)) == {("card", ""), ("unknown_task", "JSONRPC"), ("malformed", "JSONRPC")}
    assert [r["method"] for r in sent(agent)] == ["GetTask"]


@pytest.mark.django_db
def test_wrong_answers_fail_and_say_what_came_back(agent):
    def wrong(body: bytes) -> Page:
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return Page(500, {"Content-Type": "text/plain"}, b"Traceback...")
        if request["method"] == "GetTask":
            return Page(
                200,
                {"Content-Type": "application/json"},
                orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"id": "x"}}),
            )
        if request["method"] == "SubscribeToTask":
            event = orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"task": {"id": "x"}}})
            return Page(200, {"Content-Type": "text/event-stream"}, b"data: " + event + b"\n\n")
        if request["method"] == "GetTaskPushNotificationConfig":
            return error(request["id"], -32001)
        return error("another id", -32004)

    agent.posts["/rpc"] = wrong
    entry = approved_entry(agent)
    conformance.entry_conformance_run(entry_id=entry.pk)
    got = {r.name: (r.outcome, r.detail) for r in ConformanceResult.objects.filter(entry=entry)}
    assert got["card"][0] == Outcome.PASSED
    assert got["unknown_task"] == (Outcome.FAILED, "answered a result where a JSON-RPC error -32001 was due")
    assert got["malformed"][0] == Outcome.FAILED and "answered 500, a server error" in got["malformed"][1]
    assert got["denied_streaming"] == (
        Outcome.FAILED,
        "answered a stream of results where a JSON-RPC error -32004 was due",
    )
    assert got["denied_push"] == (Outcome.FAILED, "answered error -32001 (no), not -32003 or -32004")
    assert got["denied_extended_card"][0] == Outcome.FAILED and "another id" in got["denied_extended_card"][1]


@pytest.mark.django_db
def test_a_streaming_method_may_answer_its_error_as_the_stream_s_one_event(agent):
    def streamed(body: bytes) -> Page:
        request = orjson.loads(body) if body.startswith(b'{"jsonrpc":"2.0"') else {}
        if request.get("method") == "SubscribeToTask":
            event = orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32004, "message": "no"}})
            return Page(
                200, {"Content-Type": "text/event-stream"}, b": hello\n\nevent: error\ndata: " + event + b"\n\n"
            )
        return conforming_jsonrpc(body)

    agent.posts["/rpc"] = streamed
    entry = approved_entry(agent)
    conformance.entry_conformance_run(entry_id=entry.pk)
    result = ConformanceResult.objects.get(entry=entry, name="denied_streaming")
    assert (result.outcome, result.detail) == (Outcome.PASSED, "answered error -32004 (no) in an event stream")


@pytest.mark.django_db
def test_a_card_served_now_that_is_not_the_approved_one_fails_the_card_check(agent):
    entry = approved_entry(agent)
    agent.serve(
        CARD_PATH, card_document(name="Conformance agent", url=agent.url("/rpc", host=HOST), description="changed")
    )
    conformance.entry_conformance_run(entry_id=entry.pk)
    card = ConformanceResult.objects.get(entry=entry, name="card")
    assert card.outcome == Outcome.FAILED and "is not the approved one" in card.detail


@pytest.mark.django_db
def test_an_endpoint_that_wants_credentials_is_skipped_not_failed(agent):
    agent.posts["/rpc"] = lambda body: Page(
        401, {"Content-Type": "application/json", "WWW-Authenticate": "Bearer"}, b"{}"
    )
    entry = approved_entry(agent)
    conformance.entry_conformance_run(entry_id=entry.pk)
    got = outcomes(entry)
    assert got.pop(("card", "")) == Outcome.PASSED
    assert set(got.values()) == {Outcome.SKIPPED}


@pytest.mark.django_db
def test_interfaces_the_directory_does_not_check_are_recorded_as_not_run(agent):
    entry = approved_entry(agent, bindings=["AMQP"])
    conformance.entry_conformance_run(entry_id=entry.pk)
    (skipped,) = ConformanceResult.objects.filter(entry=entry, name="interface")
    assert (skipped.binding, skipped.outcome) == ("AMQP", Outcome.SKIPPED)
    assert agent.bodies == []


@pytest.mark.django_db
def test_the_http_json_binding_is_asked_by_its_routes(agent):
    agent.serve("/rest/extendedAgentCard", {"error": {"code": 400, "status": "UNIMPLEMENTED"}}, status=400)
    # GET /rest/tasks/<id> is the card server's 404 already; :subscribe and push configs are 404 too: wrong.
    entry = approved_entry(agent, url=agent.url("/rest", host=HOST), bindings=["HTTP+JSON"])
    conformance.entry_conformance_run(entry_id=entry.pk)
    assert outcomes(entry) == {
        ("card", ""): Outcome.PASSED,
        ("unknown_task", "HTTP+JSON"): Outcome.PASSED,
        ("denied_streaming", "HTTP+JSON"): Outcome.FAILED,
        ("denied_push", "HTTP+JSON"): Outcome.FAILED,
        ("denied_extended_card", "HTTP+JSON"): Outcome.PASSED,
    }
    assert all(seen.headers.get("a2a-version") == "1.0" for seen in agent.requests if seen.path.startswith("/rest"))


@pytest.mark.django_db
def test_a_silent_agent_holds_the_run_no_longer_than_its_budget(agent, settings):
    settings.REGISTRY_CONFORMANCE_TIMEOUT = 0.3
    settings.REGISTRY_CONFORMANCE_BUDGET = 1.0

    def silent(body: bytes) -> Page:
        time.sleep(2)
        return error(None, -32001)

    agent.posts["/rpc"] = silent
    entry = approved_entry(agent)
    started = time.monotonic()
    conformance.entry_conformance_run(entry_id=entry.pk)
    assert time.monotonic() - started < 3
    details = [r.detail for r in ConformanceResult.objects.filter(entry=entry).exclude(name="card")]
    assert details[0].startswith("no answer: timed out")
    assert details[-1] == "not run: the run's time budget was spent"


@pytest.mark.django_db
def test_an_address_the_guard_refuses_is_never_asked(agent, settings):
    settings.OUTBOUND_ALLOW_NETS = []
    entry = approved_entry(agent)
    conformance.entry_conformance_run(entry_id=entry.pk)
    assert agent.requests == []
    # This server may not go there: that says nothing of the agent, so nothing was run.
    results = ConformanceResult.objects.filter(entry=entry)
    assert {r.outcome for r in results} == {Outcome.SKIPPED}
    assert all(r.detail.startswith("not run: refused by the address guard") for r in results)


@pytest.mark.django_db
def test_only_approved_entries_are_run_and_the_beat_hands_each_out_once(agent):
    approved = approved_entry(agent)
    pending = make_entry(name="Pending", state=State.PENDING)
    assert conformance.entry_conformance_run(entry_id=pending.pk) is None
    due = conformance.conformance_due()
    assert approved.pk in due and pending.pk not in due
    assert approved.pk not in conformance.conformance_due()  # leased
    conformance.entry_conformance_run(entry_id=approved.pk)
    # A job run twice (a redelivery) does not run again at once.
    assert conformance.entry_conformance_run(entry_id=approved.pk) is None


@pytest.mark.django_db
def test_a_new_run_replaces_the_last_one(agent):
    entry = approved_entry(agent)
    first, _ = conformance.entry_conformance_run(entry_id=entry.pk)
    later = timezone.now() + conformance.RERUN_GAP * 2
    second, _ = conformance.entry_conformance_run(entry_id=entry.pk, now=later)
    kept = list(ConformanceResult.objects.filter(entry=entry))
    assert {r.pk for r in kept} == {r.pk for r in second} and all(r.at == later for r in kept)
    assert not {r.pk for r in first} & {r.pk for r in kept}


@pytest.mark.django_db
def test_approval_makes_the_entry_due_at_once(agent):
    entry = make_entry(name="Waiting", state=State.PENDING)
    Entry.objects.filter(pk=entry.pk).update(next_conformance_at=timezone.now() + timezone.timedelta(days=3))
    services.entry_decide(entry=entry, to=State.APPROVED, actor=None, role="curator")
    assert entry.pk in conformance.conformance_due()


@pytest.mark.django_db
def test_the_page_and_the_api_show_the_results_with_their_date(agent, client):
    entry = approved_entry(agent)
    results, _ = conformance.entry_conformance_run(entry_id=entry.pk)
    page = client.get(f"/registry/{entry.pk}/").content.decode()
    assert "Conformance checks" in page and "<code>denied_push</code>" in page
    assert results[0].at.strftime("%Y-%m-%d %H:%M") in page
    body = client.get(f"/api/registry/agents/{entry.pk}/").json()
    assert body["conformance"]["at"] is not None
    assert [(r["check"], r["binding"], r["outcome"]) for r in body["conformance"]["results"]] == [
        (r.name, r.binding, r.outcome) for r in results
    ]


# --- against this server itself -------------------------------------------------------------------


def keep_from_the_servers_beat(entry: Entry) -> None:
    """The in-process server runs the beat on the shared test database: its own run of this
    entry's checks would make the test's a duplicate (skipped)."""
    later = timezone.now() + timezone.timedelta(days=1)
    Entry.objects.filter(pk=entry.pk).update(next_conformance_at=later, next_check_at=later, next_proof_check_at=later)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_this_server_s_own_hosted_agent_passes_the_directory_s_checks(live_in_process, settings, tenant):
    from tests.conftest import make_agent

    settings.REGISTRY_HOSTED_BASE_URL = live_in_process.url
    agent = make_agent(tenant, "plain", "echo", is_public=True, streaming=False, push_notifications=False)
    entry = services.hosted_entry_sync(agent_id=agent.pk)
    curator = get_user_model().objects.create_user("curator")
    services.entry_decide(entry=entry, to=State.APPROVED, actor=curator, role="curator")
    keep_from_the_servers_beat(entry)
    results, attestation = conformance.entry_conformance_run(entry_id=entry.pk)
    got = {(r.name, r.binding): (r.outcome, r.detail) for r in results}
    failed = {k: v for k, v in got.items() if v[0] != Outcome.PASSED and k[1] != "GRPC"}
    assert failed == {}, failed
    assert {("unknown_task", "JSONRPC"), ("malformed", "JSONRPC"), ("denied_push", "JSONRPC")} <= set(got)
    assert ("unknown_task", "HTTP+JSON") in got
    assert attestation is not None


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("dialect", ["0.3", "0.1"])
def test_this_server_answers_the_older_dialects_checks_as_the_directory_expects(live_in_process, tenant, dialect):
    """The same agent asked in A2A 0.3 and 0.1 (an entry whose approved card says so): every
    question but the card's (this card is not the one the server serves) passes."""
    from tests.conftest import make_agent

    agent = make_agent(tenant, "older", "echo", is_public=True, streaming=False, push_notifications=False)
    url = f"{live_in_process.url}{agent.path}"
    entry = make_entry(name="Older", url=url, card_url=f"{live_in_process.url}/nowhere/card.json")
    version = entry.approved_version
    version.dialect = dialect
    version.index = {**version.index, "dialect": dialect, "capabilities": []}
    version.index["endpoints"] = [{"url": url, "binding": "JSONRPC", "protocol_version": dialect, "tenant": ""}]
    version.save(update_fields=["dialect", "index"])
    keep_from_the_servers_beat(entry)
    results, _ = conformance.entry_conformance_run(entry_id=entry.pk)
    got = {r.name: (r.outcome, r.detail) for r in results if r.name != "card"}
    expected = {"unknown_task", "malformed", "denied_streaming", "denied_push"}
    if dialect == "0.3":
        expected.add("denied_extended_card")
    assert set(got) == expected and {o for o, _ in got.values()} == {Outcome.PASSED}, got
    assert {r.dialect for r in results} == {dialect}


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_this_server_s_aip_endpoint_answers_the_directory_s_checks_and_stores_nothing(live_in_process, tenant):
    """An ACS card's JSON-RPC endpoint: a Leader's get of a task nobody has is -32001, a body
    that is not JSON a parse error, and no task comes of either."""
    from tasks_app.models import Task
    from tests.conftest import make_agent

    agent = make_agent(tenant, "aipcheck", "echo", is_public=True)
    url = f"{live_in_process.url}{agent.path}aip/rpc"
    entry = make_entry(name="Aip", url=url, card_url=f"{live_in_process.url}/nowhere/acs.json")
    version = entry.approved_version
    version.dialect = "acs"
    version.index = {**version.index, "dialect": "acs", "capabilities": []}
    version.index["endpoints"] = [{"url": url, "binding": "JSONRPC", "protocol_version": "1.0", "tenant": ""}]
    version.save(update_fields=["dialect", "index"])
    keep_from_the_servers_beat(entry)
    tasks_before = Task.objects.count()
    results, _ = conformance.entry_conformance_run(entry_id=entry.pk)
    got = {r.name: (r.outcome, r.detail) for r in results if r.name != "card"}
    assert set(got) == {"unknown_task", "malformed"} and {o for o, _ in got.values()} == {Outcome.PASSED}, got
    assert got["unknown_task"][1].startswith("answered error -32001")
    assert {r.dialect for r in results} == {"acs"}
    assert Task.objects.count() == tasks_before


# --- gRPC (registry/conformance_grpc.py) ------------------------------------------------------


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_this_server_s_grpc_binding_answers_every_check_as_a_2_a_1_0_maps_the_errors(live_celery, tenant):
    from registry import conformance_grpc
    from tests.conftest import make_agent
    from tests.grpc_support import grpc_serving

    make_agent(tenant, "plaingrpc", "echo", is_public=True, streaming=False, push_notifications=False)
    with grpc_serving(live_celery.env, live_celery.logs) as (address, _, _):
        found = conformance_grpc.grpc_checks(
            url=address, tenant="acme/plaingrpc", capabilities=set(), timeout=lambda: 5.0, max_body=16 * 1024
        )
        # The same interface without the tenant names no agent: a check that fails, saying so.
        unnamed = conformance_grpc.grpc_checks(
            url=address,
            tenant="",
            capabilities={"streaming", "push_notifications", "extended_card"},
            timeout=lambda: 5.0,
            max_body=16 * 1024,
        )
    got = {name: (outcome, detail) for name, outcome, detail in found}
    assert set(got) == {"unknown_task", "malformed", "denied_streaming", "denied_push", "denied_extended_card"}
    assert {outcome for outcome, _ in got.values()} == {Outcome.PASSED}, got
    assert got["unknown_task"][1] == "answered NOT_FOUND (task not found)"
    unnamed_got = {name: (outcome, detail) for name, outcome, detail in unnamed}
    assert unnamed_got["unknown_task"][0] == Outcome.FAILED
    assert "NOT_FOUND" in unnamed_got["unknown_task"][1] and "agentserver-agent" in unnamed_got["unknown_task"][1]


def test_a_grpc_address_the_guard_refuses_is_never_dialled(settings):
    from registry import conformance_grpc

    settings.OUTBOUND_ALLOW_NETS = []
    (found,) = conformance_grpc.grpc_checks(
        url="127.0.0.2:50051", tenant="", capabilities=set(), timeout=lambda: 1.0, max_body=1024
    )
    assert found[0] == "interface" and found[1] == Outcome.SKIPPED and "address guard" in found[2]


@pytest.mark.parametrize("tenant", ["", "acme/echo", "ünï/cødé", "a\nb", "x" * 5000])
def test_a_grpc_interface_that_does_not_answer_fails_within_the_timeout(settings, tenant):
    from registry import conformance_grpc
    from tests.conftest import _free_port

    port = _free_port()  # nothing listens there
    began = time.monotonic()
    found = conformance_grpc.grpc_checks(
        url=f"127.0.0.1:{port}", tenant=tenant, capabilities=set(), timeout=lambda: 0.5, max_body=1024
    )
    assert {outcome for _, outcome, _ in found} == {Outcome.FAILED}
    assert all(detail.startswith("no answer") for _, _, detail in found), found
    assert time.monotonic() - began < 5


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    url=st.text(max_size=80)
    | st.from_regex(r"(grpcs?|https?|ftp)://[a-z0-9.\[\]:]{0,30}(:[0-9]{0,7})?", fullmatch=True)
)
def test_no_address_a_card_names_for_grpc_breaks_the_check(url):
    from registry import conformance_grpc

    target = conformance_grpc._target(url)
    assert isinstance(target, str) or (target[0] and 0 <= target[1] < 2**16)
