"""`seed_demo` makes the demo tenant ready to call, as often as it is run, and, in the same
process, does what `make run` does next: the directory's approvals and the conformance agent's
host names."""

import io
import json
import stat

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from accounts.models import Agent, AgentHost, ApiKey
from registry.models import Entry, State


def test_seed_demo_is_idempotent_and_prints_paths_and_a_fresh_key_revoking_the_one_before(db, capsys, rpc):
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
    assert rpc("/agents/demo/echo/", "ListTasks", {}, key=first["api_key"]).status == 401
    assert ApiKey.objects.filter(revoked_at__isnull=True).count() == 1


def _seeded(*options) -> dict:
    out = io.StringIO()
    call_command("seed_demo", "--json", *options, stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())


def test_with_a_key_file_every_run_uses_the_same_key_and_no_other_works(db, tmp_path, rpc):
    kept = tmp_path / "run" / "demo-key"
    first = _seeded("--key-file", str(kept))
    assert kept.read_text() == first["api_key"] + "\n" and stat.S_IMODE(kept.stat().st_mode) == 0o600
    again = _seeded("--key-file", str(kept))
    assert again["api_key"] == first["api_key"]
    assert ApiKey.objects.filter(tenant__slug="demo").count() == 1
    assert rpc("/agents/demo/echo/", "ListTasks", {}, key=first["api_key"]).status == 200


def test_a_kept_key_that_no_longer_works_is_replaced_and_the_file_rewritten(db, tmp_path, rpc):
    kept = tmp_path / "demo-key"
    first = _seeded("--key-file", str(kept))
    call_command("revoke_api_key", first["api_key"], stdout=io.StringIO())
    second = _seeded("--key-file", str(kept))
    assert second["api_key"] != first["api_key"] and kept.read_text().strip() == second["api_key"]
    assert rpc("/agents/demo/echo/", "ListTasks", {}, key=second["api_key"]).status == 200
    kept.write_text("ask_000000000000_not-a-key-this-server-made\n")
    third = _seeded("--key-file", str(kept))
    assert third["api_key"] not in (first["api_key"], second["api_key"])
    assert ApiKey.objects.filter(revoked_at__isnull=True).count() == 1


def test_the_admin_file_makes_a_superuser_once_and_keeps_its_password(db, tmp_path, client):
    kept = tmp_path / "admin-password"
    first = _seeded("--admin-file", str(kept))["admin"]
    assert first["username"] == "admin" and len(first["password"]) >= 16
    assert kept.read_text().strip() == first["password"] and stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert _seeded("--admin-file", str(kept))["admin"] == first
    assert User.objects.filter(is_superuser=True).count() == 1
    assert client.login(username="admin", password=first["password"])


def test_a_superuser_whose_password_was_changed_is_left_alone_and_its_password_not_shown(db, tmp_path, client):
    kept = tmp_path / "admin-password"
    _seeded("--admin-file", str(kept))
    admin = User.objects.get(username="admin")
    admin.set_password("the-owner-s-own-choice")
    admin.save()
    assert _seeded("--admin-file", str(kept))["admin"] == {"username": "admin", "password": None}
    kept.unlink()  # `make clean` empties the run directory: nothing is reset either
    assert _seeded("--admin-file", str(kept))["admin"]["password"] is None and not kept.exists()
    assert client.login(username="admin", password="the-owner-s-own-choice")


def test_without_the_admin_file_no_user_is_made(db):
    assert "admin" not in _seeded()
    assert not User.objects.exists()


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
