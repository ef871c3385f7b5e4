"""One service checks and saves an agent (accounts.agent_services) for the admin's form,
`create_agent` and the tenant API: the same input gets the same answer from each. What it
checks when an agent is saved: the fields, the executor (installed, and allowed for the
tenant), its settings, the secret it needs, and a fronted agent's upstream (its card fetched
through the outbound guard, its content offered). The upstreams here are real a2a-sdk servers
on 127.0.0.1 (tests/a2a_upstream.py); refusals use 127.0.0.2 and [::ffff:127.0.0.3]."""

from __future__ import annotations

import io
import json
import logging
import re
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.forms.models import model_to_dict
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from accounts import sealing
from accounts.admin import AgentForm
from accounts.agent_services import SETTABLE, AgentInvalid, agent_check, agent_save, tenant_executors_set
from accounts.models import Agent
from accounts.selectors import agents_stranded, executors_for
from accounts.services import AccountError, tenant_ensure
from tasks_app.executors import REGISTRY, Executor, plugins
from tasks_app.executors.upstream import card as cards
from tasks_app.models import Task
from tests import hostile
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db

NETS_HINT = "(this server reaches public addresses only, and the networks its OUTBOUND_ALLOW_NETS lists)"
PLUGIN = "shouter-plugin"


@pytest.fixture(autouse=True)
def _fresh_cards():
    cards.forget()
    logging.getLogger("a2a").setLevel(logging.CRITICAL)
    yield
    cards.forget()
    logging.getLogger("a2a").setLevel(logging.NOTSET)


class Shouter(Executor):
    name = PLUGIN
    description = "Answers in capitals."

    def execute(self, ctx):
        ctx.complete(artifact=ctx.text.upper())


@pytest.fixture
def plugin(monkeypatch):
    """An executor as an installed distribution adds it (not built in: granted per tenant)."""
    monkeypatch.setitem(REGISTRY, PLUGIN, Shouter)
    monkeypatch.setattr(
        plugins, "LOADED", [*plugins.LOADED, plugins.Loaded(PLUGIN, "acme-agents 1.0", "acme_agents:Shouter")]
    )
    return PLUGIN


def problems_of(tenant, slug: str = "x", values: dict | None = None, secret: str | None = None, agent=None):
    with pytest.raises(AgentInvalid) as refused:
        agent_check(tenant=tenant, slug=slug, values=values or {}, secret=secret, agent=agent)
    return refused.value.problems


# --- the same answer everywhere -------------------------------------------------------------


def new_agent_form(tenant, slug: str, values: dict[str, Any], secret_action: str = "keep") -> AgentForm:
    data = {**model_to_dict(Agent(tenant=tenant, slug=slug)), "tenant": tenant.pk, "slug": slug, **values}
    data.update({"name": data["name"] or "", "secret_action": secret_action, "new_secret": ""})
    for key in ("skills", "input_modes", "output_modes", "settings", "extensions", "extended_card"):
        data[key] = json.dumps(data[key])
    return AgentForm(data={k: v for k, v in data.items() if v is not None and k != "id"})


def create_agent_args(slug: str, values: dict[str, Any]) -> list[str]:
    args = ["acme", slug, "--executor", values["executor"]]
    if "settings" in values:
        args += ["--executor-settings", json.dumps(values["settings"])]
    if "skills" in values:
        args += ["--skills", json.dumps(values["skills"])]
    if "extended_card" in values:
        args += ["--extended-card", json.dumps(values["extended_card"])]
    return args


SAME_ANSWER_CASES = {
    "a webhook agent without a secret": {"executor": "webhook", "settings": {"url": "https://hooks.example.test/run"}},
    "an executor that is not installed": {"executor": "vanished"},
    "an installed executor the tenant was not granted": {"executor": PLUGIN},
    "settings the executor's schema refuses": {"executor": "writer", "settings": {"delay": "soon", "colour": "red"}},
    "a plain http upstream without the switch": {
        "executor": "a2a-upstream",
        "settings": {"url": "http://127.0.0.1:9/"},
    },
    "an upstream at a refused address": {"executor": "a2a-upstream", "settings": {"url": "https://127.0.0.2/agent/"}},
    "a webhook at a refused address": {"executor": "webhook", "settings": {"url": "https://[::ffff:127.0.0.3]/run"}},
    "skills that break the card's schema": {"executor": "echo", "skills": [{"name": "no id"}]},
    "an extended card naming its own address and provider": {
        "executor": "echo",
        "extended_card": {"url": "https://attacker.invalid/a2a", "provider": {"organization": "agentserver platform"}},
    },
}


