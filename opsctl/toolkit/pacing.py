"""Rate limits for replays: a fixed rate in records per second, or the original timing of the
records scaled by a speed factor (2.0 = twice as fast as they were first written)."""

from __future__ import annotations

import time
from collections.abc import Callable

from precast.errors import ConfigError

# Sleeping for less than this costs more in wake-up jitter than it buys in accuracy; the
# schedule is absolute, so the skipped sleeps are caught up on the next one.
_MIN_SLEEP_S = 0.002


class ReplaySchedule:
    """Call `wait(ts_ms)` before sending each record. The schedule is absolute (record n is due
    at start + n/rate), so sleeping late or in steps never drifts the long-run rate."""

    def __init__(
        self,
        rate: float | None = None,
        speed: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate is not None and speed is not None:
            raise ConfigError("give either --rate or --speed, not both")
        if rate is not None and not rate > 0:
            raise ConfigError(f"--rate must be above 0 records/s, got {rate:g}")
        if speed is not None and not speed > 0:
            raise ConfigError(f"--speed must be above 0 (1.0 = original timing), got {speed:g}")
        self.rate, self.speed = rate, speed
        self._clock, self._sleep = clock, sleep
        self._t0: float | None = None
        self._ts0: int | None = None
        self.sent = 0
        self.slept_s = 0.0

    @property
    def active(self) -> bool:
        return self.rate is not None or self.speed is not None

    def wait(self, ts_ms: int) -> None:
        now = self._clock()
        if self._t0 is None:
            self._t0, self._ts0 = now, ts_ms
        if self.rate is not None:
            due = self._t0 + self.sent / self.rate
        else:
            assert self.speed is not None and self._ts0 is not None
            due = self._t0 + max(0, ts_ms - self._ts0) / 1000.0 / self.speed
        self.sent += 1
        delay = due - now
        if delay >= _MIN_SLEEP_S:
            self._sleep(delay)
            self.slept_s += delay
