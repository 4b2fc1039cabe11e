"""/metrics, /healthz and /readyz for services that do not run an HTTP framework themselves.

Bound by `PRECAST_METRICS__HOST` (loopback by default; in a container, the container's own
name rather than every interface). A connection that sends nothing, or reads nothing, for
`TIMEOUT_S` is closed, and at most `MAX_CONNECTIONS` are served at once (one thread each): a
scraper that hangs, or someone holding sockets open, cannot pile up threads. The serving
thread runs under precast.supervise (a restart is counted; one that keeps failing turns
readiness false and ends the process)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder

from precast.supervise import Supervised

Check = Callable[[], tuple[bool, dict[str, Any]]]
TIMEOUT_S = 5.0
MAX_CONNECTIONS = 32


class _BoundedServer(ThreadingHTTPServer):
    """One thread per connection, at most `MAX_CONNECTIONS` of them: past it a connection is
    closed at once instead of getting a thread."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _always_ok() -> tuple[bool, dict[str, Any]]:
    return True, {}


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The registry in the format the scraper asked for: OpenMetrics when its Accept header
    names it (Prometheus does; only OpenMetrics carries the trace-ID exemplars of the latency
    histograms), else the classic text format."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


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
            timeout = TIMEOUT_S  # socket timeout: a silent or non-reading peer is dropped

            def do_GET(self) -> None:  # the name http.server calls
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype = exposition(probe.registry, self.headers.get("Accept"))
                    self._send(200, body, ctype)
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
        self._server = _BoundedServer((host, port), Handler)
        self._stop = threading.Event()
        self.supervised = Supervised("probe-http")
        self._thread = self.supervised.thread(self._serve, self._stop)

    def _serve(self) -> None:
        self._server.serve_forever(poll_interval=0.5)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def healthy(self) -> bool:
        return self.supervised.healthy

    def start(self) -> ProbeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():  # shutdown() waits for a serve_forever that never ran
            self._server.shutdown()
        self._server.server_close()


def start_probe(
    host: str, port: int, *, health: Check = _always_ok, ready: Check = _always_ok
) -> ProbeServer | None:
    """The running probe server of a service, or None where its port is 0 (probes disabled)."""
    return ProbeServer(host, port, health=health, ready=ready).start() if port else None
