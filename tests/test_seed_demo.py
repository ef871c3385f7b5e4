"""`seed_demo` makes the demo tenant ready to call, as often as it is run."""

import json

from django.core.management import call_command

from accounts.models import Agent, ApiKey


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
