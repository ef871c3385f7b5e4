"""The ceiling: a bare Django async view on daphne, no middleware, no database, no worker.

    cd bench && ../.venv/bin/daphne -b 127.0.0.1 -p 8012 bare:application

It answers `SendMessage` the way our server does (a JSON-RPC result holding a task: submitted
for `returnImmediately`, else completed with the echo's artifact) and `GetTask` with a
completed task, so `load.py` measures it exactly as it measures ours. What it costs per
request is what daphne, Django's ASGI handler, one `json.loads` and one `json.dumps` cost on
this machine: the floor under everything our stack adds (auth, limits, the store, the
queue hop). `run.py` starts it as the side `bare` and reports ours/bare.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="bench-bare-not-secret",
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=[],
    INSTALLED_APPS=[],
    DATABASES={},
    USE_TZ=True,
    LOGGING_CONFIG=None,
)
django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402
from django.http import HttpRequest, HttpResponse, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402

CARD = {
    "name": "bare",
    "description": "The benchmark's ceiling: no middleware, no database.",
    "version": "1.0.0",
    "supportedInterfaces": [{"url": "http://127.0.0.1/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
    "capabilities": {"streaming": False, "pushNotifications": False},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [],
}


def _task(message: dict, *, completed: bool) -> dict:
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    task_id, context_id = str(uuid.uuid4()), str(uuid.uuid4())
    user = {**message, "taskId": task_id, "contextId": context_id}
    task: dict = {"id": task_id, "contextId": context_id, "history": [user]}
    if completed:
        text = "".join(p.get("text", "") for p in message.get("parts", []) if isinstance(p, dict))
        task["status"] = {"state": "TASK_STATE_COMPLETED", "timestamp": now}
        task["artifacts"] = [{"artifactId": str(uuid.uuid4()), "name": "echo", "parts": [{"text": text}]}]
    else:
        task["status"] = {"state": "TASK_STATE_SUBMITTED", "timestamp": now}
    return task


@csrf_exempt
async def rpc(request: HttpRequest) -> HttpResponse:
    doc = json.loads(request.body)
    params = doc.get("params") or {}
    if doc.get("method") == "GetTask":
        task = {"id": params.get("id"), "contextId": "", "status": {"state": "TASK_STATE_COMPLETED"}}
        return JsonResponse({"jsonrpc": "2.0", "id": doc.get("id"), "result": task})
    immediate = bool((params.get("configuration") or {}).get("returnImmediately"))
    task = _task(params.get("message") or {}, completed=not immediate)
    return JsonResponse({"jsonrpc": "2.0", "id": doc.get("id"), "result": {"task": task}})


async def card(request: HttpRequest) -> HttpResponse:
    return JsonResponse(CARD)


urlpatterns = [
    path(".well-known/agent-card.json", card),
    path("", rpc),
]

application = get_asgi_application()
