"""The hand-over benchmark leaves the process as it found it: `bench all` runs the others after
it in the same process, and a leftover pin to one CPU or leaked pipes would skew them."""

import json
import subprocess
import sys

from tests.conftest import ROOT

# In a fresh interpreter: in the suite's own process, Kafka clients earlier tests left behind
# open and close sockets and wake-up pipes of their own while they reconnect.
CHECK = """
import json, os
from bench.benchmarks.bench_wakeup import round_trips
cpus = sorted(os.sched_getaffinity(0))
before = sorted(os.listdir("/proc/self/fd"))
out = []
for pair in sorted({(cpus[0], cpus[0]), (cpus[0], cpus[-1])}):
    t = round_trips(pair, 0.0, 200)
    out.append([t.p50_us, t.p99_us, t.cpu_us, sorted(os.sched_getaffinity(0)) == cpus])
print(json.dumps({"rounds": out, "before": before, "after": sorted(os.listdir("/proc/self/fd"))}))
"""


def test_round_trips_restore_the_affinity_and_close_their_pipes():
    done = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for p50, p99, cpu, affinity_restored in seen["rounds"]:
        assert 0 < p50 <= p99
        assert cpu > 0
        assert affinity_restored
    assert seen["after"] == seen["before"]  # no pipe left open
