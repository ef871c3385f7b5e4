"""What a tenant configures for a hosted agent of any kind: its secret (sealed, written but
never read back), its card's content (checked when saved), and what its executor keeps on a
task between runs."""

from __future__ import annotations

import io
import json
import re
import uuid

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.forms.models import model_to_dict

from accounts import sealing
from accounts.admin import AgentForm
from accounts.models import Agent
from accounts.selectors import Principal
from accounts.services import AccountError, agent_secret_generate, agent_secret_set
from protocols import contract
from tasks_app import dispatch, runner, services
from tasks_app.domain import NewMessage
from tasks_app.errors import TaskClosed
from tasks_app.executors import REGISTRY, Executor, Misconfigured
from tasks_app.lifecycle import Dialect, TaskState
from tasks_app.models import Task
from tests.conftest import make_agent

pytestmark = pytest.mark.django_db

SECRET_FORM = re.compile(r"^whsec_[A-Za-z0-9+/]{43}=$")


def form_for(agent, **changes):
    data = {**model_to_dict(agent), "secret_action": "keep", "new_secret": "", **changes}
    for key in ("skills", "input_modes", "output_modes", "settings", "extensions", "extended_card"):
        data[key] = json.dumps(data[key])
    return AgentForm(data=data, instance=agent)


def hosts_inline(*rows: dict, initial: int = 0) -> dict:
    """The page's inline of host names (accounts.admin_hosts), with these rows."""
    data = {"hosts-TOTAL_FORMS": str(len(rows)), "hosts-INITIAL_FORMS": str(initial)}
    for i, row in enumerate(rows):
        data.update({f"hosts-{i}-{name}": value for name, value in row.items()})
    return data


def change_page(admin_client, agent, **changes):
    form = form_for(agent, **changes)
    data = {k: ("" if v is None else v) for k, v in form.data.items()}
    data["tenant"] = agent.tenant_id
    data.update(hosts_inline())
    return admin_client.post(f"/admin/accounts/agent/{agent.pk}/change/", data, follow=True)


# --- the secret ---------------------------------------------------------------------------


def test_a_generated_secret_is_in_standard_webhooks_form_and_new_each_time():
    first, second = agent_secret_generate(), agent_secret_generate()
    assert SECRET_FORM.match(first) and SECRET_FORM.match(second) and first != second


def test_an_agent_s_secret_is_stored_sealed_and_opens_to_what_was_set(tenant):
    agent = make_agent(tenant, "hook", "echo")
    agent_secret_set(agent=agent, secret="whsec_c2VjcmV0")
    stored = Agent.objects.get(pk=agent.pk).secret_sealed
    assert "whsec_c2VjcmV0" not in stored and sealing.unseal(stored) == "whsec_c2VjcmV0"


@pytest.mark.parametrize("bad", [" padded", "line\nbreak", "é-accented", "x" * 1001])
def test_a_secret_that_cannot_be_sent_in_a_header_is_refused(tenant, bad):
    agent = make_agent(tenant, "hook", "echo")
    with pytest.raises(AccountError):
        agent_secret_set(agent=agent, secret=bad)
    assert Agent.objects.get(pk=agent.pk).secret_sealed == ""


def test_the_admin_shows_a_generated_secret_once_and_never_again(admin_client, tenant):
    agent = make_agent(tenant, "hook", "echo")
    page = change_page(admin_client, agent, secret_action="generate").content.decode()
    shown = re.search(r"not shown again: (whsec_[A-Za-z0-9+/=]+)", page)
    assert shown is not None
    agent.refresh_from_db()
    assert sealing.unseal(agent.secret_sealed) == shown.group(1)
    again = admin_client.get(f"/admin/accounts/agent/{agent.pk}/change/").content.decode()
    assert shown.group(1) not in again and agent.secret_sealed not in again


def test_the_admin_sets_a_typed_secret_keeps_it_and_removes_it(admin_client, tenant):
    agent = make_agent(tenant, "hook", "echo")
    change_page(admin_client, agent, secret_action="set", new_secret="tok-123")
    agent.refresh_from_db()
    assert sealing.unseal(agent.secret_sealed) == "tok-123"
    change_page(admin_client, agent, description="renamed")  # keep: another change leaves it
    agent.refresh_from_db()
    assert agent.description == "renamed" and sealing.unseal(agent.secret_sealed) == "tok-123"
    change_page(admin_client, agent, secret_action="clear")
    agent.refresh_from_db()
    assert agent.secret_sealed == ""


def test_a_typed_secret_without_choosing_to_set_it_is_refused_not_dropped(tenant):
    agent = make_agent(tenant, "hook", "echo")
    form = form_for(agent, new_secret="tok-123")
    assert not form.is_valid() and "new_secret" in form.errors
    assert not form_for(agent, secret_action="set").is_valid()