@pytest.mark.parametrize("values", SAME_ANSWER_CASES.values(), ids=SAME_ANSWER_CASES.keys())
def test_the_same_invalid_input_gets_the_same_problems_from_the_service_the_admin_and_create_agent(
    tenant, plugin, settings, values
):
    settings.WEBHOOK_ALLOW_HTTP = False
    expected = problems_of(tenant, "x", values)
    messages = sorted(m for ms in expected.values() for m in ms)
    assert messages

    form = new_agent_form(tenant, "x", values)
    assert not form.is_valid()
    assert sorted(m for ms in form.errors.values() for m in ms) == messages

    with pytest.raises(CommandError) as refused:
        call_command("create_agent", *create_agent_args("x", values), stdout=io.StringIO())
    for message in messages:
        assert message in str(refused.value)
    assert not Agent.objects.filter(slug="x").exists()


def test_every_problem_is_listed_at_once_under_its_field(tenant):
    problems = problems_of(
        tenant,
        "bad slug!",
        {"executor": "writer", "settings": {"delay": -1}, "icon_url": "ftp://x.example/i", "colour": "red"},
    )
    assert set(problems) == {"slug", "settings", "icon_url", "__all__"}
    assert problems["__all__"] == ["'colour' is not a field of an agent that can be set"]
    assert problems["settings"] == ["settings['delay']: -1 is less than the minimum of 0"]


def test_a_valid_agent_is_checked_then_saved_with_defaults_the_service_fills(tenant):
    checked = agent_check(tenant=tenant, slug="helper", values={"executor": "echo"})
    assert checked["name"] == "helper" and checked["description"] == "The helper agent."
    agent = agent_save(tenant=tenant, slug="helper", values={"executor": "echo", "is_public": True})
    assert agent.pk and agent.name == "helper" and agent.is_public


def test_an_update_changes_only_the_fields_given_and_keeps_the_secret(tenant):
    agent = agent_save(tenant=tenant, slug="h", values={"executor": "echo", "name": "Helper"}, secret="tok-1")
    agent_save(tenant=tenant, slug="h", values={"description": "Now described."}, agent=agent)
    agent.refresh_from_db()
    assert (agent.name, agent.description) == ("Helper", "Now described.")
    assert sealing.unseal(agent.secret_sealed) == "tok-1"


def test_another_tenant_s_agent_or_a_taken_slug_is_refused(tenant):
    globex = tenant_ensure(slug="globex", name="Globex")
    theirs = agent_save(tenant=globex, slug="g", values={"executor": "echo"})
    assert problems_of(tenant, "g", {"name": "mine now"}, agent=theirs) == {
        "__all__": ["the agent is not one of acme's"]
    }
    agent_save(tenant=tenant, slug="taken", values={"executor": "echo"})
    assert problems_of(tenant, "taken", {"executor": "echo"}) == {"slug": ["acme has an agent 'taken' already"]}


# --- a fronted agent's upstream, checked when saved -----------------------------------------


def test_a_fronted_agent_s_card_is_fetched_when_saved_and_its_content_offered(tenant, upstream):
    agent = agent_save(tenant=tenant, slug="f", values={"executor": "a2a-upstream", "settings": {"url": upstream.base}})
    assert agent.name == "scripted upstream"
    assert agent.description == "An a2a-sdk agent that follows a script"
    assert agent.skills == [{"id": "script", "name": "script", "description": "follows a script", "tags": ["test"]}]
    assert (agent.input_modes, agent.output_modes) == (["text/plain"], ["text/plain"])
    assert len(upstream.seen.card_requests) == 1


def test_what_the_owner_gave_is_kept_and_the_rest_comes_from_a_0_3_upstream(tenant, upstream_03):
    values = {"executor": "a2a-upstream", "settings": {"url": upstream_03.base}, "name": "Ours"}
    agent = agent_save(tenant=tenant, slug="f", values=values, secret="tok-9")
    assert agent.name == "Ours" and agent.description == "An a2a-sdk agent that follows a script"
    assert upstream_03.seen.card_requests[-1]["authorization"] == "Bearer tok-9"  # its credential, as a run sends
    # The owner edits the card afterwards; a save that leaves the upstream alone fetches nothing.
    agent_save(tenant=tenant, slug="f", values={"description": "Ours too."}, agent=agent)
    agent.refresh_from_db()
    assert agent.description == "Ours too." and len(upstream_03.seen.card_requests) == 1


