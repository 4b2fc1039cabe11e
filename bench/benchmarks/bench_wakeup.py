"""What one hand-over between two processes costs on this machine, on one CPU and across two.

Every hop of the pipeline is a chain of hand-overs: a Python thread wakes librdkafka's broker
thread, which writes to a socket the broker's network thread wakes on, which queues the request
for a handler thread, and back. On a virtual machine a wake-up that crosses CPUs is an
inter-processor interrupt through the hypervisor; on the 2-core VMs this project runs on it
costs tens of microseconds of CPU instead of a few (docs/workers.md, "Hand-overs across CPUs").
This benchmark measures that directly, with no Kafka in it, so that figures from two machines
can be told apart by the machine.

Two processes pass one byte back and forth through pipes, pinned to the same CPU or to two,
back to back and with 1 ms of idle time before each round trip (a process that waits for the
next event, as the pipeline's processes do at light load). Reported: round-trip time and the
CPU both processes spend per round trip.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

from bench.support.harness import Context, Figure, Report, progress

NAME = "wakeup"
DESCRIPTION = "hand-over between two processes on one CPU vs across CPUs: time and CPU"
SPARE_CPU = (
    "two CPUs nobody else uses (CPUs 0 and 1); anything else running makes both rows slower "
    "but the cross-CPU row more so."
)


@dataclass
class Trips:
    p50_us: float
    p99_us: float
    cpu_us: float  # both processes, per round trip (the parent's wait for its gap included)


def _echo(r: int, w: int, cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    while True:
        b = os.read(r, 1)
        if not b or b == b"q":
            os._exit(0)
        os.write(w, b)


def round_trips(cpus: tuple[int, int], gap_s: float, n: int) -> Trips:
    """`n` round trips between this process on `cpus[0]` and a child on `cpus[1]`."""
    from_parent, to_child = os.pipe()  # (read end, write end)
    from_child, to_parent = os.pipe()
    before = os.sched_getaffinity(0)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        _echo(from_parent, to_parent, cpus[1])
    try:
        os.sched_setaffinity(0, {cpus[0]})
        child0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        mine0 = time.process_time()
        rtts = []
        for _ in range(n):
            if gap_s:
                time.sleep(gap_s)
            t0 = time.perf_counter_ns()
            os.write(to_child, b"x")
            os.read(from_child, 1)
            rtts.append((time.perf_counter_ns() - t0) / 1000)
        mine = time.process_time() - mine0
    finally:
        os.write(to_child, b"q")
        os.waitpid(pid, 0)
        os.sched_setaffinity(0, before)
        for fd in (to_child, from_parent, from_child, to_parent):
            os.close(fd)
    child1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = (child1.ru_utime + child1.ru_stime) - (child0.ru_utime + child0.ru_stime)
    rtts.sort()
    return Trips(
        rtts[len(rtts) // 2],
        rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))],
        1e6 * (mine + child) / n,
    )


def run(ctx: Context) -> Report:
    cpus = sorted(os.sched_getaffinity(0))
    n_busy, n_idle = (2_000, 500) if ctx.quick else (20_000, 3_000)
    pairs = [(cpus[0], cpus[0])] + ([(cpus[0], cpus[1])] if len(cpus) > 1 else [])
    rows, got = [], {}
    for gap, n in ((0.0, n_busy), (0.001, n_idle)):
        for pair in pairs:
            where = "one CPU" if pair[0] == pair[1] else "two CPUs"
            progress(f"wakeup: {n:,} round trips on {where}, {gap * 1000:.0f} ms idle before each")
            t = got[(where, gap)] = round_trips(pair, gap, n)
            rows.append(
                [
                    f"{where}, {'back to back' if not gap else '1 ms idle before each'}",
                    f"{t.p50_us:.1f}",
                    f"{t.p99_us:.1f}",
                    f"{t.cpu_us:.1f}",
                ]
            )
    figures = [
        Figure(
            "wakeup_rtt_p50_us_one_cpu",
            got[("one CPU", 0.0)].p50_us,
            "us",
            "-",
            "pipe round trip, both processes on one CPU, back to back",
        )
    ]
    if len(pairs) > 1:
        same, cross = got[("one CPU", 0.0)], got[("two CPUs", 0.0)]
        figures += [
            Figure(
                "wakeup_rtt_p50_us_two_cpus",
                cross.p50_us,
                "us",
                "-",
                "pipe round trip, one process on each of two CPUs, back to back",
            ),
            Figure(
                "wakeup_cpu_us_per_round_trip_two_cpus",
                cross.cpu_us,
                "us",
                f"one CPU: {same.cpu_us:.1f}",
                "CPU of both processes per round trip (two hand-overs), back to back",
            ),
            Figure(
                "wakeup_two_cpus_vs_one_cpu_cpu_ratio",
                cross.cpu_us / same.cpu_us,
                "ratio",
                "1 where a cross-CPU wake-up is as cheap as a local one",
                "CPU per round trip, two CPUs over one CPU, back to back",
            ),
        ]
    return Report(
        "Hand-overs between processes: one CPU vs two (`python -m bench wakeup`)",
        ["run", "round trip p50 us", "p99 us", "CPU per round trip us (both sides)"],
        rows,
        figures,
        [
            "Two processes pass one byte through a pair of pipes; a round trip is two "
            "hand-overs (two wake-ups). CPU = user + system time of both processes over the run "
            "divided by the round trips; with 1 ms idle it includes the sleeping side's timer "
            "wake-up.",
            "Guest halt polling (the haltpoll cpuidle driver's guest_halt_poll_ns, 0 on this "
            "VM's kernel command line) makes an idle CPU spin before it halts: set to 200 us it "
            "brought the two-CPU back-to-back row to the one-CPU row's cost, but the freshness "
            "pipeline's CPU per event did not move, and its latency moved less than it varies "
            "between runs of one setting (docs/workers.md, 'Hand-overs across CPUs'): the "
            "pipeline's cost per request is not these wake-ups.",
        ],
    )
