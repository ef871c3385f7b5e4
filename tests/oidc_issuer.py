"""A real OpenID Connect issuer for tests: keys made here, tokens signed with them, and a JWKS
served on a loopback address (the outbound guard lets only allow-listed ones through)."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

ISSUER = "https://login.example.test/acme"
AUDIENCE = "agentserver"

# Made once: an RSA key takes a while to generate.
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
ED448_KEY = ed448.Ed448PrivateKey.generate()


def jwk(private_key: Any, kid: str, **extra: Any) -> dict[str, Any]:
    public = private_key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        data = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        data = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        data = OKPAlgorithm.to_jwk(public, as_dict=True)
    return {**data, "kid": kid, "use": "sig", **extra}


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    found = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 300}
    found.update(changes)
    return {name: value for name, value in found.items() if value is not None}


def token(key: Any = RSA_KEY, *, alg: str = "RS256", kid: str | None = "rsa-1", **changes: Any) -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(claims(**changes), key, algorithm=alg, headers=headers)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_made(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}.{b64(signature)}"


class Issuer:
    """A real OpenID Connect issuer's JWKS endpoint on a loopback address and an ephemeral
    port: serves `jwks` (or the `answer` set), after `delay`, and records every request."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.jwks: dict[str, Any] = {
            "keys": [jwk(RSA_KEY, "rsa-1"), jwk(EC_KEY, "ec-1"), jwk(ED_KEY, "ed-1"), jwk(ED448_KEY, "ed448-1")]
        }
        self.answer: tuple[int, dict[str, str], bytes] | None = None
        self.delay = 0.0
        self.requests: list[tuple[str, str]] = []
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                issuer.requests.append((self.command, self.path))
                time.sleep(issuer.delay)
                status, headers, body = issuer.answer or (
                    200,
                    {"Content-Type": "application/jwk-set+json"},
                    json.dumps(issuer.jwks).encode(),
                )
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (a timeout test)

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}/jwks"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
