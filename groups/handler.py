"""The AIP `group` method (seed 7.3 (1)): a Leader invites this agent into its group.

Read the invitation, check the broker's address with the SSRF guard, connect to that address,
find the Leader's exchange, declare and bind the member's queue, record the membership, and
answer the connection's details. The group runner (`manage.py aip_groups`) then consumes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from django.conf import settings

from outbound import ssrf
from protocols.exchange import Call
from tasks_app import dbcalls
from tasks_app.errors import InvalidParams

from . import amqp, credentials, services
from .errors import AccessTokenInvalid, GroupConnectionFailed, GroupNotSupported
from .identity import member_aic
from .invitation import parse

log = logging.getLogger(__name__)


# What a Leader hears of a broker that was not joined, whatever the reason (the log has it).
NOT_JOINED = "the broker was not joined: its address is not allowed, does not resolve, or did not answer"


async def _not_joined(invitation: Any, began: float) -> GroupConnectionFailed:
    """One answer, at one moment, for every broker not joined: a refused address, a name that
    does not resolve, a closed port, a port that never answers and one that answers something
    other than AMQP would otherwise tell apart what is behind an address (a private network's
    names, a public host's open ports) to whoever sends invitations."""
    await asyncio.sleep(max(0.0, began + settings.AIP_GROUP_FAILED_JOIN_AFTER - time.monotonic()))
    return GroupConnectionFailed(host=invitation.host, port=invitation.port, reason=NOT_JOINED)


def process_id(membership_pk: int) -> str:
    """The member's id in the answer's `processId`: the membership, which the runner serves
    (whichever process that is at the moment)."""
    return f"agentserver-group-member-{membership_pk}"


async def group(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    if not settings.AIP_GROUPS_ENABLED:
        raise GroupNotSupported("Group communication is not supported: group mode is off on this server")
    if not call.agent.is_active:
        raise GroupNotSupported("Group communication is not supported: the agent is not active")
    invitation = parse(params)
    binding = await dbcalls.run(credentials.binding_of, call.agent, call.principal)
    # Refused before the broker's name is even resolved; membership_begin counts again, locked.
    await dbcalls.run(
        services.membership_cap_check,
        agent=call.agent,
        owner=call.principal.name,
        group_id=invitation.group_id,
        binding=binding,
    )
    began = time.monotonic()
    try:
        address = await asyncio.to_thread(ssrf.check_host, invitation.host, invitation.port)  # DNS: off the loop
    except (ssrf.Refused, ssrf.Unresolved) as exc:
        log.info(
            "group %s: broker %s:%s not allowed: %s", invitation.group_id, invitation.host, invitation.port, exc.detail
        )
        raise await _not_joined(invitation, began) from None

    member = await dbcalls.run(member_aic, call.agent)
    owner = call.principal.name
    queue = amqp.queue_name(
        leader_aic=invitation.leader_aic, group_id=invitation.group_id, member_aic=member, owner=owner
    )
    name = amqp.connection_name(member_aic=member, group_id=invitation.group_id)
    username = amqp.login(invitation.username, member)
    membership = await dbcalls.run(
        services.membership_begin,
        agent=call.agent,
        owner=owner,
        invitation=invitation,
        address=str(address),
        member_aic=member,
        username=username,
        queue=queue,
        connection_name=name,
        binding=binding,
    )
    target = amqp.Target(
        address=str(address),
        port=invitation.port,
        vhost=invitation.vhost,
        username=username,
        password=invitation.access_token,
        exchange=invitation.exchange,
        routing_key=invitation.routing_key,
        queue=queue,
        connection_name=name,
    )
    try:
        joined = await amqp.join(target)
    except amqp.ExchangeMissing as exc:
        await dbcalls.run(services.membership_fail, membership_pk=membership.pk, reason=str(exc))
        raise InvalidParams(f"amqp.exchange: {exc} (the Leader creates it before it invites)") from None
    except amqp.TokenRefused as exc:
        await dbcalls.run(services.membership_fail, membership_pk=membership.pk, reason=str(exc))
        raise AccessTokenInvalid(
            f"server.accessToken was refused by the broker at {invitation.host}:{invitation.port}: {exc}",
            data={"host": invitation.host, "port": invitation.port},
        ) from None
    except amqp.JoinFailed as exc:
        log.info("group %s: %s could not join %s:%s: %s", invitation.group_id, member, address, invitation.port, exc)
        await dbcalls.run(services.membership_fail, membership_pk=membership.pk, reason=str(exc))
        raise await _not_joined(invitation, began) from None
    except BaseException:
        # Cancelled (the Leader hung up) or a bug: the membership must not stay "joining".
        await asyncio.shield(dbcalls.run(services.membership_fail, membership_pk=membership.pk, reason="not joined"))
        raise
    await dbcalls.run(services.membership_activate, membership_pk=membership.pk, node_name=joined.node_name)
    log.info("group %s: %s joined (queue %s)", invitation.group_id, member, queue)
    return {
        "connectionName": name,
        "vhost": invitation.vhost,
        "nodeName": joined.node_name,
        "queueName": queue,
        "processId": process_id(membership.pk),
    }
