"""A Leader's invitation (the AIP `group` method's params, seed 7.3 (1)), read and checked.

Pure: no I/O, no models. Every refusal is InvalidParams naming the field, so that nothing a
Leader sends is an internal error.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from accounts import storable
from accounts.storable import ID_LENGTH
from tasks_app.errors import InvalidParams

# AMQP 0-9-1 brokers: RabbitMQ 3.x and 4.x as the seed names them ("rabbitmq:4.0"; the ACS
# capability form "rabbitmq:3.*"), or the protocol itself.
_PROTOCOL = re.compile(r"rabbitmq:[34](\.(\d+|\*))*|amqp:0[-.]9[-.]1", re.IGNORECASE)
_HOST_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
AMQP_NAME_BYTES = 255  # an AMQP short string: exchange, queue, routing key, vhost, user
# What AMQP 0-9-1 allows in exchange and queue names (the spec's `exchange-name` domain) and
# how long they and a vhost may be, as pamqp, aio-pika's codec, enforces them.
AMQP_NAME = re.compile(r"[a-zA-Z0-9\-_.:@#,/ ]*")
AMQP_NAME_LENGTH = 127
TOKEN_LENGTH = 16384  # a JWT with generous claims
MAX_PARTNERS = 1000
DEFAULT_PORT = 5672
DEFAULT_VHOST = "/"


@dataclass(frozen=True)
class Invitation:
    protocol: str
    group_id: str
    leader_aic: str
    partners: list[str]  # the partners' AICs, as invited
    host: str  # as the Leader wrote it (an IPv6 literal without brackets)
    port: int
    vhost: str
    access_token: str
    username: str  # "" when the Leader sent none (groups.amqp.login decides)
    exchange: str
    exchange_type: str
    routing_key: str

    def __repr__(self) -> str:  # never the token, in a log or a traceback
        return f"Invitation(group_id={self.group_id!r}, leader={self.leader_aic!r}, host={self.host!r}:{self.port})"


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidParams(f"{where} must be an object, not {storable.brief(value)}")
    return value


def _text(value: Any, where: str, *, max_length: int, required: bool = True, amqp: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise InvalidParams(f"{where} must be a string, not {storable.brief(value)}")
    if required and not value.strip():
        raise InvalidParams(f"{where} must not be empty")
    try:
        storable.check_text(value, where=where, max_length=max_length)
    except storable.Refused as exc:
        raise InvalidParams(str(exc)) from None
    if amqp and len(value.encode()) > AMQP_NAME_BYTES:
        raise InvalidParams(f"{where} is longer than {AMQP_NAME_BYTES} bytes (an AMQP short string)")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise InvalidParams(f"{where} must not contain control characters")
    return value


def _host(value: Any) -> str:
    host = _text(value, "server.host", max_length=255)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # an IPv6 literal as a URL writes it
    try:
        return str(ipaddress.ip_address(host)) if ":" in host else _name_or_v4(host)
    except ValueError:
        raise InvalidParams(f"server.host must be a host name or an IP address, not {storable.brief(value)}") from None


def _name_or_v4(host: str) -> str:
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    try:
        ascii_host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        raise ValueError(host) from None
    labels = ascii_host.rstrip(".").split(".")
    if len(ascii_host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise ValueError(host)
    return ascii_host


def _port(value: Any) -> int:
    if value is None:
        return DEFAULT_PORT
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise InvalidParams(f"server.port must be an integer from 1 to 65535, not {storable.brief(value)}")
    return value


def _partners(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidParams(f"group.partners must be a list, not {storable.brief(value)}")
    if len(value) > MAX_PARTNERS:
        raise InvalidParams(f"group.partners has more than {MAX_PARTNERS} members")
    return [
        _text(_object(partner, f"group.partners[{i}]").get("aic"), f"group.partners[{i}].aic", max_length=ID_LENGTH)
        for i, partner in enumerate(value)
    ]


def parse(params: Any) -> Invitation:
    """The invitation in `params`, or InvalidParams naming the first field that is wrong."""
    params = _object(params, "params")
    protocol = _text(params.get("protocol"), "protocol", max_length=64)
    if not _PROTOCOL.fullmatch(protocol):
        raise InvalidParams(
            f"protocol {storable.brief(protocol)} is not supported: this agent joins AMQP 0-9-1 groups "
            "(rabbitmq:3.*, rabbitmq:4.*)"
        )
    group = _object(params.get("group"), "group")
    group_id = _text(group.get("groupId"), "group.groupId", max_length=ID_LENGTH)
    leader = _object(group.get("leader"), "group.leader")
    leader_aic = _text(leader.get("aic"), "group.leader.aic", max_length=ID_LENGTH)
    partners = _partners(group.get("partners"))
    server = _object(params.get("server"), "server")
    host = _host(server.get("host"))
    port = _port(server.get("port"))
    vhost = _text(server.get("vhost", DEFAULT_VHOST), "server.vhost", max_length=AMQP_NAME_LENGTH, amqp=True)
    token = _text(server.get("accessToken"), "server.accessToken", max_length=TOKEN_LENGTH)
    username = _text(server.get("username"), "server.username", max_length=AMQP_NAME_BYTES, required=False, amqp=True)
    amqp = _object(params.get("amqp"), "amqp")
    exchange = _text(amqp.get("exchange"), "amqp.exchange", max_length=AMQP_NAME_LENGTH)
    if not AMQP_NAME.fullmatch(exchange):
        raise InvalidParams(
            f"amqp.exchange {storable.brief(exchange)} is not an AMQP exchange name: "
            "letters, digits and - _ . : @ # , / and space only"
        )
    exchange_type = _text(amqp.get("exchangeType", "fanout"), "amqp.exchangeType", max_length=32)
    if exchange_type != "fanout":
        raise InvalidParams(f"amqp.exchangeType must be 'fanout' (the seed's group exchange), not {exchange_type!r}")
    routing_key = _text(
        amqp.get("routingKey", ""), "amqp.routingKey", max_length=AMQP_NAME_BYTES, required=False, amqp=True
    )
    return Invitation(
        protocol=protocol,
        group_id=group_id,
        leader_aic=leader_aic,
        partners=partners,
        host=host,
        port=port,
        vhost=vhost,
        access_token=token,
        username=username,
        exchange=exchange,
        exchange_type=exchange_type,
        routing_key=routing_key,
    )
