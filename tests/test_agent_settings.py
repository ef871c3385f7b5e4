"""An agent's settings are checked against its executor's JSON Schema wherever a tenant sets
them: the admin's agent form and create_agent. accounts learns the executors and their
schemas from tasks_app through accounts.agent_kinds, never by importing it."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.forms.models import model_to_dict

from accounts import agent_kinds
from accounts.admin import AgentForm
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db


def form_for(agent, **changes):
    data = {**model_to_dict(agent), **changes}
    for key in ("skills", "input_modes", "output_modes", "settings", "extensions", "extended_card"):
        data[key] = json.dumps(data[key])
    return AgentForm(data=data, instance=agent)


def test_accounts_knows_every_executor_and_its_schema_through_the_hook():
    kinds = agent_kinds.kinds()
    assert {"echo", "writer", "conformance"} <= set(kinds)
    assert kinds["writer"].schema["properties"]["delay"]["type"] == "number"


def test_settings_that_break_the_executor_s_schema_are_refused_one_problem_a_line(tenant):
    writer = make_agent(tenant, "writer", "writer", settings={"delay": 0})
    form = form_for(writer, settings={"delay": "soon", "paragraphs": 0, "colour": "red"})
    assert not form.is_valid()
    problems = form.errors["settings"]
    assert "settings['delay']: 'soon' is not of type 'number'" in problems
    assert "settings['paragraphs']: 0 is less than the minimum of 1" in problems
    assert any("'colour' was unexpected" in p for p in problems)


def test_good_settings_are_saved(tenant):
    writer = make_agent(tenant, "writer", "writer", settings={"delay": 0})
    form = form_for(writer, settings={"delay": 0.5, "paragraphs": 3})
    assert form.is_valid(), form.errors
    assert form.save().settings == {"delay": 0.5, "paragraphs": 3}


def test_an_executor_this_install_does_not_have_is_refused(tenant):
    agent = make_agent(tenant, "old", "echo")
    form = form_for(agent, executor="vanished")
    assert not form.is_valid() and "executor" in form.errors


def test_the_agent_form_shows_the_executor_s_schema(admin_client, tenant):
    writer = make_agent(tenant, "writer", "writer", settings={"delay": 0})
    page = admin_client.get(f"/admin/accounts/agent/{writer.pk}/change/").content.decode()
    assert "checked against the executor's JSON Schema" in page and "&quot;paragraphs&quot;" in page
    assert "writer: Writes a short text" in page


def test_create_agent_refuses_settings_its_executor_does_not_take(tenant):
    with pytest.raises(CommandError, match=r"settings\['delay'\]: 'soon' is not of type 'number'"):
        call_command("create_agent", "acme", "w2", "--executor", "writer", "--executor-settings", '{"delay": "soon"}')
    call_command("create_agent", "acme", "w2", "--executor", "writer", "--executor-settings", '{"delay": 1}')


def test_rules_beyond_the_schema_are_checked_once_the_schema_holds(tenant, settings):
    settings.WEBHOOK_ALLOW_HTTP = False
    hook = make_agent(tenant, "hook", "webhook", settings={"url": "https://agent.example.test/run"})
    form = form_for(hook, settings={"url": "http://127.0.0.2/run"})
    assert not form.is_valid()
    problems = form.errors["settings"]
    assert "settings['url']: must use https (this server sends plain http only with WEBHOOK_ALLOW_HTTP set)" in problems
    assert (
        "settings['url']: this address is not allowed: 127.0.0.2 (this server reaches public addresses only, "
        "and the networks its OUTBOUND_ALLOW_NETS lists)" in problems
    )
    # A schema problem alone is reported: the other rules assume settings of the right shape.
    assert form_for(hook, settings={"url": 7}).errors["settings"] == ["settings['url']: 7 is not of type 'string'"]


def test_an_executor_s_own_check_that_breaks_is_a_problem_not_an_error(monkeypatch):
    def broken(values):
        raise KeyError("url")

    kinds = dict(agent_kinds.kinds())
    kinds["echo"] = agent_kinds.Kind(name="echo", problems=broken)
    monkeypatch.setattr(agent_kinds, "kinds", lambda: kinds)
    assert agent_kinds.settings_problems("echo", {}) == ["settings: the executor's own check failed (KeyError: 'url')"]
