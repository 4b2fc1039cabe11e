"""The hand-over benchmark leaves the process as it found it: `bench all` runs the others after
it in the same process, and a leftover pin to one CPU or leaked pipes would skew them."""

import gc
import os

from bench.benchmarks.bench_wakeup import round_trips


def test_round_trips_restore_the_affinity_and_close_their_pipes():
    cpus = sorted(os.sched_getaffinity(0))
    gc.collect()  # clients earlier tests dropped close their descriptors now, not meanwhile
    before_fds = set(os.listdir("/proc/self/fd"))
    for pair in {(cpus[0], cpus[0]), (cpus[0], cpus[-1])}:
        t = round_trips(pair, 0.0, 200)
        assert 0 < t.p50_us <= t.p99_us
        assert t.cpu_us > 0
        assert os.sched_getaffinity(0) == set(cpus)
    # none it opened is left open (another part of the process may close one of its own)
    assert set(os.listdir("/proc/self/fd")) <= before_fds
