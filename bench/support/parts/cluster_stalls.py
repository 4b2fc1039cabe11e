"""Which process stalled after a broker kill. Every 250 ms the watch reads what each stage of the
answer path has done so far: the workers' records consumed, the time their loops spent waiting
for the broker to take their outputs (a flush before a commit, backpressure), the API replica's
prediction records read, and the benchmark's own tails (its load arriving on the inputs topic,
answers arriving on the predictions topic). A stage stalled for as long as it went without
progress after the kill; the stall named is the first stage along the path that stood still for
at least half the bound (what stops upstream stops everything downstream of it)."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

SAMPLE_S = 0.25
BOUND_S = 10.0  # the bound on answers resuming after any broker kill

# Along the answer path. "brokers": until the controller fences the dead node (its partitions
# get new leaders and it leaves every ISR) no write with acks=all completes on any partition,
# so every stage after it stands still too. "worker produce" before "worker consume": a worker
# loop that waits for the broker to take its outputs consumes nothing meanwhile.
ORDER = ("brokers", "bench load", "worker produce", "worker consume", "API reader", "bench reader")


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_total(port: int, name: str, labels: dict[str, str] | None = None) -> float | None:
    """The sum of a metric's samples (those matching `labels`) on a process's /metrics; None
    when it does not answer. Only the metric's own lines are parsed: prometheus_client's full
    parser over a worker's histograms, three processes every 250 ms, took the GIL from the
    benchmark's own load and tails, whose timing is measured."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            text = r.read().decode()
    except OSError:
        return None
    total, want = 0.0, labels or {}
    for line in text.splitlines():
        rest = line[len(name) :] if line.startswith(name) else None
        if rest is None or not rest or rest[0] not in "{ ":
            continue
        have = dict(_LABEL.findall(rest[: rest.rfind("}") + 1])) if rest[0] == "{" else {}
        if all(have.get(k) == v for k, v in want.items()):
            total += float(rest.rsplit(None, 1)[-1])
    return total


class StallWatch(threading.Thread):
    """Samples `counters` (stage -> a function returning a count that grows with progress) and
    `waits` (stage -> a function returning seconds spent waiting, which grows at wall speed while
    the stage is blocked) every SAMPLE_S until `done` is set."""

    def __init__(
        self,
        counters: dict[str, Callable[[], float | None]],
        waits: dict[str, Callable[[], float | None]],
    ) -> None:
        super().__init__(daemon=True)
        self.counters, self.waits = counters, waits
        self.series: dict[str, list[tuple[float, float]]] = {k: [] for k in [*counters, *waits]}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for name, read in [*self.counters.items(), *self.waits.items()]:
                value = read()
                if value is not None:
                    self.series[name].append((time.monotonic(), value))
            self.done.wait(SAMPLE_S)

    def idle(self, name: str, start: float, end: float) -> float | None:
        """Longest stretch in [start, end] in which the counter `name` did not grow (None
        without samples)."""
        xs = [(t, v) for t, v in self.series[name] if t >= start - SAMPLE_S]
        if len(xs) < 2:
            return None
        pairs = zip(xs, xs[1:], strict=False)
        grew = [b[0] for a, b in pairs if b[1] > a[1] and start <= b[0] <= end]
        times = [start, *grew, end]
        return max(b - a for a, b in zip(times, times[1:], strict=False))

    def blocked(self, name: str, start: float, end: float) -> float | None:
        """Longest stretch in [start, end] in which the wait counter `name` grew at (nearly)
        wall speed: the stage stood waiting the whole time."""
        xs = [(t, v) for t, v in self.series[name] if start - SAMPLE_S <= t <= end + SAMPLE_S]
        if len(xs) < 2:
            return None
        best = run = 0.0
        for (t0, v0), (t1, v1) in zip(xs, xs[1:], strict=False):
            run = run + (t1 - t0) if v1 - v0 >= 0.8 * (t1 - t0) else 0.0
            best = max(best, run)
        return best


def stalls(
    watch: StallWatch, tails: Mapping[str, float | None], start: float, end: float
) -> dict[str, float | None]:
    """Seconds each stage of ORDER stood still in [start, end]: the watch's samples, and for the
    benchmark's own tails the longest stretch they read nothing (given in `tails`)."""
    out: dict[str, float | None] = dict(tails)
    for name in watch.counters:
        out[name] = watch.idle(name, start, end)
    for name in watch.waits:
        out[name] = watch.blocked(name, start, end)
    return {k: (None if v is None else round(v, 2)) for k, v in out.items()}


def name_stall(
    recovered_s: float | None, stood: dict[str, float | None], bound: float = BOUND_S
) -> str | None:
    """None when answers resumed within the bound; else the first stage along the path that
    stood still for half the bound or more, or the one that stood still longest."""
    if recovered_s is not None and recovered_s <= bound:
        return None
    for stage in ORDER:
        if (stood.get(stage) or 0.0) >= bound / 2:
            return stage
    known = {k: v for k, v in stood.items() if v is not None}
    return max(known, key=lambda k: known[k]) if known else "unknown"


def path_watch(worker_ports: list[int], api_port: int, inputs: str) -> StallWatch:
    """A StallWatch over the workers (records of `inputs` consumed; seconds their loops waited
    for the broker to take their outputs) and the API replica (prediction records read)."""

    def total(ports: list[int], name: str, **labels: str) -> Callable[[], float | None]:
        def read() -> float | None:
            values = [metric_total(p, name, labels) for p in ports]
            return None if None in values else sum(v or 0.0 for v in values)

        return read

    stage = "precast_worker_stage_seconds_total"
    flush, produce = (
        total(worker_ports, stage, stage="commit"),
        total(worker_ports, stage, stage="produce"),
    )

    def waited() -> float | None:  # a flush before a commit, or backpressure in produce
        a, b = flush(), produce()
        return None if a is None or b is None else a + b

    return StallWatch(
        {
            "worker consume": total(worker_ports, "precast_worker_events_total", topic=inputs),
            "API reader": total([api_port], "precast_api_materialized_total"),
        },
        {"worker produce": waited},
    )


def after_kill(
    watch: StallWatch,
    moved_at: float | None,
    inputs: Any,
    answers: Any,
    killed: float,
    end: float,
    load_ended: float | None,
) -> tuple[dict[str, float | None], str | None]:
    """Each stage's longest stretch without progress from the kill to `end` (answers flowing
    again, or the window's end) and the stage named for the stall (name_stall's rule; None is
    only decided by the caller, who knows the recovery). `inputs` and `answers` are the
    benchmark's tails (PostFaultTail). Stretches count only while the load ran: after its last
    record every stage rightly idles."""
    until = min(end, load_ended or end)
    own = {
        "brokers": None if moved_at is None else moved_at - killed,
        "bench load": inputs.longest_gap(killed, until),
        "bench reader": answers.longest_gap(killed, until),
    }
    still = stalls(watch, own, killed, until)
    return still, name_stall(None, still)