def test_the_admin_and_create_agent_offer_the_upstream_s_card_too(tenant, upstream, admin_client):
    out = io.StringIO()
    settings_json = json.dumps({"url": upstream.base})
    call_command(
        "create_agent", "acme", "f1", "--executor", "a2a-upstream", "--executor-settings", settings_json, stdout=out
    )
    assert Agent.objects.get(slug="f1").name == "scripted upstream"
    form = new_agent_form(tenant, "f2", {"executor": "a2a-upstream", "settings": {"url": upstream.base}})
    assert form.is_valid(), form.errors
    assert form.save().skills[0]["id"] == "script"


def test_an_upstream_that_cannot_be_reached_is_refused_saying_so_and_nothing_is_stored(tenant, upstream):
    url = upstream.base
    upstream.stop()
    [problem] = problems_of(tenant, "f", {"executor": "a2a-upstream", "settings": {"url": url}})["settings"]
    assert problem.startswith(
        f"settings['url']: the upstream's card at {url}/.well-known/agent-card.json could not be fetched (ConnectError"
    )
    assert not Agent.objects.filter(slug="f").exists()


def test_an_upstream_that_answers_no_card_is_refused_saying_what_it_answered(tenant, upstream):
    url = f"{upstream.base}/elsewhere/"
    assert problems_of(tenant, "f", {"executor": "a2a-upstream", "settings": {"url": url}}) == {
        "settings": [
            f"settings['url']: the upstream's card at {url}.well-known/agent-card.json could not be fetched: HTTP 404"
        ]
    }


def test_an_upstream_whose_card_offers_nothing_usable_is_refused(tenant, upstream_03):
    settings_ = {"url": upstream_03.base, "protocol": "1.0"}
    [problem] = problems_of(tenant, "f", {"executor": "a2a-upstream", "settings": settings_})["settings"]
    assert "offers no interface this server's A2A client can use" in problem and "it offers JSONRPC 0.3" in problem


@pytest.mark.parametrize("host", ["127.0.0.2", "[::ffff:127.0.0.3]"])
def test_an_upstream_the_outbound_guard_refuses_is_refused_naming_the_setting(tenant, host):
    url = f"http://{host}:8080/agent/"
    assert problems_of(tenant, "f", {"executor": "a2a-upstream", "settings": {"url": url}}) == {
        "settings": [
            f"settings['url']: the upstream's card at {url}.well-known/agent-card.json may not be fetched: "
            f"this address is not allowed: {host} {NETS_HINT}"
        ]
    }


def test_a_plain_http_upstream_needs_the_switch_webhooks_need(tenant, upstream, settings):
    values = {"executor": "a2a-upstream", "settings": {"url": upstream.base}}
    settings.WEBHOOK_ALLOW_HTTP = False
    assert problems_of(tenant, "f", values) == {
        "settings": [
            "settings['url']: must use https (this server fronts plain http upstreams only with WEBHOOK_ALLOW_HTTP set)"
        ]
    }
    assert upstream.seen.card_requests == []  # refused before anything was sent
    settings.WEBHOOK_ALLOW_HTTP = True
    assert agent_save(tenant=tenant, slug="f", values=values).name == "scripted upstream"


