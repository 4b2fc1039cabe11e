"""/metrics, /healthz and /readyz for services that do not run an HTTP framework themselves."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

Check = Callable[[], tuple[bool, dict[str, Any]]]


def _always_ok() -> tuple[bool, dict[str, Any]]:
    return True, {}


class ProbeServer:
    """Serves Prometheus metrics plus liveness and readiness on a background thread.

    `health` says the process is alive and its loop is turning; `ready` says it is doing useful
    work (e.g. connected and assigned). Each returns (ok, details) and details are shown as JSON.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        health: Check = _always_ok,
        ready: Check = _always_ok,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        probe = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the name http.server calls
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(probe.registry), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz"):
                    try:
                        ok, details = (probe.health if path == "/healthz" else probe.ready)()
                    except Exception:  # noqa: BLE001 - a check that fails says "down", not why
                        ok, details = False, {"down": ["probe"]}
                    body = orjson.dumps({"status": "ok" if ok else "unavailable", **details})
                    self._send(200 if ok else 503, body, "application/json")
                else:
                    self._send(404, b'{"error":"not found"}', "application/json")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # scrapes every few seconds: keep quiet
                return

        self.health, self.ready, self.registry = health, ready, registry
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="probe-http", daemon=True
        )

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> ProbeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def start_probe(
    host: str, port: int, *, health: Check = _always_ok, ready: Check = _always_ok
) -> ProbeServer | None:
    """The running probe server of a service, or None where its port is 0 (probes disabled)."""
    return ProbeServer(host, port, health=health, ready=ready).start() if port else None
