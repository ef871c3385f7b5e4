"""A real webhook agent endpoint for the tests, on 127.0.0.1 and an ephemeral (or given) port.

It checks each request's Standard Webhooks signature with the reference library
(`standardwebhooks`), records the request, and answers from a script: a status, headers and a
body written chunk by chunk with pauses (so an NDJSON answer streams), or raw bytes with no
HTTP framing at all, or nothing (the connection closed at once). With no script left it
answers 500. It records when each answer was finished.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

NDJSON = "application/x-ndjson"


@dataclass
class Seen:
    headers: dict[str, str]  # lower-cased names
    body: bytes
    verified: bool
    at: float  # time.monotonic()

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    content_type: str | None = NDJSON
    # (seconds to wait, bytes to send), sent as chunks of a chunked answer, each flushed.
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    # Bytes written to the socket as they are, instead of an HTTP answer (b"": close at once).
    raw: bytes | None = None
    # Seconds to wait before anything is sent.
    delay: float = 0.0
    # False: the connection is closed after the chunks, without the body's end.
    end: bool = True


def line(action: dict[str, Any]) -> bytes:
    return orjson.dumps(action) + b"\n"


def ndjson(*actions: dict[str, Any], pause: float = 0.0, **reply: Any) -> Reply:
    """An NDJSON answer: one line per action, `pause` seconds before each."""
    return Reply(chunks=[(pause, line(a)) for a in actions], **reply)


def document(value: Any, **reply: Any) -> Reply:
    """An application/json answer."""
    return Reply(content_type="application/json", chunks=[(0.0, orjson.dumps(value))], **reply)


class Endpoint:
    def __init__(self, secret: str | None, port: int = 0) -> None:
        """`secret`: the agent's, to verify each request's signature (None: no check)."""
        self.verifier = Webhook(secret) if secret is not None else None
        self.seen: list[Seen] = []
        self.script: list[Reply] = []
        self.finished: list[float] = []  # when each answer's last byte was written (or could not be)
        self.cut_off = 0  # answers whose connection the server had closed before they were written
        self._changed = threading.Condition()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    if endpoint.verifier is not None:
                        endpoint.verifier.verify(body, headers, json_parse=False)
                    verified = True
                except WebhookVerificationError:
                    verified = False
                with endpoint._changed:
                    endpoint.seen.append(Seen(headers, body, verified, time.monotonic()))
                    reply = endpoint.script.pop(0) if endpoint.script else Reply(500, "text/plain", [(0, b"no script")])
                    endpoint._changed.notify_all()
                if not verified:
                    reply = Reply(401, "text/plain", [(0, b"bad signature")])
                cut_off = False
                try:
                    self._answer(reply)
                except (BrokenPipeError, ConnectionResetError):  # the server stopped reading
                    cut_off = True
                with endpoint._changed:
                    endpoint.cut_off += cut_off
                    endpoint.finished.append(time.monotonic())
                    endpoint._changed.notify_all()
                self.close_connection = True

            def _answer(self, reply: Reply) -> None:
                time.sleep(reply.delay)
                if reply.raw is not None:
                    self.wfile.write(reply.raw)
                    self.wfile.flush()
                    return
                self.send_response(reply.status)
                if reply.content_type:
                    self.send_header("Content-Type", reply.content_type)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                for pause, data in reply.chunks:
                    time.sleep(pause)
                    if data:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                if reply.end:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/agent", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def answer(self, *replies: Reply) -> Endpoint:
        with self._changed:
            self.script.extend(replies)
        return self

    def wait_finished(self, count: int = 1, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.finished) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"the endpoint finished {len(self.finished)} answers, not {count}"
                self._changed.wait(left)

    def start(self) -> Endpoint:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
            self.server.server_close()
            self._thread.join()


def run_until_working(task: Any) -> tuple[threading.Thread, list[str]]:
    """Run the task's run in a thread of its own, as a worker would, and return once the task is
    working: the thread, and (once it is joined) what the run returned."""
    from django.db import connection

    from tasks_app import runner, selectors
    from tasks_app.lifecycle import TaskState

    outcome: list[str] = []

    def work() -> None:
        try:
            outcome.append(runner.run(task_id=task.pk, run_token=str(task.run_token)))
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + 10
    while selectors.task_state(task.pk) != TaskState.WORKING:
        assert time.monotonic() < deadline, "the run never made the task working"
        time.sleep(0.02)
    return worker, outcome
