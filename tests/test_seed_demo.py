"""`manage.py seed_demo` (accounts/management/commands/seed_demo.py): the demo tenant, its agents
and a key, and, in the same process, what `make run` does next: the directory's approvals and
the conformance agent's host names."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from accounts.models import Agent, AgentHost
from registry.models import Entry, State

pytestmark = pytest.mark.django_db


def test_with_json_it_prints_one_object_naming_the_agents_and_a_working_key():
    out = io.StringIO()
    call_command("seed_demo", "--json", stdout=out)
    summary = json.loads(out.getvalue())
    assert summary["tenant"] == "demo" and set(summary["agents"]) == {"echo", "conformance", "writer"}
    assert summary["api_key"].startswith("ask_")


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


def test_run_again_it_binds_and_approves_nothing_twice():
    for _ in range(2):
        call_command(
            "seed_demo", "--approve", "again", "--bind-conformance", "conformance.localhost", stdout=io.StringIO()
        )
    assert AgentHost.objects.filter(host="conformance.localhost").count() == 1
    assert Entry.objects.filter(tenant__slug="demo").count() == 3
