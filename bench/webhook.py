"""Webhook agents: what our server adds to a run over the endpoint's own time.

    .venv/bin/python bench/webhook.py                 # every point, defaults below
    .venv/bin/python bench/webhook.py --runs 500 --pause-ms 50

It starts its own daphne and Celery worker (prefork, the production default) on a fresh
`*bench*` database and a Redis db of its own, seeds the demo tenant, and runs a loopback
endpoint in this process (127.0.0.1, a thread per request, as tests/webhook_endpoint.py) that
checks each request's signature with the Standard Webhooks library and answers a fixed NDJSON.
One client sends blocking SendMessage calls one after the other (keep-alive), so each figure
is one run with nothing else in flight; the points take turns in blocks (--rounds), so that a
busy moment of the machine falls on all of them alike. Everything is stopped at the end. Results go to
bench/results/webhook-<stamp>.{md,json} (git-ignored).

Per run: end to end = the client's SendMessage round trip (request written to answer read);
endpoint = from the endpoint's handler starting (request head parsed) to its answer's last
byte written, signature check included; overhead = end to end - endpoint, run by run. The
points: the echo agent (our own run, no webhook: the baseline), and webhook agents answering
1 action (`complete` with an artifact: the same writes as the echo), 4 actions at once
(working, two artifact chunks, complete), and the same 4 with --pause-ms between lines.

No traffic leaves the machine: everything is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from standardwebhooks.webhooks import Webhook

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import load  # noqa: E402
from run import Proc, ensure_database, flush_redis, log, require_free_port, run_checked, wait_ready  # noqa: E402

RESULTS = BENCH_DIR / "results"

FOUR = [
    {"type": "working", "message": "reading"},
    {"type": "artifact", "artifactId": "answer", "name": "answer.txt", "text": "echo: "},
    {"type": "artifact", "artifactId": "answer", "append": True, "lastChunk": True, "text": "hello"},
    {"type": "complete", "message": "done"},
]
ONE = [{"type": "complete", "artifact": {"artifactId": "answer", "name": "echo", "text": "echo: hello"}}]


class Endpoint:
    """path -> (secret, lines, pause); records each request's handling time by task id."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[Webhook, list[bytes], float]] = {}
        self.handled: dict[str, float] = {}  # task id -> seconds
        self.bad_signatures = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                started = time.perf_counter()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                verifier, lines, pause = endpoint.routes[self.path]
                request = verifier.verify(body, dict(self.headers.items()))  # raises if not authentic
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i, line in enumerate(lines):
                    if pause and i:
                        time.sleep(pause)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                endpoint.handled[request["taskId"]] = time.perf_counter() - started

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def route(self, path: str, secret: str, actions: list[dict], pause: float) -> str:
        lines = [json.dumps(a, separators=(",", ":")).encode() + b"\n" for a in actions]
        self.routes[path] = (Webhook(secret), lines, pause)
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 2),
        "p95": round(load.percentile(ordered, 95) or 0.0, 2),
        "min": round(ordered[0], 2),
    }


