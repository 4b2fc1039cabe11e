"""Closes connections that connected and never sent a byte, for granian.

Granian (hyper) times a request head only from its first byte, so a socket that connects and
stays silent is held for ever: enough of them take every connection slot. uvicorn gets a head
deadline from precast.http.uvicorn_protocol; for granian, a thread looks at this process's own
sockets on the API port every few seconds and shuts down those that have received nothing for
longer than `header_timeout_s` (the kernel's TCP_INFO: bytes received, ms since the last data).
Event streams and keep-alive connections have received their request, so they are never
touched; shutdown() on a duplicate descriptor ends the connection for the server too, which
then closes its own descriptor as on any client hang-up. Linux only (elsewhere it does nothing)."""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading

from prometheus_client import Counter

from precast.http.parts import PARTS
from precast.supervise import Supervised

REAPED = Counter(
    "precast_api_idle_connections_closed",
    "connections closed because they sent nothing within PRECAST_API__HEADER_TIMEOUT_S",
)
_TCP_ESTABLISHED = 1
_INFO_LEN = 232  # struct tcp_info up to tcpi_bytes_received and beyond (Linux >= 4.1)


def silent_for_ms(info: bytes) -> int | None:
    """ms since connect for an established socket that has received no byte, else None."""
    if len(info) < 136 or info[0] != _TCP_ESTABLISHED:
        return None
    last_data_recv = struct.unpack_from("I", info, 52)[0]
    bytes_received = struct.unpack_from("Q", info, 128)[0]
    return last_data_recv if bytes_received == 0 else None


def sweep(port: int, older_than_ms: int, settled: set[str] | None = None) -> int:
    """One pass over /proc/self/fd; returns how many connections were shut down. `settled`
    (socket inodes known to be another port's or to have received bytes: that never changes)
    is kept between passes so that each pass looks only at the sockets still in question."""
    settled = set() if settled is None else settled
    closed = 0
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    seen = set()
    for name in fds:
        fd = int(name)
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not link.startswith("socket:"):
            continue
        seen.add(link)
        if link in settled:
            continue
        verdict = _check(fd, port, older_than_ms)
        if verdict == "closed":
            closed += 1
        elif verdict == "settled":
            settled.add(link)
    settled.intersection_update(seen)  # forget sockets that are gone
    if closed:
        REAPED.inc(closed)
    return closed


def _check(fd: int, port: int, older_than_ms: int) -> str:
    try:
        dup = os.dup(fd)
    except OSError:
        return "gone"
    try:
        s = socket.socket(fileno=dup)
    except OSError:
        os.close(dup)
        return "settled"
    with s:
        try:
            if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                return "settled"
            if s.getsockname()[1] != port:
                return "settled"
            info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _INFO_LEN)
            if info[0] != _TCP_ESTABLISHED:
                return "open"  # the listener, or closing: look again next time
            age = silent_for_ms(info)
            if age is None:
                return "settled"  # it has sent its request: the server's timers own it
            if age > older_than_ms:
                s.shutdown(socket.SHUT_RDWR)
                return "closed"
            return "open"
        except OSError:
            return "open"


class Reaper:
    """The sweeps on a supervised thread: a pass that raises is a counted restart
    (precast.supervise), one that keeps raising turns readiness false and ends the process."""

    def __init__(
        self, port: int, header_timeout_s: float, supervised: Supervised | None = None
    ) -> None:
        self.port, self.timeout_ms = port, int(header_timeout_s * 1000)
        self.every_s = max(0.5, min(5.0, header_timeout_s / 3))
        self._stop = threading.Event()
        self._settled: set[str] = set()
        self.supervised = supervised or Supervised("idle-reaper")
        self._thread = self.supervised.thread(self._run, self._stop)

    def start(self) -> Reaper:
        if sys.platform == "linux":
            PARTS.append(self.supervised)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self.supervised in PARTS:
            PARTS.remove(self.supervised)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            sweep(self.port, self.timeout_ms, self._settled)
