"""What one request costs the local Kafka broker on this machine: CPU and context switches per
produce request and per fetch response, with nothing else running.

The freshness pipeline's broker work follows requests, not records (docs/workers.md, "Where the
time goes"): each produce request of the fleet completes the worker's parked fetch, the worker's
batch becomes a produce request, which completes the read API's parked fetch. So at any rate
above one request per linger window the broker answers at least four requests for every
produce request of the fleet, and what one request costs on the machine sets a CPU floor under
the whole pipeline that no setting of ours moves. This benchmark measures that cost directly, so
that two machines can be told apart by it (as `bench wakeup` tells them apart by hand-overs).

One producer sends one 100-byte record per request (`flush()` after each) at a fixed rate; a
consumer in this process, when there is one, keeps a fetch parked (`fetch.min.bytes` 1, as the
pipeline's readers do), so every produce request also completes one fetch. The broker's CPU
(all threads, /proc) above its idle CPU, divided by the requests, is the cost per request; the
fetch row's cost is what the consumer adds over the producer alone. The consumer reads one
partition, or 36 (6 topics x 6 partitions, what one worker reads) with records in one of them.
Rows are interleaved over rounds and the median of the rounds reported.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bench.support.harness import Context, Figure, Report, listener_pid, on_one_core, progress
from bench.support.procstat import cpu_s

NAME = "requests"
DESCRIPTION = "what one produce request and one fetch response cost the local broker: CPU, switches"
SPARE_CPU = (
    "the broker's CPU and a second one for this process; nothing else running (another "
    "process's requests to the broker count as this benchmark's)."
)
TOPICS, PARTITIONS = 6, 6


def context_switches(pid: int | None) -> int:
    """Voluntary + involuntary context switches of every live thread of a process."""
    total = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:  # voluntary_ctxt_switches: and nonvoluntary_ctxt_switches:
                    if "ctxt_switches:" in line:
                        total += int(line.split()[1])
    except (OSError, ValueError):
        pass
    return total


@dataclass
class Window:
    """The broker's CPU and switches over a stretch of time, and the requests sent in it."""

    cpu_s: float
    switches: int
    seconds: float
    requests: int = 0

    def per_request_us(self, idle: Window) -> float:
        """CPU per request above what the broker spends idle over the same time."""
        above = self.cpu_s - idle.cpu_s / idle.seconds * self.seconds
        return 1e6 * above / max(1, self.requests)

    def switches_per_request(self, idle: Window) -> float:
        above = self.switches - idle.switches / idle.seconds * self.seconds
        return above / max(1, self.requests)


def measure(broker: int | None, seconds: float, work=None) -> Window:
    """Broker CPU and switches while `work(deadline)` runs (or nothing); `work` returns the
    requests it sent."""
    c0, s0, t0 = cpu_s(broker), context_switches(broker), time.monotonic()
    n = 0
    if work is None:
        time.sleep(seconds)
    else:
        n = work(t0 + seconds)
    el = time.monotonic() - t0
    return Window(cpu_s(broker) - c0, context_switches(broker) - s0, el, n)


class Rig:
    def __init__(self, ctx: Context) -> None:
        from precast.kafka import Admin, Producer

        self.ctx = ctx
        self.admin = Admin(ctx.kafka_settings())
        self.topics = [ctx.unique(f"requests{i}") for i in range(TOPICS)]
        for t in self.topics:
            self.admin.create_topic(t, PARTITIONS)
        unbatched: dict[str, Any] = {"linger.ms": 0}  # one record, one request
        self.producer = Producer(ctx.kafka_settings(), **unbatched)
        self.producer.produce(self.topics[0], b"k", b"warm", partition=0)
        self.producer.flush()

    def produce_at(self, rate: float):
        def work(deadline: float) -> int:
            n, t0, p = 0, time.monotonic(), self.producer
            while time.monotonic() < deadline:
                p.produce(self.topics[0], b"k", b"x" * 100, partition=0)
                p.flush()
                n += 1
                wait = t0 + n / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            return n

        return work

    @contextlib.contextmanager
    def reader(self, partitions: int) -> Iterator[None]:
        """Inside: a consumer of `partitions` partitions keeps a fetch parked, from a thread of
        this process; its assignment and first fetches happen before anything is measured."""
        from precast.kafka import OFFSET_END, Consumer, TopicPartitionOffset

        c = Consumer(self.ctx.kafka_settings(), self.ctx.unique("requests"))
        parts = [
            TopicPartitionOffset(t, p, OFFSET_END) for t in self.topics for p in range(PARTITIONS)
        ]
        c.assign(parts[:partitions])
        stop = threading.Event()

        def read() -> None:
            while not stop.is_set():
                c.consume_available(1000, 0.1)

        thread = threading.Thread(target=read, name="bench-requests-reader", daemon=True)
        thread.start()
        time.sleep(1.0)  # assigned, offsets looked up, a fetch parked
        try:
            yield
        finally:
            stop.set()
            thread.join()
            c.close()

    def close(self) -> None:
        self.producer.flush()
        self.admin.delete_topics(self.topics)


CASES = (
    ("produce requests, 200/s", "produce", 1, 200),
    ("produce requests, 1,000/s", "produce", 1, 1000),
    ("produce + fetch of 1 partition, 200/s", "fetch", 1, 200),
    ("produce + fetch of 36 partitions, 200/s", "fetch", 36, 200),
)


