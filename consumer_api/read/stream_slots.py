"""Slots for event streams (/v1/stream and the board's stream): one per client allowance and
one of the replica's `SSE_MAX_STREAMS`, taken in the same step as their checks (on the event
loop, no await in between, so concurrent opens cannot overrun the cap) and given back when the
response ends, however it ends (finished, the client gone, or never started)."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from consumer_api.edge.client_limits import retry_after
from consumer_api.edge.error_bodies import error
from consumer_api.read.service import Service


class HeldStream(StreamingResponse):
    """An event stream that runs `release` when its response ends."""

    def __init__(
        self, content: AsyncIterable[bytes], release: Callable[[], None], **kw: Any
    ) -> None:
        super().__init__(content, **kw)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def open_stream(svc: Service, request: Request, events: AsyncIterable[bytes]) -> Response:
    """`events` as a held event stream, or the 429/503 answer when no slot is free (then
    `events`, an async generator not yet started, is simply dropped: it has run nothing)."""
    limits, hub, opts = svc.limits, svc.hub, svc.options
    keys = limits.keys(request)
    if wait := limits.open_stream(keys):
        return error(
            429,
            "too_many_streams_for_client",
            f"this client already has {opts.client_max_streams} event streams open",
            headers={"Retry-After": retry_after(wait)},
        )
    if not hub.reserve():
        limits.close_stream(keys)
        return error(
            503,
            "too_many_streams",
            f"this replica already serves {opts.sse_max_streams} event streams; "
            "retry later or use another replica",
            headers={"Retry-After": "5"},
        )

    def release() -> None:
        hub.release()
        limits.close_stream(keys)

    return HeldStream(
        events,
        release,
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )
