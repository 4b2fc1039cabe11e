"""Frames between a materializer and its gate process (consumer_api.materialize.gate): a 4-byte
big-endian length, then a pickle of a tuple.

Pickle, because the two ends are this code from one install and the parent started the child
on a pipe of its own: nothing else writes it (what the topic holds crosses it only as bytes
inside a frame, never as a pickle). Reads wait with `select`, so a reader can time out between
frames; a frame is read whole once it has begun (the writer writes each one whole)."""

from __future__ import annotations

import os
import pickle
import select
import struct
from typing import Any

HEADER = struct.Struct(">I")
CHUNK = 1 << 20


class GateClosed(ConnectionError):
    """The other end is gone (it exited, was killed, or closed its side)."""


class Pipe:
    """One end: frames read from `rfd`, written to `wfd` (raw file descriptors)."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd

    def send(self, frame: tuple[Any, ...]) -> None:
        data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(HEADER.pack(len(data)) + data)
        try:
            while view:
                view = view[os.write(self.wfd, view) :]
        except (BrokenPipeError, OSError) as exc:
            raise GateClosed(f"pipe closed: {exc}") from None

    def ready(self, timeout: float) -> bool:
        """True when a frame (or the end) can be read now or within `timeout` seconds."""
        return bool(select.select([self.rfd], [], [], max(0.0, timeout))[0])

    def recv(self) -> tuple[Any, ...]:
        (size,) = HEADER.unpack(self._exactly(HEADER.size))
        return pickle.loads(self._exactly(size))

    def _exactly(self, n: int) -> bytes:
        parts: list[bytes] = []
        while n:
            try:
                part = os.read(self.rfd, min(n, CHUNK))
            except OSError as exc:
                raise GateClosed(f"pipe closed: {exc}") from None
            if not part:
                raise GateClosed("pipe closed by the other end")
            parts.append(part)
            n -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)