@pytest.mark.django_db(transaction=True)  # the run is sent after the commit
def test_a_stored_plain_http_upstream_fails_its_runs_once_the_switch_is_off(tenant, rpc, alice_key, settings):
    make_agent(tenant, "f", "a2a-upstream", settings={"url": "http://127.0.0.1:9/"})
    settings.WEBHOOK_ALLOW_HTTP = False
    task = rpc.send("/agents/acme/f/", "echo x", key=alice_key).result["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    stored = Task.objects.get(pk=task["id"])
    assert stored.failure == "misconfigured"
    assert "WEBHOOK_ALLOW_HTTP" in stored.status_changes.order_by("-id").first().reason


# --- a webhook agent's secret ---------------------------------------------------------------


def test_a_webhook_agent_cannot_be_saved_without_a_secret(tenant):
    values = {"executor": "webhook", "settings": {"url": "https://hooks.example.test/run"}}
    assert list(problems_of(tenant, "hook", values)) == ["secret"]
    agent = agent_save(tenant=tenant, slug="hook", values=values, secret="whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0")
    assert list(problems_of(tenant, "hook", {}, secret="", agent=agent)) == ["secret"]  # nor lose it later
    agent.refresh_from_db()
    assert agent.secret_sealed


def test_create_agent_says_how_to_give_a_webhook_agent_its_secret(tenant):
    args = ["acme", "hook", "--executor", "webhook", "--executor-settings", '{"url": "https://hooks.example.test/r"}']
    with pytest.raises(CommandError, match=r"secret: a webhook agent needs a secret.*--generate-secret"):
        call_command("create_agent", *args)
    call_command("create_agent", *args, "--generate-secret", stdout=io.StringIO())
    assert Agent.objects.get(slug="hook").secret_sealed


@pytest.mark.parametrize(
    "settings_, setting",
    [
        ({"url": "http://hooks.example.test/r"}, "WEBHOOK_ALLOW_HTTP"),
        ({"url": "https://127.0.0.2/r"}, "OUTBOUND_ALLOW_NETS"),
    ],
)
def test_create_agent_names_the_server_setting_that_refuses_it(tenant, settings, settings_, setting):
    settings.WEBHOOK_ALLOW_HTTP = False
    args = ["acme", "hook", "--executor", "webhook", "--executor-settings", json.dumps(settings_), "--generate-secret"]
    with pytest.raises(CommandError, match=setting):
        call_command("create_agent", *args)


# --- installed executors, per tenant --------------------------------------------------------


def test_an_installed_executor_is_usable_only_where_the_operator_granted_it(tenant, plugin):
    assert plugin not in executors_for(tenant) and {"echo", "webhook", "a2a-upstream"} <= set(executors_for(tenant))
    assert problems_of(tenant, "loud", {"executor": plugin}) == {
        "executor": [f"executor '{plugin}' is not allowed for tenant acme; its operator grants installed executors"]
    }
    tenant_executors_set(tenant=tenant, executors=[plugin])
    assert plugin in executors_for(tenant)
    assert agent_save(tenant=tenant, slug="loud", values={"executor": plugin}).executor == plugin


def test_a_grant_names_installed_executors_only(tenant, plugin):
    with pytest.raises(AccountError, match="'echo' is built in: every tenant may use the built-in executors"):
        tenant_executors_set(tenant=tenant, executors=["echo"])
    with pytest.raises(AccountError, match=f"no installed executor 'nope'; this server has {plugin}"):
        tenant_executors_set(tenant=tenant, executors=["nope"])
    tenant.refresh_from_db()
    assert tenant.allowed_executors == []


def test_the_allow_executors_command_grants_and_withdraws(tenant, plugin):
    out = io.StringIO()
    call_command("allow_executors", "acme", plugin, "--json", stdout=out)
    assert json.loads(out.getvalue())["allowed"] == [plugin]
    call_command("allow_executors", "acme", plugin, "--remove", stdout=io.StringIO())
    tenant.refresh_from_db()
    assert tenant.allowed_executors == []
    with pytest.raises(CommandError, match="'writer' is built in"):
        call_command("allow_executors", "acme", "writer")


@pytest.mark.django_db(transaction=True)  # the run is sent after the commit
def test_an_agent_whose_executor_was_withdrawn_fails_its_runs_readably_and_is_flagged(
    tenant, plugin, rpc, alice_key, admin_client
):
    tenant_executors_set(tenant=tenant, executors=[plugin])
    agent = agent_save(tenant=tenant, slug="loud", values={"executor": plugin})
    done = rpc.send(agent.path, "quiet", key=alice_key).result["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"

    tenant_executors_set(tenant=tenant, executors=[])
    failed = rpc.send(agent.path, "quiet", key=alice_key).result["task"]
    stored = Task.objects.get(pk=failed["id"])
    assert stored.failure == "misconfigured"
    assert stored.status_changes.order_by("-id").first().reason == (
        f"the agent is misconfigured: executor '{plugin}' is not allowed for tenant acme; "
        "its operator grants installed executors"
    )
    assert [(s.agent.slug, s.why) for s in agents_stranded()] == [
        ("loud", f"executor '{plugin}' is not allowed for tenant acme; its operator grants installed executors")
    ]
    page = admin_client.get("/admin/tasks_app/task/overview/").content.decode()
    assert "Agents whose executor cannot run them" in page and "acme/loud" in page
    # Its owner may still switch it off or edit its card; choosing the executor again is refused.
    agent_save(tenant=tenant, slug="loud", values={"is_active": False, "description": "Paused."}, agent=agent)
    assert list(problems_of(tenant, "loud", {"settings": {"x": 1}}, agent=agent)) == ["executor"]


def test_an_agent_whose_executor_is_no_longer_installed_is_flagged(tenant, admin_client):
    make_agent(tenant, "gone", "uninstalled-plugin")
    [stranded] = agents_stranded()
    assert stranded.why.startswith("no executor 'uninstalled-plugin' is installed on this server; acme may use ")
    page = admin_client.get("/admin/tasks_app/task/overview/").content.decode()
    assert "acme/gone" in page and "uninstalled-plugin" in page


# --- any values -----------------------------------------------------------------------------

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from(sorted(SETTABLE | {"tenant", "secret_sealed", "id", "colour"}))
EXECUTORS = st.sampled_from(["echo", "writer", "webhook", "conformance", "vanished", PLUGIN, ""])
# A fronted agent's upstream only at a refused address: nothing may be sent off this machine.
SETTINGS = JSONISH | st.fixed_dictionaries(
    {"url": st.sampled_from(["https://127.0.0.2/", "ftp://x", "https://x.test/"])}
)


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    slug=st.text(max_size=70),
    values=st.dictionaries(FIELDS, JSONISH, max_size=6),
    executor=EXECUTORS,
    settings_=SETTINGS,
    secret=st.none() | st.text(max_size=30),
    fronted=st.booleans(),
)
def test_any_values_are_saved_or_refused_with_problems_and_a_refusal_stores_nothing(
    tenant, plugin, slug, values, executor, settings_, secret, fronted
):
    values = {**values, "executor": "a2a-upstream" if fronted else executor, "settings": settings_}
    if fronted:
        values["settings"] = {"url": "https://127.0.0.2/"}
    before = list(Agent.objects.order_by("pk").values_list("pk", "updated_at"))
    try:
        agent = agent_save(tenant=tenant, slug=slug, values=values, secret=secret)
    except AgentInvalid as exc:
        assert exc.problems and all(isinstance(m, str) and m for ms in exc.problems.values() for m in ms)
        assert list(Agent.objects.order_by("pk").values_list("pk", "updated_at")) == before
    else:
        assert Agent.objects.get(pk=agent.pk).slug == slug
        Agent.objects.filter(pk=agent.pk).delete()


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extended=st.none() | JSONISH | hostile.tenant_card_objects())
def test_an_extended_card_is_saved_only_with_the_members_it_may_add_and_each_other_is_named(tenant, extended):
    from accounts.card_content import EXTENDED_MEMBERS

    try:
        agent = agent_save(tenant=tenant, slug="ext", values={"executor": "echo", "extended_card": extended})
    except AgentInvalid as exc:
        problems = exc.problems["extended_card"]
        if not problems[0].startswith("extended_card["):  # refused whole (not storable, not an object)
            return
        for member in set(extended if isinstance(extended, dict) else ()) - set(EXTENDED_MEMBERS):
            assert any(p.startswith(f"extended_card[{member!r}]: ") for p in problems), (member, problems)
    else:
        assert set(agent.extended_card or {}) <= set(EXTENDED_MEMBERS)
        Agent.objects.filter(pk=agent.pk).delete()


