"""Two tenants as the tenant API's tests see them (tests/test_tenant_api*.py, the isolation and
hostile tests): tenant A ("ta") with a management key of each role and one without, members of
each role, an agent with a pending claim of a host name, a task whose run no worker claimed (its
message holds a file) with a push config and a dead delivery, an AIP group membership that took
the task, a pending invitation (of a name no user has); tenant B ("tb") with the same objects
under the same names (its own host name), and an owner's key."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.conftest import make_agent, user_message

HOOK = "https://push.example/hook"
API = "/api/v1/tenants"
FILE = b"notes, with a NUL \x00 and <b>markup</b>"


def host_of(slug: str) -> str:
    """The host name the side's agent claimed (each side its own)."""
    return f"{slug}.hosts.example.test"


@dataclass
class Side:
    slug: str
    keys: dict[str, str]  # role ("" for none) -> plaintext
    task_id: str
    config_pk: int
    delivery_pk: int
    key_prefix: str  # the prefix of its "spare" key (not used to call)
    objects: dict[str, Any] = field(default_factory=dict)
    message_pk: int = 0  # the task's user message, whose part 1 is a file
    membership_pk: int = 0
    invitation_pk: int = 0  # a pending invitation (of "invitee-<slug>", who has no account)


@dataclass
class World:
    a: Side
    b: Side


def headers(key: str | None) -> dict[str, str]:
    return {"X-API-Key": key} if key else {}


def api(client, method: str, path: str, key: str | None = None, body: Any = None, **extra: Any):
    """One call of the tenant API: (status, JSON body, the bytes of anything else, or None)."""
    data = orjson.dumps(body) if body is not None and not isinstance(body, bytes) else body
    response = getattr(client, method.lower())(
        path, data=data, content_type="application/json", headers={**headers(key), **extra}
    )
    content = response.content
    if not content:
        return response.status_code, None
    is_json = response.get("Content-Type", "").startswith("application/json")
    return response.status_code, (orjson.loads(content) if is_json else content)


def _side(client, slug: str, name: str, users: dict[str, Any]) -> Side:
    from accounts import sealing
    from accounts.host_services import host_claim
    from accounts.services import api_key_create, member_add, membership_invite, oidc_issuer_set, tenant_ensure
    from groups.models import Credential, GroupMembership, GroupTask, MembershipState
    from push.models import DeliveryState, PushConfig, PushDelivery
    from tasks_app.models import Message, TaskEvent

    tenant = tenant_ensure(slug=slug, name=name)
    agent = make_agent(tenant, "echo", "echo")
    host_claim(agent=agent, host=host_of(slug))
    oidc_issuer_set(
        tenant=tenant, issuer=f"https://id.example/{slug}", audience="agentserver", jwks_url="https://id.example/jwks"
    )
    for role, user in users.items():
        member_add(tenant=tenant, user=user, role=role)
    invitation, _ = membership_invite(tenant=tenant, username=f"invitee-{slug}", role="viewer")
    keys = {
        role: api_key_create(tenant=tenant, name=f"{role or 'plain'}-key", management_role=role)[1]
        for role in ("owner", "operator", "viewer", "")
    }
    spare, _ = api_key_create(tenant=tenant, name="spare", principal="spare-bot")
    caller = {"X-API-Key": keys[""], "A2A-Version": "1.0"}
    text = f"private text of {slug}"
    attached = {"raw": base64.b64encode(FILE).decode(), "mediaType": "text/plain", "filename": f"{slug}-notes.txt"}
    message = user_message(text, parts=[{"text": text}, attached])
    send = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, "configuration": {"returnImmediately": True}},
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
    membership = GroupMembership.objects.create(
        agent=agent,
        owner="spare-bot",
        group_id=f"group-of-{slug}",
        leader_aic=f"aic:leader-of-{slug}",
        member_aic=f"aic:echo-of-{slug}",
        protocol="rabbitmq:4.0",
        partners=[f"aic:partner-of-{slug}"],
        host="broker.example.test",
        address="192.0.2.10",
        port=5671,
        vhost="/",
        username=f"member-{slug}",
        access_token_sealed=sealing.seal(f"leader-token-of-{slug}"),
        exchange="group",
        queue=f"echo-{slug}",
        connection_name=f"echo-{slug}",
        state=MembershipState.ACTIVE,
        credential=Credential.KEY,
        api_key=spare,
    )
    GroupTask.objects.create(membership=membership, task_id=task_id, published_seq=1)
    message_pk = Message.objects.get(task_id=task_id, message_id=message["messageId"]).pk
    return Side(
        slug,
        keys,
        task_id,
        config.pk,
        delivery.pk,
        spare.prefix,
        {"tenant": tenant},
        message_pk=message_pk,
        membership_pk=membership.pk,
        invitation_pk=invitation.pk,
    )


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
    host = host_of(side.slug)
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
        ("GET", f"{t}/tasks/{side.task_id}/files/message/{side.message_pk}/1/", "viewer", None),
        ("GET", f"{t}/agents/echo/hosts/", "viewer", None),
        ("GET", f"{t}/agents/echo/hosts/{host}/", "viewer", None),
        ("GET", f"{t}/group-memberships/", "viewer", None),
        ("GET", f"{t}/group-memberships/{side.membership_pk}/", "viewer", None),
        ("GET", f"{t}/invitations/", "owner", None),
        ("GET", f"{t}/invitations/{side.invitation_pk}/", "owner", None),
        ("PATCH", f"{t}/", "owner", {"name": "Renamed"}),
        ("POST", f"{t}/members/", "owner", {"username": "bob", "role": "viewer"}),
        ("PATCH", f"{t}/members/vera/", "owner", {"role": "operator"}),
        ("POST", f"{t}/keys/", "owner", {"name": "made"}),
        ("POST", f"{t}/keys/revoke/", "owner", {"made_by": "key:0123456789ab"}),  # a maker of no key
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
        ("POST", f"{t}/tasks/{side.task_id}/redispatch/", "operator", {}),
        ("POST", f"{t}/agents/echo/hosts/", "owner", {"host": "claimed.example.test", "card_version": "0.3"}),
        ("POST", f"{t}/agents/echo/hosts/{host}/verify/", "owner", {"method": "http"}),
        ("DELETE", f"{t}/push-configs/{side.config_pk}/", "operator", None),
        ("DELETE", f"{t}/members/vera/", "owner", None),
        ("DELETE", f"{t}/invitations/{side.invitation_pk}/", "owner", None),
        ("DELETE", f"{t}/keys/{side.key_prefix}/", "owner", None),
        ("DELETE", f"{t}/agents/echo/hosts/{host}/", "owner", None),
        ("DELETE", f"{t}/agents/echo/", "owner", None),
        ("DELETE", f"{t}/issuer/", "owner", None),
    ]


ROUTE_COUNT = len(routes(Side("x", {}, "t", 0, 0, "p")))
