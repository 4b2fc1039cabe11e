"""Recurring SRE jobs (e.g. "daily at 04:00 UTC, purge the 1.3 line"): cron expressions in UTC,
read by `croniter`, plus the shorthands `daily@HH:MM` and `hourly@:MM`."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable

from croniter import croniter

from precast.errors import ConfigError

_DAILY = re.compile(r"^daily@(\d{1,2}):(\d{2})$")
_HOURLY = re.compile(r"^hourly@:(\d{2})$")


def parse_schedule(text: str) -> str:
    """A cron expression (5 fields, UTC) from a cron string or a shorthand."""
    s = text.strip()
    m = _DAILY.match(s)
    if m:
        h, mi = int(m.group(1)), int(m.group(2))
        if h > 23 or mi > 59:
            raise ConfigError(f"malformed schedule {text!r}: no such time of day")
        return f"{mi} {h} * * *"
    m = _HOURLY.match(s)
    if m:
        if int(m.group(1)) > 59:
            raise ConfigError(f"malformed schedule {text!r}: minute past 59")
        return f"{int(m.group(1))} * * * *"
    if len(s.split()) != 5 or not croniter.is_valid(s):
        raise ConfigError(
            f"malformed schedule {text!r}: expected a 5-field cron expression in UTC "
            f"(e.g. '0 4 * * *') or daily@HH:MM / hourly@:MM"
        )
    return s


def next_run(expr: str, after_s: float) -> float:
    """The first time strictly after `after_s` (epoch seconds) the expression fires."""
    start = dt.datetime.fromtimestamp(after_s, dt.UTC)
    return croniter(expr, start).get_next(dt.datetime).timestamp()


def run_forever(
    expr: str,
    job: Callable[[], None],
    announce: Callable[[float], None],
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    max_runs: int | None = None,
) -> int:
    """Run `job` at every firing of `expr`; a failed run is reported by `job` and the schedule
    goes on. Sleeps in short steps so Ctrl-C and clock changes are noticed."""
    runs = 0
    while max_runs is None or runs < max_runs:
        due = next_run(expr, clock())
        announce(due)
        while (left := due - clock()) > 0:
            sleep(min(left, 30.0))
        job()
        runs += 1
    return runs
