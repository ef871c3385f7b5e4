"""The embedded mode (SQLite, agents run in-process) serves the same requests end to end.

It runs in a subprocess: the suite's own settings are Postgres', and the embedded mode is
chosen at settings time. On SQLite the store takes its ORM path (tasks_app.sql is Postgres only).
"""

from tests.conftest import run_embedded

SCRIPT = r"""
import json, sys, uuid
import django
django.setup()
from django.core.management import call_command
from django.test import Client

call_command("migrate", verbosity=0)
call_command("seed_demo")
from accounts.models import Tenant
from accounts.services import api_key_create
key = api_key_create(tenant=Tenant.objects.get(slug="demo"), name="t", principal="t")[1]
client = Client()

def rpc(method, params):
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    r = client.post("/agents/demo/echo/", data=json.dumps(body), content_type="application/json",
                    headers={"A2A-Version": "1.0", "X-API-Key": key})
    return r.json()

message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hi"}]}
sent = rpc("SendMessage", {"message": message})["result"]["task"]
fetched = rpc("GetTask", {"id": sent["id"]})["result"]
print(json.dumps({"sent": sent, "fetched": fetched}))
"""


def test_the_embedded_mode_answers_a_blocking_send_message_and_get_task(tmp_path):
    result = run_embedded(SCRIPT, tmp_path)
    sent, fetched = result["sent"], result["fetched"]
    assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
    assert sent["artifacts"][0]["parts"] == [{"text": "echo: hi"}]
    assert fetched["id"] == sent["id"] and fetched["artifacts"] == sent["artifacts"]
    assert [m["role"] for m in fetched["history"]] == ["ROLE_USER"]


REGISTRY_SCRIPT = r"""
import json
import django
django.setup()
from django.core.management import call_command
from django.test import Client

call_command("migrate", verbosity=0)
call_command("seed_demo")
call_command("approve_entries", "demo")
client = Client()
api = client.get("/api/registry/agents/", {"q": "echo", "binding": "JSONRPC"})
page = client.get("/registry/", {"q": "echo"})
print(json.dumps({"api": api.status_code, "names": [e["name"] for e in api.json()["results"]],
                  "page": page.status_code, "page_has_echo": "echo" in page.content.decode().lower()}))
"""


def test_the_embedded_mode_lists_and_searches_the_directory_without_postgres(tmp_path):
    # SQLite has no full-text search: words are matched with LIKE, filters the same way.
    result = run_embedded(REGISTRY_SCRIPT, tmp_path)
    assert result["api"] == 200 and "Echo" in result["names"]
    assert result["page"] == 200 and result["page_has_echo"]
