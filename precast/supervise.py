"""Background work that never dies silently.

A thread or task that raises is restarted, with the restart counted
(`precast_background_restarts_total{part}`) and logged, after a backoff that doubles up to 30 s.
One that keeps failing (more than `max_restarts` within `window_s`) gives up: the part is marked
failed (`precast_background_failed{part}` = 1, `failure` set, so readiness turns false) and
`on_give_up` runs; its default ends the process with SIGTERM, so the process's supervisor
(systemd, Kubernetes, the stack launcher) starts a fresh one instead of leaving a process that
is up but no longer does its work.

`threading.Thread` daemons and `asyncio` tasks both: `Supervised.thread(...)` and
`Supervised.task(...)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable

from prometheus_client import Counter, Gauge

from precast.hygiene import printable

log = logging.getLogger("precast.supervise")

RESTARTS = Counter(
    "precast_background_restarts_total",
    "restarts of a background thread or task after it raised",
    ["part"],
)
FAILED = Gauge(
    "precast_background_failed",
    "1 when a background thread or task failed too often and gave up (the process ends)",
    ["part"],
)


PR_SET_NAME = 15  # prctl(2)


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` (its first 15 bytes) where the OS shows thread names
    (`top -H`, `/proc/<pid>/task/*/comm`): Python names its threads only for itself."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):  # a name is a convenience
        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def terminate_process(part: str, exc: BaseException) -> None:
    """The default give-up: end this process so that its supervisor starts a fresh one."""
    log.critical("%s failed too often (%s): ending the process", part, printable(exc, 200))
    os.kill(os.getpid(), signal.SIGTERM)


class Supervised:
    """Restart policy and state of one background part; see the module docstring."""

    def __init__(
        self,
        part: str,
        *,
        max_restarts: int = 5,
        window_s: float = 60.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        on_give_up: Callable[[str, BaseException], None] = terminate_process,
    ) -> None:
        self.part = part
        self._max, self._window = max_restarts, window_s
        self._backoff, self._max_backoff = backoff_s, max_backoff_s
        self._on_give_up = on_give_up
        self._failures: deque[float] = deque()
        self.restarts = 0
        self.failure: BaseException | None = None
        FAILED.labels(part).set(0)

    @property
    def healthy(self) -> bool:
        return self.failure is None

    def _failed(self, exc: BaseException) -> float | None:
        """Record one failure; the delay before the restart, or None when giving up."""
        now = time.monotonic()
        self._failures.append(now)
        while self._failures and now - self._failures[0] > self._window:
            self._failures.popleft()
        if len(self._failures) > self._max:
            self.failure = exc
            FAILED.labels(self.part).set(1)
            log.error("%s gave up after %d failures in %.0f s", self.part, self._max, self._window)
            self._on_give_up(self.part, exc)
            return None
        self.restarts += 1
        RESTARTS.labels(self.part).inc()
        delay: float = min(self._max_backoff, self._backoff * 2.0 ** (len(self._failures) - 1))
        log.warning(
            "%s raised %s: %s; restart %d in %.1f s",
            self.part,
            type(exc).__name__,
            printable(exc, 200),
            self.restarts,
            delay,
        )
        return delay

    # -- threads ------------------------------------------------------------------------------
    def thread(self, run: Callable[[], None], stop: threading.Event) -> threading.Thread:
        """A daemon thread that calls `run()` until `stop` is set, restarting it when it raises.
        `run` returning normally while `stop` is clear is a restart too (it should not end)."""

        def loop() -> None:
            name_os_thread(self.part)
            while not stop.is_set():
                try:
                    run()
                    if stop.is_set():
                        return
                    raise RuntimeError("returned while it should run")
                except Exception as exc:  # noqa: BLE001 - the supervisor's whole purpose
                    delay = self._failed(exc)
                    if delay is None or stop.wait(delay):
                        return

        return threading.Thread(target=loop, name=self.part, daemon=True)

    # -- asyncio tasks --------------------------------------------------------------------------
    def task(self, run: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """An asyncio task that awaits `run()` again whenever it raises; cancelling the task
        stops it."""

        async def loop() -> None:
            while True:
                try:
                    await run()
                    raise RuntimeError("returned while it should run")
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the supervisor's whole purpose
                    delay = self._failed(exc)
                    if delay is None:
                        return
                    await asyncio.sleep(delay)

        return asyncio.create_task(loop(), name=self.part)
