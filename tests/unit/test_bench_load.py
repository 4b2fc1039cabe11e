"""The benchmarks' paced load: it sends the asked rate, and it wakes once per step, not once per
record: the freshness sweep's load wakes once per linger window of its producer, because on a
small VM every wake-up of the load is CPU taken from the pipeline under test."""

from __future__ import annotations

import time

import pytest

from bench.support.loads.fleet_load import paced
from producers.publisher import TraceIds
from producers.simulator import Fleet


class Counting:
    """Stands in for the producer; counts what the pacing loop hands it (no Kafka here)."""

    def __init__(self) -> None:
        self.records, self.polls = 0, 0

    def produce(self, topic, key, value, headers) -> None:
        self.records += 1

    def poll(self, timeout: float) -> None:  # once per step of the loop
        self.polls += 1

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("step_s", [0.001, 0.005])
def test_the_load_keeps_its_rate_and_wakes_once_per_step(step_s):
    fleet, trace, p = Fleet(50, seed=1), TraceIds(seed=1).new, Counting()
    rate, seconds = 4_000, 0.5
    t0 = time.monotonic()
    sent = paced(p, fleet, trace, "t", 50, rate, seconds, None, step_s=step_s)
    took = time.monotonic() - t0
    assert sent == p.records
    assert rate * seconds * 0.9 <= sent <= rate * took * 1.1  # the asked rate, not a burst
    steps = seconds / step_s
    assert 0.8 * steps <= p.polls <= 1.2 * steps + 1  # one wake-up per step
    assert sent / p.polls == pytest.approx(rate * step_s, rel=0.05)
