"""A real HTTP receiver for push notifications, on 127.0.0.1 and an ephemeral port.

It answers from a script (status, headers, body) per request, then 200, and records every
request with the time it arrived.
"""

from __future__ import annotations

import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    at: float  # time.monotonic()

    @property
    def event_id(self) -> str:
        return self.headers.get("a2a-push-event-id", "")

    @property
    def seq(self) -> int:
        return int(self.event_id.rsplit(":", 1)[1])

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class Receiver:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.scheme = "https" if tls else "http"
        self.requests: list[Received] = []
        self.script: list[Answer] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._changed:
                    receiver.requests.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
                    )
                    answer = receiver.script.pop(0) if receiver.script else Answer()
                    receiver._changed.notify_all()
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            do_GET = do_POST

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def answer(self, *answers: Answer) -> None:
        with self._changed:
            self.script.extend(answers)

    def wait_for(self, predicate, timeout: float = 20.0) -> list[Received]:
        """Block until `predicate(requests)` holds (a bound, not a speed requirement)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.requests):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"the receiver never saw what was expected; it got {len(self.requests)} "
                        f"requests: {[r.event_id for r in self.requests]}"
                    )
                self._changed.wait(left)
            return list(self.requests)

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
            self.server.server_close()
            self._thread.join()
