"""A global rate limit for a loop that sends records in chunks."""

from __future__ import annotations

import time


class RateLimiter:
    """`wait(n)` blocks until sending n more records keeps the long-run rate at `rate`/s.
    After a stall (e.g. backpressure while a broker is down) it does not burst to catch up by
    more than one second's worth: a rate limit protects the cluster, it is not a quota."""

    def __init__(self, rate: float, clock=time.monotonic, sleep=time.sleep) -> None:
        self.rate, self._clock, self._sleep = rate, clock, sleep
        self._start = clock()
        self._sent = 0.0

    def wait(self, n: int) -> None:
        if self.rate <= 0:
            return
        elapsed = self._clock() - self._start
        if elapsed * self.rate - self._sent > self.rate:  # more than 1 s of unused budget
            self._sent = elapsed * self.rate - self.rate
        self._sent += n
        ahead = self._sent / self.rate - elapsed
        if ahead > 0:
            self._sleep(ahead)