def test_create_agent_generates_a_secret_and_prints_it_once(tenant):
    out = io.StringIO()
    call_command("create_agent", "acme", "hook", "--executor", "echo", "--generate-secret", "--json", stdout=out)
    secret = json.loads(out.getvalue())["secret"]
    assert SECRET_FORM.match(secret)
    assert sealing.unseal(Agent.objects.get(slug="hook").secret_sealed) == secret


def test_create_agent_reads_a_secret_from_stdin(tenant, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("tok-from-stdin\n"))
    call_command("create_agent", "acme", "hook", "--executor", "echo", "--secret-stdin", stdout=io.StringIO())
    assert sealing.unseal(Agent.objects.get(slug="hook").secret_sealed) == "tok-from-stdin"


# --- the card's content -------------------------------------------------------------------


def test_skills_modes_and_extensions_are_checked_when_the_agent_is_saved(tenant):
    agent = make_agent(tenant, "card", "echo")
    form = form_for(
        agent,
        skills=[{"id": "s", "tags": "not-a-list"}, "just text"],
        input_modes=["text plain"],
        extensions=[{"description": "no uri"}],
    )
    assert not form.is_valid()
    assert any("skills[0]['tags']" in p for p in form.errors["skills"])
    assert any("skills[1]" in p for p in form.errors["skills"])
    assert any("modes[0]" in p for p in form.errors["input_modes"])
    assert any("'uri' is a required property" in p for p in form.errors["extensions"])


def test_a_tenant_edits_every_part_of_its_card(client, tenant):
    agent = make_agent(tenant, "card", "echo")
    skills = [{"id": "s1", "name": "Summaries", "description": "Summarises", "tags": ["text"], "examples": ["hi"]}]
    form = form_for(
        agent,
        name="Card Agent",
        description="Reads cards.",
        skills=skills,
        input_modes=["text/plain", "application/json"],
        output_modes=["text/markdown"],
        icon_url="https://acme.example/icon.png",
        documentation_url="https://acme.example/docs",
        provider_organization="Acme Labs",
        provider_url="https://acme.example",
    )
    assert form.is_valid(), form.errors
    form.save()
    card = client.get("/agents/acme/card/.well-known/agent-card.json").json()
    assert card["name"] == "Card Agent" and card["description"].startswith("Reads cards.")
    assert card["skills"] == [{**skills[0]}]
    assert card["defaultInputModes"] == ["text/plain", "application/json"]
    assert card["defaultOutputModes"] == ["text/markdown"]
    assert card["iconUrl"] == "https://acme.example/icon.png"
    assert card["documentationUrl"] == "https://acme.example/docs"
    assert card["provider"] == {"organization": "Acme Labs", "url": "https://acme.example"}


def test_a_skill_stored_before_the_checks_that_is_not_an_object_is_left_off_the_card(client, tenant):
    agent = make_agent(tenant, "card", "echo")
    Agent.objects.filter(pk=agent.pk).update(skills=["just text", {"id": "kept", "name": "Kept"}])
    response = client.get("/agents/acme/card/.well-known/agent-card.json")
    assert response.status_code == 200 and [s["id"] for s in response.json()["skills"]] == ["kept"]


def test_create_agent_sets_the_card_s_content_and_refuses_a_bad_one_saying_where(tenant):
    skills = json.dumps([{"id": "s1", "name": "One", "tags": ["a"]}])
    call_command(
        "create_agent", "acme", "c", "--executor", "echo", "--skills", skills,
        "--output-modes", '["text/markdown"]', "--documentation-url", "https://acme.example/docs",
        stdout=io.StringIO(),
    )  # fmt: skip
    agent = Agent.objects.get(slug="c")
    assert agent.skills[0]["id"] == "s1" and agent.output_modes == ["text/markdown"]
    with pytest.raises(CommandError, match=r"skills: skills\[0\]: 'id' is a required property"):
        call_command("create_agent", "acme", "c", "--executor", "echo", "--skills", '[{"name": "x"}]')
    with pytest.raises(CommandError, match="icon_url"):
        call_command("create_agent", "acme", "c", "--executor", "echo", "--icon-url", "ftp://acme.example/i")
    assert Agent.objects.get(slug="c").skills[0]["id"] == "s1"


# --- what an executor sees and keeps ------------------------------------------------------


@pytest.fixture
def run(tenant, monkeypatch, store_path):
    """Run a throwaway executor on a fresh task (or a follow-up on `task`)."""
    from tasks_app import dispatch

    monkeypatch.setattr(dispatch, "enqueue_run", lambda **kw: None)
    name = f"test-{uuid.uuid4().hex[:8]}"
    calls = []

    class Probe(Executor):
        def execute(self, ctx):
            calls[-1](ctx)

    Probe.name = name
    REGISTRY[name] = Probe
    agent = make_agent(tenant, name, name)

    def go(execute, *, task=None, text="hello"):
        calls.append(execute)
        message = NewMessage(message_id=uuid.uuid4().hex, role="user", parts=[{"type": "text", "text": text}])
        if task is not None:
            message = NewMessage(message_id=message.message_id, role="user", parts=message.parts, task_id=str(task.pk))
        found, _ = services.message_receive(
            agent=agent,
            principal=Principal("alice", api_key_id=1),
            message=message,
            follow_up=contract.follow_up(Dialect.A2A_1_0),
        )
        outcome = runner.run(task_id=found.pk, run_token=str(found.run_token))
        found.refresh_from_db()
        return found, outcome

    go.agent = agent
    yield go
    REGISTRY.pop(name, None)


