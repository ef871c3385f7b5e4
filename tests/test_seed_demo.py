"""`seed_demo` makes the demo tenant ready to call, as often as it is run, and, in the same
process, does what `make run` does next: the directory's approvals and the conformance agent's
host names."""

import io
import json

import pytest
from django.core.management import call_command

from accounts.models import Agent, AgentHost, ApiKey
from registry.models import Entry, State


def test_seed_demo_is_idempotent_and_prints_paths_and_a_fresh_key(db, capsys, rpc):
    call_command("seed_demo", "--json")
    first = json.loads(capsys.readouterr().out)
    call_command("seed_demo", "--json")
    second = json.loads(capsys.readouterr().out)
    assert (
        first["agents"]
        == second["agents"]
        == {
            "echo": "/agents/demo/echo/",
            "conformance": "/agents/demo/conformance/",
            "writer": "/agents/demo/writer/",
        }
    )
    assert first["api_key"] != second["api_key"] and second["api_key_header"] == "X-API-Key"
    assert Agent.objects.filter(tenant__slug="demo").count() == 3
    assert ApiKey.objects.count() == 2
    public = dict(Agent.objects.values_list("slug", "is_public"))
    assert public == {"echo": False, "conformance": True, "writer": False}
    assert rpc("/agents/demo/echo/", "ListTasks", {}, key=second["api_key"]).status == 200


def test_the_conformance_agent_takes_any_media_type_and_the_others_only_text(transactional_db, capsys, rpc):
    call_command("seed_demo", "--json")
    key = json.loads(capsys.readouterr().out)["api_key"]
    unknown = {
        "messageId": "tck-send-003-0001",
        "role": "ROLE_USER",
        "parts": [{"raw": "dGNr", "mediaType": "application/x-unsupported-tck-type"}],
    }
    taken = rpc("/agents/demo/conformance/", "SendMessage", {"message": unknown})
    assert taken.result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    refused = rpc("/agents/demo/echo/", "SendMessage", {"message": {**unknown, "messageId": "m2"}}, key=key)
    assert refused.error["code"] == -32005


@pytest.mark.django_db
def test_it_approves_the_entries_and_binds_the_conformance_agent_keeping_stdout_to_the_json():
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "seed_demo",
        "--json",
        "--approve",
        "the demo",
        "--bind-conformance",
        "127.0.0.2",
        "--bind-conformance",
        "conformance.localhost",
        stdout=out,
        stderr=err,
    )
    assert json.loads(out.getvalue())["tenant"] == "demo"  # nothing else on stdout
    conformance = Agent.objects.get(tenant__slug="demo", slug="conformance")
    bound = {h.host: h.card_version for h in AgentHost.objects.filter(agent=conformance)}
    assert bound == {"127.0.0.2": "0.3", "conformance.localhost": "0.3"}
    entries = Entry.objects.filter(tenant__slug="demo")
    assert entries.count() == 3 and {e.state for e in entries} == {State.APPROVED}
    assert "approved 3 entries of demo" in err.getvalue()


@pytest.mark.django_db
def test_run_again_it_binds_and_approves_nothing_twice():
    for _ in range(2):
        call_command(
            "seed_demo", "--approve", "again", "--bind-conformance", "conformance.localhost", stdout=io.StringIO()
        )
    assert AgentHost.objects.filter(host="conformance.localhost").count() == 1
    assert Entry.objects.filter(tenant__slug="demo").count() == 3
