"""Two tenants as the tenant API's tests see them (tests/test_tenant_api*.py, the isolation and
hostile tests): tenant A ("ta") with a management key of each role and one without, members of
each role, an agent, a task with a push config and a dead delivery; tenant B ("tb") with the same
objects under the same names, and an owner's key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.conftest import make_agent, user_message

HOOK = "https://push.example/hook"
API = "/api/v1/tenants"


@dataclass
class Side:
    slug: str
    keys: dict[str, str]  # role ("" for none) -> plaintext
    task_id: str
    config_pk: int
    delivery_pk: int
    key_prefix: str  # the prefix of its "spare" key (not used to call)
    objects: dict[str, Any] = field(default_factory=dict)


@dataclass
class World:
    a: Side
    b: Side


def headers(key: str | None) -> dict[str, str]:
    return {"X-API-Key": key} if key else {}


def api(client, method: str, path: str, key: str | None = None, body: Any = None, **extra: Any):
    """One call of the tenant API: (status, JSON body or None)."""
    data = orjson.dumps(body) if body is not None and not isinstance(body, bytes) else body
    response = getattr(client, method.lower())(
        path, data=data, content_type="application/json", headers={**headers(key), **extra}
    )
    content = response.content
    return response.status_code, (orjson.loads(content) if content else None)


def _side(client, slug: str, name: str, users: dict[str, Any]) -> Side:
    from accounts.services import api_key_create, member_add, oidc_issuer_set, tenant_ensure
    from push.models import DeliveryState, PushConfig, PushDelivery
    from tasks_app.models import TaskEvent

    tenant = tenant_ensure(slug=slug, name=name)
    make_agent(tenant, "echo", "echo")
    oidc_issuer_set(
        tenant=tenant, issuer=f"https://id.example/{slug}", audience="agentserver", jwks_url="https://id.example/jwks"
    )
    for role, user in users.items():
        member_add(tenant=tenant, user=user, role=role)
    keys = {
        role: api_key_create(tenant=tenant, name=f"{role or 'plain'}-key", management_role=role)[1]
        for role in ("owner", "operator", "viewer", "")
    }
    spare, _ = api_key_create(tenant=tenant, name="spare", principal="spare-bot")
    caller = {"X-API-Key": keys[""], "A2A-Version": "1.0"}
    send = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": user_message(f"private text of {slug}"), "configuration": {"returnImmediately": True}},
    }
    response = client.post(
        f"/agents/{slug}/echo/", data=orjson.dumps(send), content_type="application/json", headers=caller
    )
    task_id = orjson.loads(response.content)["result"]["task"]["id"]
    create = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "CreateTaskPushNotificationConfig",
        "params": {
            "taskId": task_id,
            "id": "cfg",
            "url": HOOK,
            "token": f"token-of-{slug}",
            "authentication": {"scheme": "Bearer", "credentials": f"credentials-of-{slug}"},
        },
    }
    response = client.post(
        f"/agents/{slug}/echo/", data=orjson.dumps(create), content_type="application/json", headers=caller
    )
    assert response.status_code == 200, response.content
    config = PushConfig.objects.get(task_id=task_id, config_id="cfg")
    # The delivery of the task's first event died; the config's cursor is still before it.
    PushConfig.objects.filter(pk=config.pk).update(delivered_seq=0)
    event = TaskEvent.objects.filter(task_id=task_id).order_by("seq").first()
    delivery = PushDelivery.objects.create(
        config=config, event=event, seq=event.seq, state=DeliveryState.DEAD, attempts=4, last_error="refused"
    )
    return Side(slug, keys, task_id, config.pk, delivery.pk, spare.prefix, {"tenant": tenant})


def build(client, django_user_model) -> World:
    users = {
        name: django_user_model.objects.create_user(name, f"{name}@example.test", "pw")
        for name in ("alice", "olive", "vera", "bob")
    }
    a = _side(client, "ta", "Tenant A", {"owner": users["alice"], "operator": users["olive"], "viewer": users["vera"]})
    b = _side(client, "tb", "Tenant B", {"owner": users["bob"]})
    return World(a, b)


def routes(side: Side) -> list[tuple[str, str, str, Any]]:
    """Every route of the tenant API with its methods, for `side`'s objects: (method, path,
    least role, body). Writes come last, reads first, destructive ones at the very end."""
    t = f"{API}/{side.slug}"
    return [
        ("GET", f"{t}/", "viewer", None),
        ("GET", f"{t}/members/", "viewer", None),
        ("GET", f"{t}/members/vera/", "viewer", None),
        ("GET", f"{t}/keys/", "viewer", None),
        ("GET", f"{t}/keys/{side.key_prefix}/", "viewer", None),
        ("GET", f"{t}/issuer/", "viewer", None),
        ("GET", f"{t}/agents/", "viewer", None),
        ("GET", f"{t}/agents/echo/", "viewer", None),
        ("GET", f"{t}/tasks/", "viewer", None),
        ("GET", f"{t}/tasks/{side.task_id}/", "viewer", None),
        ("GET", f"{t}/push-configs/", "viewer", None),
        ("GET", f"{t}/push-configs/{side.config_pk}/", "viewer", None),
        ("GET", f"{t}/deliveries/", "viewer", None),
        ("GET", f"{t}/deliveries/{side.delivery_pk}/", "viewer", None),
        ("PATCH", f"{t}/", "owner", {"name": "Renamed"}),
        ("POST", f"{t}/members/", "owner", {"username": "bob", "role": "viewer"}),
        ("PATCH", f"{t}/members/vera/", "owner", {"role": "operator"}),
        ("POST", f"{t}/keys/", "owner", {"name": "made"}),
        (
            "PUT",
            f"{t}/issuer/",
            "owner",
            {"issuer": "https://id.example", "audience": "a", "jwks_url": "https://id.example/jwks"},
        ),
        ("POST", f"{t}/agents/", "owner", {"slug": "made", "name": "Made", "executor": "echo"}),
        ("PATCH", f"{t}/agents/echo/", "owner", {"description": "changed"}),
        ("POST", f"{t}/tasks/{side.task_id}/cancel/", "operator", {}),
        ("POST", f"{t}/deliveries/{side.delivery_pk}/retry/", "operator", None),
        ("DELETE", f"{t}/push-configs/{side.config_pk}/", "operator", None),
        ("DELETE", f"{t}/members/vera/", "owner", None),
        ("DELETE", f"{t}/keys/{side.key_prefix}/", "owner", None),
        ("DELETE", f"{t}/agents/echo/", "owner", None),
        ("DELETE", f"{t}/issuer/", "owner", None),
    ]


ROUTE_COUNT = len(routes(Side("x", {}, "t", 0, 0, "p")))
