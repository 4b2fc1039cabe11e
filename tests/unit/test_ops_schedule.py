"""Purge schedules: cron in UTC and the daily/hourly shorthands, run by a fake clock."""

from __future__ import annotations

import datetime as dt

import pytest

from opsctl.toolkit.schedule import next_run, parse_schedule, run_forever
from precast.errors import ConfigError


def ts(*a: int) -> float:
    return dt.datetime(*a, tzinfo=dt.UTC).timestamp()


def test_shorthands_and_cron():
    assert parse_schedule("daily@04:00") == "0 4 * * *"
    assert parse_schedule("daily@4:30") == "30 4 * * *"
    assert parse_schedule("hourly@:15") == "15 * * * *"
    assert parse_schedule("*/10 * * * 1-5") == "*/10 * * * 1-5"
    for bad in (
        "daily@25:00",
        "daily@04:60",
        "hourly@:99",
        "every day",
        "0 4 * *",
        "0 4 * * * *",
        "",
    ):
        with pytest.raises(ConfigError, match="malformed schedule"):
            parse_schedule(bad)


def test_next_run_is_utc_and_strictly_later():
    expr = parse_schedule("daily@04:00")
    assert next_run(expr, ts(2025, 1, 1, 3, 59)) == ts(2025, 1, 1, 4, 0)
    assert next_run(expr, ts(2025, 1, 1, 4, 0)) == ts(2025, 1, 2, 4, 0)
    assert next_run(expr, ts(2025, 12, 31, 5, 0)) == ts(2026, 1, 1, 4, 0)


def test_run_forever_fires_at_each_time():
    now = [ts(2025, 3, 1, 12, 0)]
    fired, announced = [], []

    def sleep(s: float) -> None:
        assert 0 < s <= 30.0  # short steps, so a stop is noticed
        now[0] += s

    runs = run_forever(
        parse_schedule("daily@04:00"),
        lambda: fired.append(now[0]),
        announced.append,
        clock=lambda: now[0],
        sleep=sleep,
        max_runs=3,
    )
    assert runs == 3
    assert fired == [ts(2025, 3, 2, 4, 0), ts(2025, 3, 3, 4, 0), ts(2025, 3, 4, 4, 0)]
    assert announced == fired
