"""`seed_demo` makes the demo tenant ready to call, as often as it is run."""

import json

from django.core.management import call_command

from registry.models import Agent, ApiKey


def test_seed_demo_is_idempotent_and_prints_paths_and_a_fresh_key(db, capsys, rpc):
    call_command("seed_demo", "--json")
    first = json.loads(capsys.readouterr().out)
    call_command("seed_demo", "--json")
    second = json.loads(capsys.readouterr().out)
    assert first["agents"] == second["agents"] == {
        "echo": "/agents/demo/echo/", "conformance": "/agents/demo/conformance/", "writer": "/agents/demo/writer/",
    }
    assert first["api_key"] != second["api_key"] and second["api_key_header"] == "X-API-Key"
    assert Agent.objects.filter(tenant__slug="demo").count() == 3
    assert ApiKey.objects.count() == 2
    public = dict(Agent.objects.values_list("slug", "is_public"))
    assert public == {"echo": False, "conformance": True, "writer": False}
    assert rpc("/agents/demo/echo/", "ListTasks", {}, key=second["api_key"]).status == 200
