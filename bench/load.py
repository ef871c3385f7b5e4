#!/usr/bin/env python3
"""Closed-loop load generator for A2A 1.0 ``SendMessage`` (JSON-RPC over HTTP/1.1).

Standard library only (uses uvloop when it is importable and ``--uvloop`` is
given), so it runs with any Python >= 3.9 and stays light on the CPU it
shares with the servers it measures.

Each of the ``--concurrency`` workers owns one keep-alive HTTP/1.1
connection (``asyncio.open_connection``) and sends the next request as soon
as the previous response is fully read (closed loop).  Requests are built by
hand, responses are parsed by ``Content-Length`` (chunked bodies are
understood too).  A warm-up period is run and thrown away, then requests are
measured for ``--duration`` seconds or until ``--requests`` have completed,
whichever comes first; every request also has a ``--timeout``.  The run
always ends by itself.

A request counts as a success only when the HTTP status is 200, the body is a
JSON-RPC ``result`` holding a ``task``, and the task state is acceptable for
the mode:

* ``immediate`` (``configuration.returnImmediately: true``): any state that is
  not failed/rejected/canceled (normally ``TASK_STATE_SUBMITTED``);
* ``blocking`` (no configuration): exactly ``TASK_STATE_COMPLETED``.

Everything else (HTTP error, JSON-RPC error, wrong state, broken connection,
timeout) is an error, is counted by kind, and is excluded from req/s and from
the latency percentiles.

Examples::

    python bench/load.py --url http://127.0.0.1:9100/ --mode blocking -c 8
    python bench/load.py --url http://127.0.0.1:8000/agents/demo/echo/ \
        --api-key "$KEY" --mode immediate -c 32 --duration 10 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections import Counter
from urllib.parse import urlsplit

MODES = ("immediate", "blocking")
BAD_STATES = {
    "TASK_STATE_FAILED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_UNSPECIFIED",
}
TERMINAL_STATES = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_CANCELED",
    # interrupted: the task will not move on by itself
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_AUTH_REQUIRED",
}
MAX_ERROR_SAMPLES = 5


class Target:
    """Where to send requests and which fixed headers to send."""

    def __init__(
        self, url: str, api_key: str | None = None, api_key_header: str = "X-API-Key", a2a_version: str = "1.0"
    ) -> None:
        u = urlsplit(url)
        if u.scheme != "http":
            raise ValueError(f"only http:// URLs are supported, got {url!r}")
        self.url = url
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 80
        self.path = (u.path or "/") + (("?" + u.query) if u.query else "")
        hostport = self.host if self.port == 80 else f"{self.host}:{self.port}"
        head = [
            f"Host: {hostport}",
            "Content-Type: application/json",
            "Accept: application/json",
            f"A2A-Version: {a2a_version}",
            "Connection: keep-alive",
        ]
        if api_key:
            head.append(f"{api_key_header}: {api_key}")
        self._head = ("\r\n".join(head) + "\r\n").encode("latin-1")
        self._post_line = f"POST {self.path} HTTP/1.1\r\n".encode("latin-1")

    def post(self, body: bytes) -> bytes:
        return b"".join(
            (
                self._post_line,
                self._head,
                b"Content-Length: ",
                str(len(body)).encode(),
                b"\r\n\r\n",
                body,
            )
        )

    def get(self, path: str) -> bytes:
        hostport = self.host if self.port == 80 else f"{self.host}:{self.port}"
        return f"GET {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: keep-alive\r\n\r\n".encode("latin-1")


def send_message_body(req_id: int, mode: str, text: str = "hello") -> bytes:
    msg = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    params: dict = {"message": msg}
    if mode == "immediate":
        params["configuration"] = {"returnImmediately": True}
    return json.dumps(
        {"jsonrpc": "2.0", "id": str(req_id), "method": "SendMessage", "params": params},
        separators=(",", ":"),
    ).encode()


def get_task_body(req_id: int, task_id: str) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": str(req_id), "method": "GetTask", "params": {"id": task_id}},
        separators=(",", ":"),
    ).encode()


class HTTPError(Exception):
    pass


class Conn:
    """One keep-alive HTTP/1.1 connection; reconnects lazily after a failure."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.connects = 0

    async def _connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.target.host, self.target.port, limit=1 << 20)
        self.connects += 1

    def close(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:  # noqa: BLE001 - closing a connection that may be broken
                pass
        self.reader = self.writer = None

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            await self._connect()
        assert self.reader is not None and self.writer is not None
        try:
            self.writer.write(raw)
            reader = self.reader
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            status_line = lines[0].split(b" ", 2)
            if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
                raise HTTPError(f"bad status line {lines[0][:80]!r}")
            status = int(status_line[1])
            length = -1
            chunked = False
            close = status_line[0] == b"HTTP/1.0"
            for line in lines[1:]:
                if not line:
                    continue
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value.strip())
                elif name == b"transfer-encoding" and b"chunked" in value.lower():
                    chunked = True
                elif name == b"connection":
                    v = value.strip().lower()
                    close = v == b"close" or (close and v != b"keep-alive")
            if chunked:
                parts = []
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                    if size == 0:
                        # trailers (normally none) end with an empty line
                        while (await reader.readuntil(b"\r\n")) != b"\r\n":
                            pass
                        break
                    parts.append(await reader.readexactly(size))
                    await reader.readexactly(2)
                body = b"".join(parts)
            elif length >= 0:
                body = await reader.readexactly(length) if length else b""
            else:  # no length: body runs to connection close
                body = await reader.read()
                close = True
            if close:
                self.close()
            return status, body
        except BaseException:
            self.close()
            raise


