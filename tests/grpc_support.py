"""The gRPC server as it runs, for the live tests: `manage.py serve_grpc` beside the live
stack's daphne and Celery worker, on the same test database and Redis, and a client's helpers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from a2a.types import a2a_pb2
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import ROOT, STARTUP_TIMEOUT, _free_port, _wait_for, stop


def healthy(address: str) -> bool:
    try:
        with grpc.insecure_channel(address) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
            return answer.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError:
        return False


@contextmanager
def grpc_serving(env: dict[str, str], logs: Path, *, binds: tuple[str, ...] = ("127.0.0.1",)) -> Iterator[Any]:
    port = _free_port()
    log = logs / f"grpc-{port}.log"
    command = [sys.executable, "manage.py", "serve_grpc", "--port", str(port)]
    for bind in binds:
        command += ["--bind", bind]
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**env, "GRPC_PORT": str(port)},
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )
    address = f"127.0.0.1:{port}"
    try:
        _wait_for(lambda: healthy(address), STARTUP_TIMEOUT, "serve_grpc", logs)
        yield address, proc, log
    finally:
        stop([proc])


def metadata(
    *, key: str | None = None, agent: str | None = "acme/echo", version: str | None = "1.0", **more: str
) -> list[tuple[str, str]]:
    pairs = []
    if version is not None:
        pairs.append(("a2a-version", version))
    if key is not None:
        pairs.append(("x-api-key", key))
    if agent is not None:
        pairs.append(("agentserver-agent", agent))
    pairs += [(name.replace("_", "-"), value) for name, value in more.items()]
    return pairs


def text_message(text: str, **fields: Any) -> a2a_pb2.Message:
    import uuid

    return a2a_pb2.Message(
        message_id=fields.pop("message_id", uuid.uuid4().hex),
        role=a2a_pb2.ROLE_USER,
        parts=[a2a_pb2.Part(text=text)],
        **fields,
    )


def as_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


def error_info(error: grpc.RpcError) -> tuple[grpc.StatusCode, str, str]:
    """(status code, ErrorInfo reason, its domain) of a failed call, from grpc-status-details-bin."""
    details = dict(error.trailing_metadata() or ()).get("grpc-status-details-bin")
    assert details, f"no status details: {error.code()} {error.details()}"
    status = status_pb2.Status.FromString(details)
    assert status.code == error.code().value[0]
    (detail,) = status.details
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    return error.code(), info.reason, info.domain