def _sweep(rig: Rig, broker: int, seconds: float, rounds: int, where: str) -> dict[str, Any]:
    got: dict[str, list[tuple[Window, Window]]] = {name: [] for name, *_ in CASES}
    for r in range(rounds):
        for name, kind, parts, rate in CASES:
            progress(f"requests ({where}): round {r + 1}/{rounds}: idle, then {name}")
            # With a reader, idle is measured with its fetch parked too: what is left is what
            # the produce requests and the fetch responses they complete cost.
            with rig.reader(parts) if kind == "fetch" else contextlib.nullcontext():
                idle = measure(broker, seconds / 2)
                got[name].append((idle, measure(broker, seconds, rig.produce_at(rate))))
    # (idle with no reader: the fetch rows' idle windows have one parked)
    out: dict[str, Any] = {
        "idle_ms": statistics.median(
            1000 * i.cpu_s / i.seconds
            for name, kind, *_ in CASES
            if kind == "produce"
            for i, _ in got[name]
        )
    }
    for name, *_ in CASES:
        out[name] = (
            statistics.median(w.requests / w.seconds for _, w in got[name]),
            statistics.median(w.per_request_us(i) for i, w in got[name]),
            statistics.median(w.switches_per_request(i) for i, w in got[name]),
        )
    out["produce"] = out[CASES[0][0]][1]
    out["fetch1"] = out[CASES[2][0]][1] - out["produce"]
    out["fetch36"] = out[CASES[3][0]][1] - out["produce"]
    return out


def run(ctx: Context) -> Report:
    broker = listener_pid(int(ctx.bootstrap_servers.rsplit(":", 1)[1]))
    if broker is None:
        raise SystemExit("bench requests: no local broker process found (a remote broker?)")
    seconds, rounds = (4.0, 1) if ctx.quick else (10.0, 3)
    rig = Rig(ctx)
    # A broker started a moment ago compiles its request paths for the first minute or so (a
    # run on a broker 20 s old gave 810 µs per fetch response, 535 after this warm-up).
    progress("requests: warming the broker up (produce and fetch at 1,000/s, not measured)")
    with rig.reader(TOPICS * PARTITIONS):
        rig.produce_at(1000)(time.monotonic() + (5.0 if ctx.quick else 30.0))
    time.sleep(2.0)  # topic creation's and the warm-up's own work settles
    modes = [("all cores", False)] + ([("one core", True)] if (os.cpu_count() or 1) > 1 else [])
    res: dict[str, dict[str, Any]] = {}
    try:
        for where, pinned in modes:
            with on_one_core(ctx.bootstrap_servers, enabled=pinned):
                res[where] = _sweep(rig, broker, seconds, rounds, where)
    finally:
        rig.close()
    rows = []
    for where, _ in modes:
        m = res[where]
        rows += [
            [f"{where}: {name}", f"{m[name][0]:,.0f}", f"{m[name][1]:,.0f}", f"{m[name][2]:.1f}"]
            for name, *_ in CASES
        ]
        rows += [
            [f"{where}: of it, one fetch response, 1 partition", "-", f"{m['fetch1']:,.0f}", "-"],
            [
                f"{where}: of it, one fetch response, 36 partitions",
                "-",
                f"{m['fetch36']:,.0f}",
                "-",
            ],
        ]
    cond = f"one record per request, rounds {rounds} x {seconds:g} s, median; idle subtracted"
    figures = []
    for where, _ in modes:
        m, tail = res[where], "" if where == "all cores" else "_one_core"
        on = "" if where == "all cores" else "; this process and the broker on CPU 0"
        # Two produce requests and two fetch responses per produce request of the fleet (the
        # fleet's and the worker's produce, the worker's and the API's fetch), 200 a second:
        # the device producers' 5 ms linger at any rate above 200 events/s.
        floor = 200 * (2 * m["produce"] + m["fetch36"] + m["fetch1"]) / 1e6
        figures += [
            Figure(
                f"broker_cpu_us_per_produce_request{tail}",
                m["produce"],
                "us",
                "-",
                cond + ", 200/s" + on,
            ),
            Figure(
                f"broker_cpu_us_per_fetch_response{tail}",
                m["fetch1"],
                "us",
                f"36 partitions: {m['fetch36']:.0f}",
                cond + ", above the produce request that completes it, 1 partition" + on,
            ),
            Figure(
                f"broker_floor_cores_at_200_fleet_requests_per_s{tail}",
                floor,
                "cores",
                "the broker's share of the freshness pipeline at 200 fleet requests/s",
                "2 produce requests + a 36-partition fetch + a 1-partition fetch per fleet "
                "request (fleet -> worker -> read API), above idle" + on,
            ),
        ]
    figures.append(
        Figure(
            "broker_idle_cpu_ms_per_s",
            res["all cores"]["idle_ms"],
            "ms/s",
            "-",
            "no client sending, all cores",
        )
    )
    return Report(
        "What one request costs the local broker (`python -m bench requests`)",
        ["run", "requests/s", "broker CPU us per request", "broker switches per request"],
        rows,
        figures,
        [
            "CPU = user + system time of every broker thread (/proc) over the window, less the "
            "idle rate measured just before it; switches likewise from each thread's "
            "voluntary + involuntary context switches.",
            "The floor figure multiplies the per-request costs by the requests the freshness "
            "pipeline needs at any rate above 200 events/s with the device producers' 5 ms "
            "linger (one fleet request per window, each completing the worker's fetch, whose "
            "batch is one produce request that completes the read API's fetch).",
            "One core: this process and every broker thread pinned to CPU 0 (taskset), so each "
            "hand-over inside the broker and to the client stays on one CPU; compare "
            "`bench wakeup`.",
        ],
    )
