"""A remote agent's web server for the registry's tests, on 127.0.0.1 and an ephemeral port.

It serves `routes` (path -> Page: status, headers, body), which a test may change between
requests, and answers a POST by `posts` (path -> a function of the body giving the Page); any
other path is a 404. It records every request. JSON bodies may be given as
dicts, and `jwks()` publishes a key set at /.well-known/jwks.json. Point a FakeDns name at
127.0.0.1 and ask for `url(path, host=that name)`: the SSRF guard then lets it through."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Page:
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    body: bytes = b""


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names


class CardServer:
    def __init__(self) -> None:
        self.routes: dict[str, Page] = {}
        self.requests: list[Seen] = []
        # POST answers: path -> a function of the request body giving the Page.
        self.posts: dict[str, Callable[[bytes], Page]] = {}
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                with server._lock:
                    server.requests.append(Seen("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
                    page = server.routes.get(self.path, Page(404, {"Content-Type": "text/plain"}, b"not here"))
                self.send_response(page.status)
                for name, value in page.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(page.body)))
                self.end_headers()
                try:
                    self.wfile.write(page.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading (a capped body): as a real server sees it

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server._lock:
                    server.requests.append(Seen("POST", self.path, {k.lower(): v for k, v in self.headers.items()}))
                    server.bodies.append(body)
                    answer = server.posts.get(self.path)
                page = answer(body) if answer else Page(404, {"Content-Type": "text/plain"}, b"not here")
                self.send_response(page.status)
                for name, value in page.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(page.body)))
                self.end_headers()
                try:
                    self.wfile.write(page.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def serve(self, path: str, body: bytes | dict[str, Any] | list[Any], *, status: int = 200, **headers: str) -> None:
        """Serve `body` (bytes as they are, anything else as JSON) at `path`."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        page_headers = {"Content-Type": "application/json"}
        page_headers.update({name.replace("_", "-"): value for name, value in headers.items()})
        with self._lock:
            self.routes[path] = Page(status, page_headers, raw)

    def jwks(self, keys: list[dict[str, Any]], path: str = "/.well-known/jwks.json") -> str:
        """Publish a key set; its URL on 127.0.0.1."""
        self.serve(path, {"keys": keys})
        return self.url(path)

    def paths(self) -> list[str]:
        with self._lock:
            return [seen.path for seen in self.requests]

    def start(self) -> CardServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
            self.server.server_close()
            self._thread.join()
