"""Process bookkeeping for the local stack: pid files, ports, start/stop of detached servers."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from precast.errors import StackError


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port_block(count: int, *, bus_offset: int = 0, low: int = 26_000) -> int:
    """A base port with `count` consecutive free ports (and, with `bus_offset`, each port +
    `bus_offset` free too: Redis Cluster's bus), for private stacks in tests and benchmarks.
    Keep `low` (+ bus_offset) below 32768, where the kernel hands out client ports."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(low, low + 5_000)
        ports = [base + i for i in range(count)]
        if bus_offset:
            ports += [p + bus_offset for p in ports]
        if all(_bindable(p) for p in ports):
            return base
    raise StackError(f"no {count} consecutive free ports from {low}")


# Servers started by this process: kept so they are reaped on stop (and not reported by
# Python as "still running" when the Popen object would otherwise be collected).
_children: dict[int, subprocess.Popen] = {}


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


class ManagedProcess:
    """A server we started, remembered by a pid file. `marker` must appear in its command line,
    so a recycled pid is never mistaken for ours (and never signalled)."""

    def __init__(self, name: str, pid_file: Path, marker: str) -> None:
        self.name, self.pid_file, self.marker = name, pid_file, marker

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        if self.marker in _cmdline(pid) and not _is_zombie(pid):
            return pid
        return None

    def start(
        self, argv: list[str], log_file: Path, cwd: Path, env: dict[str, str] | None = None
    ) -> int:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "ab") as log:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise StackError(f"cannot start {self.name}: {exc}") from None
        _children[proc.pid] = proc
        self.pid_file.write_text(f"{proc.pid}\n")
        return proc.pid

    def stop(self, timeout: float = 30.0, hard: bool = False) -> bool:
        """Stop our process; True if one was running. SIGTERM first, SIGKILL after `timeout`."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pid() is not None:
            _reap(pid)
            time.sleep(0.1)
        if self.pid() is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while self.pid() is not None:
                _reap(pid)
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
        return True

    def exited_early(self) -> bool:
        # Right after the fork, before exec, /proc/<pid>/cmdline is empty and pid() reads None:
        # for a child of ours, ask the Popen object instead of guessing from /proc.
        try:
            child = _children.get(int(self.pid_file.read_text().strip()))
        except (OSError, ValueError):
            child = None
        if child is not None:
            return child.poll() is not None
        return self.pid_file.exists() and self.pid() is None


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our child (tests start stacks in-process)."""
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _children[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:] if line.strip())


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """Whether `url` answers 200: the health check of the stack's HTTP servers."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_healthy(
    healthy: Callable[[float], bool], proc: ManagedProcess, timeout: float, name: str, log: Path
) -> None:
    """Wait until `healthy` answers, or raise with the log's tail when the process exits or
    `timeout` passes."""
    deadline = time.monotonic() + timeout
    while not healthy(1.0):
        if proc.exited_early() or time.monotonic() > deadline:
            raise StackError(f"{name} not ready: {tail(log, 3)}")
        time.sleep(0.2)
