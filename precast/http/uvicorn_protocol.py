"""uvicorn's httptools protocol with a request-head deadline and size cap. uvicorn closes idle
keep-alive connections but never one that connected and sends nothing, or sends its headers a
byte at a time (slowloris); granian has `header_read_timeout` for that, this gives uvicorn the
same. httptools also buffers a request head of any size: past `MAX_HEAD_BYTES` the connection
gets 431 and is closed (granian/hyper caps heads on its own)."""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from precast.http.reaper import REAPED

MAX_HEAD_BYTES = 64 * 1024
_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
    b"content-length: 71\r\nconnection: close\r\n\r\n"
    b'{"error":"header_too_large","detail":"the request head passed 64 KiB"}\n'
)


class Guarded(HttpToolsProtocol):
    """The protocol; `guarded_protocol` makes a subclass with the limits set."""

    header_timeout_s = 15.0
    max_head_bytes = MAX_HEAD_BYTES
    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self._head_timer is not None:  # still reading a request head
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._disarm()
                if not self.transport.is_closing():
                    self.transport.write(_TOO_LARGE)
                    self.transport.close()
                return
        super().data_received(data)

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
            self._head_bytes = 0
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            REAPED.inc()
            self.transport.close()


def guarded_protocol(
    header_timeout_s: float, max_head_bytes: int = MAX_HEAD_BYTES
) -> type[HttpToolsProtocol]:
    return type(
        "Guarded",
        (Guarded,),
        {"header_timeout_s": header_timeout_s, "max_head_bytes": max_head_bytes},
    )