def test_an_executor_reads_its_agent_s_secret(run):
    agent_secret_set(agent=run.agent, secret="tok-123")
    seen = []
    run(lambda ctx: (seen.append(ctx.secret), ctx.complete("ok")))
    assert seen == ["tok-123"]


def test_a_secret_the_server_s_keys_cannot_open_fails_the_task_as_misconfigured(run, settings):
    agent_secret_set(agent=run.agent, secret="tok-123")
    settings.PUSH_CREDENTIALS_KEY = [Fernet.generate_key().decode()]  # the sealing key was replaced
    task, outcome = run(lambda ctx: ctx.complete(ctx.secret))
    assert outcome == "failed" and task.state == TaskState.FAILED and task.failure == "misconfigured"
    assert "cannot be decrypted" in task.status_changes.last().reason


def test_an_executor_that_says_it_is_misconfigured_fails_its_task_with_its_words(run):
    def missing(ctx):
        raise Misconfigured("no upstream url is set")

    task, _ = run(missing)
    assert task.failure == "misconfigured"
    assert task.status_changes.last().reason == "the agent is misconfigured: no upstream url is set"


def test_what_an_executor_keeps_on_a_task_is_there_at_its_next_run(run):
    def first(ctx):
        ctx.state["upstream"] = "t-1"
        ctx.save_state()
        ctx.require_input("more?")

    task, _ = run(first)
    assert task.state == TaskState.INPUT_REQUIRED and task.executor_state == {"upstream": "t-1"}
    seen = []
    run(lambda ctx: (seen.append(dict(ctx.state)), ctx.complete("ok")), task=task, text="more")
    assert seen == [{"upstream": "t-1"}]


def test_a_closed_task_s_state_is_not_written(run):
    kept = []

    def cancelled_midway(ctx):
        services.task_cancel(task_id=ctx.task_id, principal=Principal("alice", api_key_id=1), agent=run.agent)
        ctx.state["late"] = True
        with pytest.raises(TaskClosed):
            ctx.save_state()
        kept.append(True)

    task, _ = run(cancelled_midway)
    assert kept and task.state == TaskState.CANCELED and task.executor_state == {}


@pytest.mark.parametrize(
    "state, kept, told",
    [
        (TaskState.INPUT_REQUIRED, {"upstream": "t-1"}, True),
        (TaskState.SUBMITTED, {"upstream": "t-1"}, True),
        (TaskState.WORKING, {"upstream": "t-1"}, False),  # its run sees the cancel itself
        (TaskState.INPUT_REQUIRED, {}, False),
    ],
)
def test_a_cancel_reaches_an_idle_executor_that_kept_state_in_a_worker(
    run, monkeypatch, django_capture_on_commit_callbacks, state, kept, told
):
    task, _ = run(lambda ctx: ctx.require_input("more?"))
    Task.objects.filter(pk=task.pk).update(state=state, executor_state=kept)
    sent = []
    monkeypatch.setattr(dispatch, "enqueue_forward_cancel", lambda **kw: sent.append(kw["task_id"]))
    with django_capture_on_commit_callbacks(execute=True):
        services.task_cancel(task_id=str(task.pk), principal=Principal("alice", api_key_id=1), agent=run.agent)
    assert sent == ([task.pk] if told else [])


def test_an_idle_executor_hears_of_the_cancel_with_its_settings_secret_and_state(run):
    heard = []

    class Hears(REGISTRY[run.agent.executor]):
        def canceled_while_idle(self, *, task_id, context_id, settings, secret, state):
            heard.append((task_id, context_id, settings, secret, state))
            return "told"

    REGISTRY[run.agent.executor] = Hears
    agent_secret_set(agent=run.agent, secret="tok-123")
    task, _ = run(lambda ctx: ctx.require_input("more?"))
    Task.objects.filter(pk=task.pk).update(executor_state={"upstream": "t-1"})
    assert runner.forward_cancel(task_id=task.pk) == "not canceled"
    services.task_cancel(task_id=str(task.pk), principal=Principal("alice", api_key_id=1), agent=run.agent)
    assert runner.forward_cancel(task_id=task.pk) == "told"
    assert heard[-1] == (str(task.pk), task.context_id, run.agent.settings, "tok-123", {"upstream": "t-1"})