def test_a_member_s_agent_page_offers_the_executors_their_tenant_may_use(tenant, plugin):
    from tests.test_admin_detail import browser_for

    agent = agent_save(tenant=tenant, slug="mine", values={"executor": "echo"})
    owner = browser_for("owner", tenant=tenant, role="owner")
    offered = owner.get(f"/admin/accounts/agent/{agent.pk}/change/").content.decode()
    assert 'value="webhook"' in offered and f'value="{plugin}"' not in offered
    tenant_executors_set(tenant=tenant, executors=[plugin])
    assert f'value="{plugin}"' in owner.get(f"/admin/accounts/agent/{agent.pk}/change/").content.decode()
    # Their tenant's page shows the grant, and they cannot change it.
    page = owner.get(f"/admin/accounts/tenant/{tenant.pk}/change/").content.decode()
    assert plugin in page and 'name="allowed_executors"' not in page


@pytest.mark.parametrize("secret", [" padded", "é-accented", "x" * 1001])
def test_a_secret_that_cannot_be_sent_in_a_header_gets_the_same_answer_everywhere(tenant, monkeypatch, secret):
    expected = problems_of(tenant, "x", {"executor": "echo"}, secret=secret)
    assert list(expected) == ["secret"]
    form = new_agent_form(tenant, "x", {"executor": "echo"}, secret_action="set")
    form.data["new_secret"] = secret
    assert not form.is_valid() and form.errors["new_secret"] == expected["secret"]
    monkeypatch.setattr("sys.stdin", io.StringIO(secret + "\n"))
    with pytest.raises(CommandError, match=re.escape(expected["secret"][0])):
        call_command("create_agent", "acme", "x", "--executor", "echo", "--secret-stdin")
    assert not Agent.objects.filter(slug="x").exists()