class Point:
    """One kind of run, measured in blocks interleaved with the other points' (so that a busy
    moment of the machine falls on all of them alike)."""

    def __init__(self, name: str, path: str, endpoint: Endpoint | None) -> None:
        self.name, self.path, self.endpoint = name, path, endpoint
        self.e2e: list[float] = []
        self.own: list[float] = []
        self.overhead: list[float] = []

    def run(self, client: httpx.Client, key: str, count: int, *, keep: bool) -> None:
        headers = {"A2A-Version": "1.0", "X-API-Key": key, "Content-Type": "application/json"}
        for i in range(count):
            message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hello"}]}
            body = {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": message}}
            started = time.perf_counter()
            response = client.post(self.path, json=body, headers=headers)
            took = (time.perf_counter() - started) * 1000
            task = response.json()["result"]["task"]
            if task["status"]["state"] != "TASK_STATE_COMPLETED":
                raise RuntimeError(f"a run on {self.path} ended {task['status']}")
            if not keep:
                continue
            self.e2e.append(took)
            if self.endpoint is not None:
                handled = self.endpoint.handled[task["id"]] * 1000
                self.own.append(handled)
                self.overhead.append(took - handled)

    def figures(self) -> dict:
        point: dict[str, Any] = {"path": self.path, "runs": len(self.e2e), "end_to_end_ms": percentiles(self.e2e)}
        if self.endpoint is not None:
            point["endpoint_ms"] = percentiles(self.own)
            point["overhead_ms"] = percentiles(self.overhead)
        return point


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8500)
    p.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/agentserver_bench_webhook")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    p.add_argument("--runs", type=int, default=300, help="measured runs per point")
    p.add_argument("--rounds", type=int, default=6, help="blocks each point's runs are split into, interleaved")
    p.add_argument("--warmup", type=int, default=30, help="runs per point thrown away first")
    p.add_argument("--pause-ms", type=float, default=20.0, help="between the streamed point's lines")
    p.add_argument("--worker-cmd", default=".venv/bin/celery -A agentserver worker -l warning")
    p.add_argument("--web-cmd", default=".venv/bin/daphne -v 0 -b 127.0.0.1 -p {port} agentserver.asgi:application")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    logdir = RESULTS / "logs" / f"webhook-{stamp}"
    logdir.mkdir(parents=True, exist_ok=True)
    require_free_port(a.port, "server", "--port")
    env = {
        **os.environ,
        "DATABASE_URL": a.database_url,
        "REDIS_URL": a.redis_url,
        "DJANGO_SETTINGS_MODULE": "agentserver.settings",
        "DJANGO_DEBUG": "0",
        "CELERY_QUEUE": f"bench-webhook-{os.getpid()}",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
        # the endpoint is this process, on plain http on loopback
        "OUTBOUND_ALLOW_NETS": "127.0.0.1/32",
        "WEBHOOK_ALLOW_HTTP": "1",
    }
    env.pop("AGENTSERVER_EMBEDDED", None)
    ensure_database(a.database_url, fresh=True)
    flush_redis(a.redis_url)
    run_checked([".venv/bin/python", "manage.py", "migrate", "--noinput"], logdir / "setup.log", env)
    seed = json.loads(
        run_checked([".venv/bin/python", "manage.py", "seed_demo", "--json"], logdir / "setup.log", env)
        .strip()
        .splitlines()[-1]
    )
    endpoint = Endpoint()
    hooks = {}
    for slug, actions, pause in (
        ("hook1", ONE, 0.0),
        ("hook4", FOUR, 0.0),
        ("hook4s", FOUR, a.pause_ms / 1000),
    ):
        created = run_checked(
            [
                *(".venv/bin/python", "manage.py", "create_agent", "demo", slug, "--executor", "webhook"),
                *("--executor-settings", json.dumps({"url": f"http://127.0.0.1:{endpoint.port}/{slug}"})),
                *("--generate-secret", "--json"),
            ],
            logdir / "setup.log",
            env,
        )
        made = json.loads(created.strip().splitlines()[-1])
        endpoint.route(f"/{slug}", made["secret"], actions, pause)
        hooks[slug] = made["path"]
    procs = [
        Proc("worker", a.worker_cmd.split(), logdir / "worker.log", env),
        Proc("web", a.web_cmd.format(port=a.port).split(), logdir / "web.log", env),
    ]
    results: dict = {
        "machine": f"{platform.node()} {os.cpu_count()} cpu, {platform.python_version()}",
        "when": stamp,
        "args": vars(a),
        "points": {},
    }
    try:
        echo = seed["agents"]["echo"]
        wait_ready(
            load.Target(f"http://127.0.0.1:{a.port}{echo}", seed["api_key"], "X-API-Key"),
            [echo + ".well-known/agent-card.json"],
            procs,
            60,
        )
        points = [
            Point("echo (no webhook)", echo, None),
            Point("webhook, 1 action", hooks["hook1"], endpoint),
            Point("webhook, 4 actions", hooks["hook4"], endpoint),
            Point(f"webhook, 4 actions {a.pause_ms:g} ms apart", hooks["hook4s"], endpoint),
        ]
        block = max(1, a.runs // a.rounds)
        with httpx.Client(base_url=f"http://127.0.0.1:{a.port}", timeout=30) as client:
            for point in points:
                point.run(client, seed["api_key"], a.warmup, keep=False)
            for round_ in range(a.rounds):
                log(f"round {round_ + 1} of {a.rounds}: {block} runs of each point")
                for point in points:
                    point.run(client, seed["api_key"], block, keep=True)
        for point in points:
            results["points"][point.name] = point.figures()
            log(f"{point.name}: {json.dumps(results['points'][point.name])}")
    finally:
        for proc in reversed(procs):
            proc.stop()
        endpoint.stop()
    md = report(results)
    (RESULTS / f"webhook-{stamp}.json").write_text(json.dumps(results, indent=2))
    (RESULTS / f"webhook-{stamp}.md").write_text(md)
    print(md)
    return 0


def report(r: dict) -> str:
    lines = [
        f"# Webhook agents, {r['when']} ({r['machine']})",
        "",
        f"Blocking SendMessage, one at a time, {r['args']['runs']} runs per point (after {r['args']['warmup']}) in "
        f"{r['args']['rounds']} interleaved blocks; ms, median / p95.",
        "",
        "| point | end to end | endpoint's own | our overhead per run |",
        "|---|---|---|---|",
    ]
    for name, p in r["points"].items():
        e2e = p["end_to_end_ms"]
        own = p.get("endpoint_ms")
        extra = p.get("overhead_ms")
        lines.append(
            f"| {name} | {e2e['median']} / {e2e['p95']} | "
            + (f"{own['median']} / {own['p95']} | {extra['median']} / {extra['p95']} |" if own else "– | – |")
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