def check_send_response(status: int, body: bytes, mode: str) -> tuple[str | None, str | None]:
    """Return (error_kind or None, task_id or None)."""
    if status != 200:
        return f"http_{status}", None
    try:
        doc = json.loads(body)
    except ValueError:
        return "bad_json", None
    if not isinstance(doc, dict):
        return "bad_json", None
    if "error" in doc:
        err = doc.get("error") or {}
        code = err.get("code") if isinstance(err, dict) else None
        return f"rpc_error_{code}", None
    result = doc.get("result")
    task = result.get("task") if isinstance(result, dict) else None
    if not isinstance(task, dict):
        return "no_task_in_result", None
    state = (task.get("status") or {}).get("state")
    task_id = task.get("id")
    if mode == "blocking":
        if state != "TASK_STATE_COMPLETED":
            return f"state_{state}", task_id
    elif state is None or state in BAD_STATES:
        return f"state_{state}", task_id
    return None, task_id


def percentile(sorted_vals: list[float], p: float) -> float | None:
    """Nearest-rank percentile of an ascending list (p in 0..100)."""
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, int(-(-p * len(sorted_vals) // 100)) - 1))
    return sorted_vals[k]


async def run_load(
    target: Target,
    mode: str,
    concurrency: int,
    duration: float = 10.0,
    warmup: float = 2.0,
    max_requests: int | None = None,
    timeout: float = 30.0,
    text: str = "hello",
) -> dict:
    """Run one (mode, concurrency) point and return its figures as a dict."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    if concurrency < 1 or duration <= 0 or warmup < 0 or timeout <= 0:
        raise ValueError("concurrency >= 1, duration > 0, warmup >= 0, timeout > 0 required")
    loop = asyncio.get_running_loop()
    clock = time.perf_counter
    latencies: list[float] = []
    errors: Counter = Counter()
    error_samples: list[str] = []
    warm_errors: Counter = Counter()
    state = {"n": 0, "done": 0, "all_ok": 0, "last_task": None, "any_task": None, "last_done_at": None}
    t_start = clock()
    t_measure = t_start + warmup
    t_end = t_measure + duration
    # hard stop: no request may outlive the window by more than its timeout
    hard_deadline = t_end + timeout + 5.0
    conns = [Conn(target) for _ in range(concurrency)]

    def record_error(kind: str, detail: str, measured: bool) -> None:
        (errors if measured else warm_errors)[kind] += 1
        if measured and len(error_samples) < MAX_ERROR_SAMPLES:
            error_samples.append(f"{kind}: {detail[:300]}")

    async def worker(conn: Conn) -> None:
        while True:
            now = clock()
            if now >= t_end or now >= hard_deadline:
                return
            if max_requests is not None and state["done"] >= max_requests:
                return
            state["n"] += 1
            raw = target.post(send_message_body(state["n"], mode, text))
            t0 = clock()
            try:
                status, body = await asyncio.wait_for(conn.request(raw), timeout)
            except TimeoutError:
                t1 = clock()
                record_error("timeout", f"no response in {timeout}s", t1 >= t_measure and t1 <= t_end)
                continue
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, HTTPError, ValueError) as exc:
                t1 = clock()
                record_error("conn_" + type(exc).__name__, repr(exc), t1 >= t_measure and t1 <= t_end)
                # do not spin on a dead server: the loop is still bounded by t_end
                await asyncio.sleep(0.05)
                continue
            t1 = clock()
            kind, task_id = check_send_response(status, body, mode)
            measured = t_measure <= t1 <= t_end
            if kind is None:
                state["all_ok"] += 1
                state["any_task"] = task_id or state["any_task"]
            if kind is not None:
                record_error(kind, body.decode("utf-8", "replace"), measured)
            elif measured:
                if max_requests is not None and state["done"] >= max_requests:
                    continue
                latencies.append(t1 - t0)
                state["done"] += 1
                state["last_done_at"] = t1
                if task_id:
                    state["last_task"] = task_id

    # connect everybody first so connection setup is not in the figures
    connect_errors = 0
    for c in conns:
        try:
            await asyncio.wait_for(c._connect(), timeout)
        except (TimeoutError, OSError):
            connect_errors += 1
    t_start = clock()
    t_measure = t_start + warmup
    t_end = t_measure + duration
    hard_deadline = t_end + timeout + 5.0
    cpu0 = time.process_time()
    tasks = [loop.create_task(worker(c)) for c in conns]
    gathered = asyncio.gather(*tasks)
    # on Ctrl-C the gather ends cancelled: fetch its outcome so asyncio does not complain
    gathered.add_done_callback(lambda f: f.cancelled() or f.exception())
    try:
        await asyncio.wait_for(gathered, hard_deadline - clock() + 1.0)
    except TimeoutError:
        for t in tasks:
            t.cancel()
    cpu1 = time.process_time()
    reconnects = sum(max(0, c.connects - 1) for c in conns)
    for c in conns:
        c.close()
    # elapsed measured time: the window, or less when stopped by --requests
    if max_requests is not None and state["done"] >= max_requests and state["last_done_at"]:
        elapsed = max(1e-9, state["last_done_at"] - t_measure)
    else:
        elapsed = duration
    latencies.sort()
    ms = lambda v: None if v is None else round(v * 1000.0, 3)  # noqa: E731
    n_err = sum(errors.values())
    wall = clock() - t_start
    return {
        "url": target.url,
        "mode": mode,
        "concurrency": concurrency,
        "warmup_s": warmup,
        "duration_s": round(elapsed, 3),
        "requests": len(latencies),
        "errors": n_err,
        "error_kinds": dict(errors),
        "error_samples": error_samples,
        "warmup_errors": sum(warm_errors.values()),
        "connect_errors": connect_errors,
        "reconnects": reconnects,
        "rps": round(len(latencies) / elapsed, 2),
        "error_rate": round(n_err / max(1, n_err + len(latencies)), 4),
        "p50_ms": ms(percentile(latencies, 50)),
        "p90_ms": ms(percentile(latencies, 90)),
        "p99_ms": ms(percentile(latencies, 99)),
        "max_ms": ms(latencies[-1] if latencies else None),
        "mean_ms": ms(sum(latencies) / len(latencies) if latencies else None),
        "client_cpu_s": round(cpu1 - cpu0, 3),
        "client_cpu_pct": round(100.0 * (cpu1 - cpu0) / max(1e-9, wall), 1),
        # successes including warm-up and requests finishing after the window
        "all_successes": state["all_ok"],
        # from the start of the warm-up until the last request in flight ended
        "wall_s": round(wall, 3),
        "last_task_id": state["any_task"],
    }


async def get_task_state(target: Target, task_id: str, timeout: float = 10.0) -> str | None:
    """The task's state via GetTask; "error:<what>" when the server answers with an error."""
    conn = Conn(target)
    try:
        status, body = await asyncio.wait_for(conn.request(target.post(get_task_body(1, task_id))), timeout)
    finally:
        conn.close()
    if status != 200:
        return f"error:http_{status}"
    try:
        doc = json.loads(body)
        if "error" in doc:
            return f"error:rpc_{(doc.get('error') or {}).get('code')}"
        res = doc.get("result") or {}
        task = res.get("task", res) if isinstance(res, dict) else {}
        return (task.get("status") or {}).get("state")
    except (ValueError, AttributeError):
        return "error:bad_json"


async def wait_task_terminal(
    target: Target, task_id: str, limit: float = 60.0, interval: float = 0.2
) -> tuple[float, str | None]:
    """Poll GetTask until the task is terminal/interrupted; bounded by ``limit`` seconds,
    and given up after 3 error answers in a row.  Returns (seconds waited, last state)."""
    t0 = time.perf_counter()
    state = None
    errors = 0
    while True:
        try:
            state = await get_task_state(target, task_id)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, HTTPError, ValueError):
            state = "error:connection"
        errors = errors + 1 if state and state.startswith("error:") else 0
        waited = time.perf_counter() - t0
        if state in TERMINAL_STATES or waited >= limit or errors >= 3:
            return waited, state
        await asyncio.sleep(interval)


async def http_get(target: Target, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    conn = Conn(target)
    try:
        return await asyncio.wait_for(conn.request(target.get(path)), timeout)
    finally:
        conn.close()


def install_uvloop() -> bool:
    try:
        import uvloop  # type: ignore
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def format_line(r: dict) -> str:
    def f(v):
        return "-" if v is None else f"{v:.1f}"

    return (
        f"{r['mode']:<9} c={r['concurrency']:<3} requests={r['requests']:<6} "
        f"errors={r['errors']:<4} req/s={r['rps']:<8.1f} p50={f(r['p50_ms'])}ms "
        f"p90={f(r['p90_ms'])}ms p99={f(r['p99_ms'])}ms max={f(r['max_ms'])}ms "
        f"client_cpu={r['client_cpu_pct']}%"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--url", required=True, help="JSON-RPC endpoint (http://127.0.0.1:PORT/...)")
    p.add_argument(
        "--mode",
        choices=MODES,
        action="append",
        help="immediate = returnImmediately:true, blocking = wait for completion (repeatable; default both)",
    )
    p.add_argument("-c", "--concurrency", default="1,8,32,64", help="comma-separated connection counts")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per point")
    p.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per point (discarded)")
    p.add_argument(
        "--requests", type=int, default=None, help="also stop a point after this many successful measured requests"
    )
    p.add_argument("--timeout", type=float, default=30.0, help="per-request timeout, seconds")
    p.add_argument("--api-key", default=os.environ.get("BENCH_API_KEY"), help="API key (env BENCH_API_KEY)")
    p.add_argument("--api-key-header", default="X-API-Key")
    p.add_argument("--text", default="hello", help="user text sent in every message")
    p.add_argument("--uvloop", action="store_true", help="use uvloop if installed")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of lines")
    a = p.parse_args(argv)

    host = urlsplit(a.url).hostname or ""
    if not (host.startswith("127.") or host in ("localhost", "::1")):
        p.error("refusing to load a non-loopback address")
    loop_name = "uvloop" if a.uvloop and install_uvloop() else "asyncio"
    target = Target(a.url, a.api_key, a.api_key_header)
    conc = [int(x) for x in a.concurrency.split(",") if x.strip()]
    modes = a.mode or list(MODES)
    results = []
    for mode in modes:
        for c in conc:
            r = asyncio.run(run_load(target, mode, c, a.duration, a.warmup, a.requests, a.timeout, a.text))
            r["client_loop"] = loop_name
            results.append(r)
            if not a.json:
                print(format_line(r), flush=True)
    if a.json:
        json.dump({"results": results}, sys.stdout, indent=2)
        print()
    return 1 if any(r["requests"] == 0 for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
