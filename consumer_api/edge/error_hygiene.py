"""Error hygiene for everything behind the fast path: a client that goes away mid-request is
one counted log line, not a traceback; an error the app did not shape is still JSON (500
`internal_error`, or 400 `bad_body` when the server could not read the body), never the
framework's plain-text page; and the stream of errors can never amplify the log (one line each,
at most `_LINES_PER_S` a second, the rest only counted)."""

from __future__ import annotations

import logging
import time

from prometheus_client import Counter
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumer_api.edge.error_bodies import error_body
from precast.hygiene import printable

log = logging.getLogger("precast.api")

DISCONNECTS = Counter(
    "precast_api_client_disconnects", "requests whose client went away before the answer"
)
ERRORS = Counter("precast_api_errors", "requests that failed inside the app, by kind", ["kind"])
_LINES_PER_S = 10


class _Throttle:
    def __init__(self) -> None:
        self.second, self.lines = 0, 0

    def allow(self) -> bool:
        now = int(time.monotonic())
        if now != self.second:
            self.second, self.lines = now, 0
        self.lines += 1
        return self.lines <= _LINES_PER_S


class ErrorHygiene:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._throttle = _Throttle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        # The path is the client's: escaped, so it cannot forge or repaint a log line.
        where = f"{printable(scope['method'], 16)} {printable(scope['path'], 80)}"
        try:
            await self.app(scope, receive, tracked)
        except (ClientDisconnect, ConnectionError) as exc:
            # Also what a server reports for a body it could not parse (a bad chunk size):
            # answer in case the client is still there; a gone client never reads it.
            DISCONNECTS.inc()
            if self._throttle.allow():
                log.info("client went away during %s (%s)", where, type(exc).__name__)
            if not started:
                await answer(
                    send,
                    400,
                    error_body("bad_body", "the request body ended early or could not be read"),
                )
        except Exception as exc:
            kind = _body_error(exc)
            ERRORS.labels(kind or "internal").inc()
            if self._throttle.allow():
                if kind:
                    log.info("unreadable request body in %s: %s", where, printable(exc, 200))
                else:
                    log.exception("internal error in %s", where)
            if started:
                return  # nothing more to say on this response; the server closes it
            if kind:
                await answer(
                    send, 400, error_body("bad_body", "the request body could not be read")
                )
            else:
                await answer(
                    send, 500, error_body("internal_error", "the server failed; it is logged")
                )


async def answer(send: Send, status: int, body: bytes) -> None:
    """A JSON error answered straight from ASGI middleware (no route ran), closing the
    connection; nothing if the client is already gone."""
    try:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(body)),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
    except (OSError, RuntimeError):  # the client is gone (the usual case after a disconnect)
        return


def _body_error(exc: Exception) -> str | None:
    """Errors the server raises from `receive()` for a body it cannot parse (granian raises
    its own exception types; their names say "Protocol"/"Body"/"Request")."""
    name = type(exc).__name__
    if any(w in name for w in ("Protocol", "Body", "Request")):
        return "bad_body"
    return None
