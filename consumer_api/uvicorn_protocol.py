"""uvicorn's httptools protocol with a request-head deadline. uvicorn closes idle keep-alive
connections but never one that connected and sends nothing, or sends its headers a byte at a
time (slowloris); granian has `header_read_timeout` for that, this gives uvicorn the same."""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from consumer_api.reaper import REAPED


def guarded_protocol(header_timeout_s: float) -> type[HttpToolsProtocol]:
    class Guarded(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout_s, self._head_expired)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_expired(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                REAPED.inc()
                self.transport.close()

    return Guarded
