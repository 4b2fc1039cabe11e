"""The Host allow-list, in front of every path (the fast path included).

A web page a local user opens can point its own name at 127.0.0.1 (DNS rebinding) and read
what a loopback API answers without a token: its requests carry that page's name as Host.
Only the names in `PRECAST_API__ALLOWED_HOSTS` (loopback names by default) are answered;
any other Host, or none, gets 421 with a reason. Probes (/healthz, /readyz) answer any Host:
they show no data, and orchestrators call them by a pod's address."""

from __future__ import annotations

from prometheus_client import Counter
from starlette.types import ASGIApp, Receive, Scope, Send

from consumer_api.edge.error_bodies import error_body
from consumer_api.edge.error_hygiene import answer

REFUSED = Counter("precast_api_host_refused", "requests refused for a Host not allowed (421)")
PROBES = frozenset({"/healthz", "/readyz"})
_BODY = error_body(
    "misdirected_request",
    "this Host is not one the API answers (PRECAST_API__ALLOWED_HOSTS)",
    "Host",
)


def host_name(raw: bytes) -> str:
    """The name of a Host header value without its port, lower case ('[::1]:80' -> '::1')."""
    text = raw.decode("latin-1").strip().lower()
    if text.startswith("["):
        end = text.find("]")
        return text[1:end] if end > 0 else text
    if text.count(":") == 1:
        text = text.split(":", 1)[0]
    return text.rstrip(".")  # "localhost." is localhost


def allowed_names(entries: list[str]) -> frozenset[str] | None:
    """The allowed names as `host_name` spells them; None when any Host is allowed."""
    if "*" in entries:
        return None
    return frozenset(host_name(e.encode()) for e in entries)


class HostAllowList:
    def __init__(self, app: ASGIApp, entries: list[str]) -> None:
        self.app, self._names = app, allowed_names(entries)
        # Host values already found allowed, as sent: the hot path is one set lookup (bounded:
        # any port of an allowed name is allowed, and a client picks the port)
        self._seen: set[bytes] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        names = self._names
        if names is None or scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope["headers"]:
            if k == b"host":
                if v in self._seen:
                    return await self.app(scope, receive, send)
                if host_name(v) in names:
                    if len(self._seen) < 1024:
                        self._seen.add(v)
                    return await self.app(scope, receive, send)
                break
        if scope["path"] in PROBES:
            return await self.app(scope, receive, send)
        REFUSED.inc()
        await answer(send, 421, _BODY)
