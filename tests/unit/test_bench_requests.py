"""The broker-request benchmark's arithmetic: costs are what a window spends above idle, per
request, and the switch counter sums every thread of a process."""

import os
import threading
import time

import pytest

from bench.benchmarks.bench_requests import Window, context_switches


def test_cost_per_request_subtracts_the_idle_rate_over_the_same_time():
    idle = Window(cpu_s=0.05, switches=100, seconds=2.0)  # 25 ms/s, 50 switches/s
    busy = Window(cpu_s=0.45, switches=2_500, seconds=4.0, requests=800)
    assert busy.per_request_us(idle) == pytest.approx((0.45 - 0.10) / 800 * 1e6)
    assert busy.switches_per_request(idle) == pytest.approx((2_500 - 200) / 800)
    assert Window(0.0, 0, 1.0, 0).per_request_us(idle) < 0  # no requests: no division by zero


def test_context_switches_count_every_thread_and_grow():
    me = os.getpid()
    before = context_switches(me)
    done, leave = threading.Event(), threading.Event()

    def sleeper() -> None:  # each sleep is a voluntary switch of this thread
        for _ in range(20):
            time.sleep(0.001)
        done.set()
        leave.wait(5)  # alive while counted: a finished thread's switches leave /proc

    t = threading.Thread(target=sleeper)
    t.start()
    done.wait(5)
    during = context_switches(me)
    leave.set()
    t.join()
    assert during - before >= 20
    assert context_switches(2**22 + 12345) == 0  # no such process: nothing, no error
