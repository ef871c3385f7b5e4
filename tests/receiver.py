"""A real HTTP receiver for push notifications, on 127.0.0.1 and an ephemeral port.

It answers from a script (status, headers, body) per request, then with its default (200),
and records every request with the time it arrived.
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
    dripped: bool = False  # answered a byte at a time: the sender may have given up on it

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
    # A slow receiver: one byte of the answer every `drip` seconds (from its head, or from its
    # body only), as long as the sender keeps the connection.
    drip: float = 0.0
    drip_head: bool = True


class Receiver:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.scheme = "https" if tls else "http"
        self.requests: list[Received] = []
        self.script: list[Answer] = []
        self.default = Answer()  # once the script is used up
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._changed:
                    answer = receiver.script.pop(0) if receiver.script else receiver.default
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.requests.append(Received(self.path, headers, body, time.monotonic(), bool(answer.drip)))
                    receiver._changed.notify_all()
                if answer.drip:
                    self._drip(answer)
                    return
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            def _drip(self, answer: Answer) -> None:
                head = f"HTTP/1.1 {answer.status} Slow\r\nContent-Length: {len(answer.body)}\r\n"
                head += "".join(f"{name}: {value}\r\n" for name, value in answer.headers.items()) + "\r\n"
                whole = head.encode() + answer.body
                start = 0 if answer.drip_head else len(head)
                self.close_connection = True
                try:
                    self.wfile.write(whole[:start])
                    for at in range(start, len(whole)):
                        self.wfile.write(whole[at : at + 1])
                        self.wfile.flush()
                        time.sleep(answer.drip)
                except OSError:  # the sender gave up and closed
                    pass

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
