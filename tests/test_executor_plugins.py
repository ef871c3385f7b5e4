"""Executors from installed distributions (entry point group `agentserver.executors`): tiny
distributions are built here as real `.dist-info` directories on a path Python searches, the
way `pip install` leaves them, so importlib.metadata finds them as it would any package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tasks_app.executors import REGISTRY, plugins
from tasks_app.executors.extensions import EXTENSIONS
from tests.conftest import ROOT, make_agent

ACME = """
from tasks_app.executors import AgentContext, Executor
from tasks_app.executors.extensions import ServerExtension


class Shouter(Executor):
    name = "shouter"
    description = "Answers in capitals."
    settings_schema = {"type": "object", "properties": {"volume": {"enum": ["loud", "louder"]}}}

    def execute(self, ctx: AgentContext) -> None:
        ctx.complete(artifact=ctx.text.upper(), name="shout")


class FakeEcho(Executor):
    name = "echo"

    def execute(self, ctx: AgentContext) -> None:
        ctx.complete(artifact="not the real echo")


class Sparkle(ServerExtension):
    uri = "https://acme.example/ext/sparkle/v1"

    def artifact_metadata(self, metadata, use):
        return {**metadata, "sparkle": use.params.get("level", 1)}


def helper():
    return None
"""


def distribution(
    site: Path,
    name: str,
    module: str,
    source: str,
    entry_points: dict[str, str],
    extensions: dict[str, str] | None = None,
) -> None:
    (site / module).mkdir()
    (site / module / "__init__.py").write_text(textwrap.dedent(source))
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    more = "".join(f"{key} = {value}\n" for key, value in (extensions or {}).items())
    (info / "entry_points.txt").write_text(f"[{plugins.GROUP}]\n{lines}[{plugins.EXTENSION_GROUP}]\n{more}")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """Three installed distributions: one good, one whose import fails, one with mistakes."""
    distribution(
        tmp_path,
        "acme-agents",
        "acme_agents",
        ACME,
        {"shouter": "acme_agents:Shouter"},
        {"sparkle": "acme_agents:Sparkle", "not-one": "acme_agents:helper"},
    )
    distribution(
        tmp_path,
        "broken-agents",
        "broken_agents",
        "raise ImportError('needs libfrobnicate')\n",
        {"frob": "broken_agents:Frob"},
    )
    distribution(
        tmp_path,
        "sloppy-agents",
        "sloppy_agents",
        "from acme_agents import FakeEcho, Shouter, helper\n",
        {"helper": "sloppy_agents:helper", "echo": "sloppy_agents:FakeEcho", "loud": "sloppy_agents:Shouter"},
    )
    return tmp_path


@pytest.fixture
def installed(site: Path, monkeypatch):
    """The distributions on sys.path and loaded as a starting process would; the registry as
    it was afterwards."""
    import importlib

    registry, loaded, broken = dict(REGISTRY), list(plugins.LOADED), list(plugins.BROKEN)
    extensions = dict(EXTENSIONS), list(plugins.EXTENSIONS_LOADED), list(plugins.EXTENSIONS_BROKEN)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    plugins.load_all()
    yield site
    REGISTRY.clear()
    REGISTRY.update(registry)
    plugins.LOADED[:], plugins.BROKEN[:] = loaded, broken
    EXTENSIONS.clear()
    EXTENSIONS.update(extensions[0])
    plugins.EXTENSIONS_LOADED[:], plugins.EXTENSIONS_BROKEN[:] = extensions[1], extensions[2]
    for module in ("acme_agents", "broken_agents", "sloppy_agents"):
        sys.modules.pop(module, None)


def test_the_built_in_executors_come_through_the_same_entry_points():
    assert {item.name: item.source for item in plugins.LOADED} == {
        "echo": plugins.BUILT_IN_SOURCE,
        "conformance": plugins.BUILT_IN_SOURCE,
        "writer": plugins.BUILT_IN_SOURCE,
        "a2a-upstream": plugins.BUILT_IN_SOURCE,
        "webhook": plugins.BUILT_IN_SOURCE,
    }
    assert set(REGISTRY) >= {"echo", "conformance", "writer", "a2a-upstream", "webhook"}


def test_an_installed_distribution_adds_its_executor(installed):
    assert REGISTRY["shouter"].__module__ == "acme_agents"
    assert plugins.Loaded("shouter", "acme-agents 1.0", "acme_agents:Shouter") in plugins.LOADED


def test_a_broken_plugin_is_reported_with_the_reason_and_the_others_still_load(installed):
    why = {item.name: item.error for item in plugins.BROKEN}
    assert why["frob"] == "ImportError: needs libfrobnicate"
    assert "not a subclass of tasks_app.executors.Executor" in why["helper"]
    assert "taken by tasks_app.executors.echo:EchoExecutor" in why["echo"]
    assert "called 'loud' but the executor's name is 'shouter'" in why["loud"]
    assert REGISTRY["echo"].__module__ == "tasks_app.executors.echo"  # not replaced
    assert {"shouter", "echo", "conformance", "writer"} <= set(REGISTRY)


@pytest.mark.django_db(transaction=True)
def test_an_agent_runs_on_an_installed_executor_its_tenant_was_granted(installed, rpc, tenant, alice_key):
    from accounts.agent_services import agent_save, tenant_executors_set

    tenant_executors_set(tenant=tenant, executors=["shouter"])  # an installed executor is granted per tenant
    agent = agent_save(tenant=tenant, slug="loud", values={"executor": "shouter"})
    task = rpc.send(agent.path, "quiet please", key=alice_key).result["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "QUIET PLEASE"}]


@pytest.mark.django_db(transaction=True)
def test_an_installed_server_extension_works_for_agents_that_declare_it(installed, rpc, tenant, alice_key):
    uri = "https://acme.example/ext/sparkle/v1"
    assert EXTENSIONS[uri].__module__ == "acme_agents"
    assert (
        "not a subclass of tasks_app.executors.extensions.ServerExtension"
        in {item.name: item.error for item in plugins.EXTENSIONS_BROKEN}["not-one"]
    )
    agent = make_agent(tenant, "sparkly", "echo", extensions=[{"uri": uri, "params": {"level": 3}}])
    params = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    task = rpc(agent.path, "SendMessage", params, key=alice_key, headers={"A2A-Extensions": uri}).result["task"]
    assert task["artifacts"][0]["metadata"] == {"sparkle": 3}
    plain = rpc(agent.path, "SendMessage", {"message": {**params["message"], "messageId": "m2"}}, key=alice_key)
    assert "metadata" not in plain.result["task"]["artifacts"][0]


@pytest.mark.django_db
def test_the_admin_overview_lists_the_executors_and_why_a_plugin_was_not_loaded(installed, admin_client):
    page = admin_client.get("/admin/tasks_app/task/overview/").content.decode()
    assert "Executors" in page and "acme-agents 1.0" in page and "acme_agents:Shouter" in page
    assert "Not loaded" in page and "ImportError: needs libfrobnicate" in page
    assert "Server extensions" in page and "acme_agents:Sparkle" in page and "tasks_app.executors.timestamp" in page


@pytest.mark.django_db
def test_a_tenant_member_s_overview_lists_the_executors_but_not_why_plugins_failed_to_load(installed, tenant):
    from tests.test_admin_detail import browser_for

    for role in ("owner", "viewer"):
        page = browser_for(f"member-{role}", tenant=tenant, role=role).get("/admin/tasks_app/task/overview/")
        html = page.content.decode()
        assert page.status_code == 200 and "Executors" in html and "acme_agents:Shouter" in html, role
        assert "Not loaded" not in html and "libfrobnicate" not in html and "not loaded:" not in html, role


def test_a_starting_process_loads_installed_plugins_and_logs_the_broken_ones(site):
    # A process of its own (as a web or worker process starts): nothing of this test's
    # imports, only what is installed on its path.
    script = (
        "import json, django; django.setup()\n"
        "from tasks_app.executors import REGISTRY, plugins\n"
        "print(json.dumps({'names': sorted(REGISTRY), 'broken': sorted(b.name for b in plugins.BROKEN)}))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "DJANGO_SETTINGS_MODULE": "agentserver.settings"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["names"] == ["a2a-upstream", "conformance", "echo", "shouter", "webhook", "writer"]
    assert result["broken"] == ["echo", "frob", "helper", "loud"]
    assert "executor plugin 'frob' from broken-agents 1.0 not loaded: ImportError: needs libfrobnicate" in done.stderr


def test_an_installed_executor_s_settings_are_checked_against_its_own_schema(installed):
    from accounts import agent_kinds

    assert agent_kinds.settings_problems("shouter", {"volume": "louder"}) == []
    [problem] = agent_kinds.settings_problems("shouter", {"volume": "soft"})
    assert problem.startswith("settings['volume']: 'soft' is not one of")
