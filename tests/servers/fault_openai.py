"""A loopback HTTP server that speaks the OpenAI chat API and injects faults before answering for real.

Each incoming chat request takes the next action from a plan: `429`, `500`, `503`, `400` (a client
error, never retried), `slow` (sleep past the client's timeout), `malformed` (HTTP 200 with a cut-off JSON
body), `garbage` (HTTP 200, HTML), or `ok`.
`ok` forwards the request unchanged to an upstream server (the real llama.cpp server in the tests), so
successful answers come from a real model. When the plan is used up, `then` applies to every request.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ACTIONS = ("400", "429", "500", "503", "slow", "malformed", "garbage", "ok")


class FaultServer:
    def __init__(self, upstream: str | None = None, slow_s: float = 3.0):
        self.upstream = upstream.rstrip("/") if upstream else None
        self.slow_s = slow_s
        self.plan: list[str] = []
        self.then = "ok"
        self.log: list[tuple[str, str]] = []  # (action, model) per chat request, in arrival order
        self.in_flight = 0
        self.max_in_flight = 0  # the most chat requests open at once
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control
    def set_plan(self, actions: list[str], then: str = "ok") -> None:
        for a in [*actions, then]:
            if a not in ACTIONS:
                raise ValueError(f"unknown action {a!r}")
        with self._lock:
            self.plan = list(actions)
            self.then = then
            self.log = []

    def next_action(self, model: str) -> str:
        with self._lock:
            action = self.plan.pop(0) if self.plan else self.then
            self.log.append((action, model))
            return action

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FaultServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                return

            def _send(
                self, status: int, body: bytes, ctype: str = "application/json", headers: dict | None = None
            ) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

            def do_GET(self) -> None:
                if server.upstream:
                    self._proxy(b"", "GET")
                else:
                    self._send(200, json.dumps({"object": "list", "data": []}).encode())

            def do_POST(self) -> None:
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._chat()
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _chat(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                try:
                    model = str(json.loads(body).get("model"))
                except (json.JSONDecodeError, AttributeError):
                    model = "?"
                action = server.next_action(model)
                if action == "400":
                    err = {
                        "error": {"message": "invalid request (injected)", "type": "invalid_request_error"}
                    }
                    self._send(400, json.dumps(err).encode())
                elif action == "429":
                    err = {"error": {"message": "rate limit reached (injected)", "type": "rate_limit"}}
                    self._send(429, json.dumps(err).encode(), headers={"Retry-After": "0"})
                elif action in ("500", "503"):
                    err = {"error": {"message": f"server error {action} (injected)", "type": "server_error"}}
                    self._send(int(action), json.dumps(err).encode())
                elif action == "malformed":
                    self._send(200, b'{"id": "x", "choices": [{"index": 0, "message": {"role": "assi')
                elif action == "garbage":
                    self._send(200, b"<html><body>502 Bad Gateway</body></html>")
                elif action == "slow":
                    time.sleep(server.slow_s)
                    self._proxy(body, "POST")
                else:
                    self._proxy(body, "POST")

            def _proxy(self, body: bytes, method: str) -> None:
                if not server.upstream:
                    self._send(502, b'{"error": {"message": "no upstream configured"}}')
                    return
                path = self.path[len("/v1") :] if self.path.startswith("/v1") else self.path
                req = urllib.request.Request(
                    server.upstream + path,
                    data=body if method == "POST" else None,
                    method=method,
                    headers={"Content-Type": "application/json"},
                )
                try:
                    with urllib.request.urlopen(req, timeout=600) as resp:
                        self._send(
                            resp.status, resp.read(), resp.headers.get("Content-Type", "application/json")
                        )
                except urllib.error.HTTPError as exc:
                    self._send(exc.code, exc.read())

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fault-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
