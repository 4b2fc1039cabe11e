"""Hostile-client load for the read API, bounded and loopback only: `precast-api` as its own
process, idle and slow sockets, event streams opened together, GET latency from a keep-alive
client. Used by `python -m bench hostile` and by tests/integration/test_api_hostile.py.

Every socket goes to 127.0.0.0/8. Floods larger than the ephemeral port range of one source
address spread over source addresses 127.0.0.2, .3, ... (Linux routes all of 127/8 to lo)."""

from __future__ import annotations

import http.client
import os
import re
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np

from bench.support.harness import ROOT

_PER_SOURCE = 5_000  # well inside the default ephemeral range (32768-60999) of one address
_IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
_LINGER_RESET = struct.pack("ii", 1, 0)


def raise_fd_limit() -> int:
    """This (client) process holds every flood socket too: soft limit up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 65_536)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class ApiProcess:
    """`python -m consumer_api.cli` on a port, with PRECAST_* from `env`; logs to a file."""

    def __init__(self, port: int, env: dict[str, str]) -> None:
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self.log = Path(tempfile.mkdtemp(prefix="precast-hostile-")) / "api.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "consumer_api.cli", "--port", str(port)],
                env={**os.environ, **env},
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"precast-api exited: {self.log.read_text()[-2000:]}")
            try:
                if get(self.port, "/readyz", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("precast-api not ready in time")

    def metric(self, name: str, labels: str = "") -> float:
        text = get(self.port, "/metrics", timeout=10)[1].decode()
        m = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+-]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@contextmanager
def api_process(port: int, env: dict[str, str]) -> Iterator[ApiProcess]:
    api = ApiProcess(port, env)
    try:
        api.wait_ready()
        yield api
    finally:
        api.stop()


def get(
    port: int, path: str, headers: dict[str, str] | None = None, timeout: float = 5.0
) -> tuple[int, bytes, dict[str, str]]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read(), {k.lower(): v for k, v in r.getheaders()}
    finally:
        c.close()


def _source(i: int) -> tuple[str, int]:
    return (f"127.0.0.{2 + i // _PER_SOURCE}", 0)


def connect(port: int, i: int, timeout: float = 10.0) -> socket.socket:
    """A loopback connection from source address number `i // 5000`. The port is chosen at
    connect time (IP_BIND_ADDRESS_NO_PORT), so earlier rounds' sockets never exhaust it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.IPPROTO_IP, _IP_BIND_ADDRESS_NO_PORT, 1)
        s.bind(_source(i))
        s.settimeout(timeout)
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        raise
    return s


def open_idle(port: int, n: int, first_bytes: bytes = b"") -> list[socket.socket]:
    """`n` connections that send `first_bytes` (nothing: idle; part of a head: slow) and wait."""
    socks = []
    for i in range(n):
        s = connect(port, i)
        if first_bytes:
            s.sendall(first_bytes)
        socks.append(s)
    return socks


def still_open(socks: list[socket.socket]) -> int:
    """How many of `socks` the server has not closed (no EOF, no reset, nothing to read)."""
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            n += s.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def close_all(socks: list[socket.socket]) -> None:
    """Close with a reset: thousands of flood sockets must not sit in TIME_WAIT afterwards."""
    for s in socks:
        with suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        s.close()


def latencies_ms(port: int, path: str, n: int, headers: dict[str, str] | None = None) -> np.ndarray:
    """`n` GETs one after another on one keep-alive connection; each one's time in ms."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out = np.empty(n)
    try:
        for i in range(n):
            t0 = time.perf_counter()
            c.request("GET", path, headers=headers or {})
            r = c.getresponse()
            r.read()
            out[i] = (time.perf_counter() - t0) * 1000
            if r.status != 200:
                raise RuntimeError(f"GET {path}: {r.status}")
    finally:
        c.close()
    return out


def open_streams(
    port: int, n: int, path: str, headers: dict[str, str] | None = None, first: int = 0
) -> tuple[list[int], list[socket.socket]]:
    """Open `n` event streams together: every request is sent before any answer is read, so
    the server sees them concurrently. Returns each one's status and the sockets (still open)."""
    head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in (headers or {}).items()
    )
    socks = []
    for i in range(n):
        socks.append(connect(port, first + i, timeout=30))
    for s in socks:
        s.sendall(head.encode() + b"\r\n")
    statuses = []
    for s in socks:
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        m = re.match(rb"HTTP/1\.1 (\d{3})", buf)
        statuses.append(int(m.group(1)) if m else 0)
    return statuses, socks
