"""Freshness end to end, swept over rates, on all cores and on one core: an event produced ->
its answer readable from the read API and pushed on its event stream, through the real worker,
materializer and API processes, with fleet heartbeats flowing (at-least-once).

Each mode first measures the worker's capacity on that CPU (one worker over a backlog, the
`bench worker` loop), then runs one worker and one API process and sweeps 1k, 2k, 5k, 10k
heartbeats/s and a quarter of that capacity. Every point reports each answer's time hop by hop
(bench/support/parts/freshness_run.py), the CPU each process spent per event, and the worker's batches. One
core: this process, the worker, the API, the load and the broker all pinned to CPU 0 (taskset;
PRECAST_BENCH_PIN_BROKER=0 leaves a shared broker alone). The goal (issue 27): p50 <= 5 ms and
p99 <= 25 ms at every rate up to a quarter of the capacity, on both.

At each rate Kafka's own floor (bench/support/parts/kafka_floor.py, what `python -m bench floor`
measures: the same load, a relay in place of the worker, a reader in place of the API) runs right
after the pipeline's point, so how far the pipeline sits above the floor (issue 39,
`freshness_vs_floor_p50` / `_p99` at the quarter point) is a ratio within one run, not of two
runs on a noisy machine.
"""

from __future__ import annotations

import os
import time

from bench.support.harness import Context, Figure, Report, listener_pid, on_one_core, progress
from bench.support.loads.fleet_load import LOAD_DEVICES, LoadProcess
from bench.support.parts.freshness_run import (
    HOPS,
    LOAD_STEP_S,
    PROCESSES,
    Pipeline,
    Point,
    log_append_catalog,
    pct,
)
from bench.support.parts.kafka_floor import HOPS as FLOOR_HOPS
from bench.support.parts.kafka_floor import Floor, quarter_rate, ratio, ratios_at
from bench.support.parts.worker_run import worker_capacity
from bench.support.procstat import thread_cpu_s, wait_until_quiet

NAME = "freshness"
DESCRIPTION = "event -> answer readable and pushed, swept over rates, all cores and one core"

# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = (
    "all cores free for the all-core sweep; the one-core sweep pins this process, the worker, "
    "the API, the load and the broker to CPU 0 and needs that core to itself. The pipeline "
    "itself needs about one core at 1k events/s as at 10k (CPU per event rows): anything else "
    "running adds its run-queue wait to every hop, so these figures are the first to move on "
    "a busy machine."
)
PARTITIONS = 6
RATES = (1_000, 2_000, 5_000, 10_000)
GOAL_P50, GOAL_P99 = 5.0, 25.0
# Development only (with --quick): "all" or "one" core alone, and a comma list of rates.
MODES_ENV, RATES_ENV = "PRECAST_BENCH_FRESHNESS_MODES", "PRECAST_BENCH_FRESHNESS_RATES"
# Before the first point every device of the load passes this many times at this rate, and
# the load goes on (up to a limit) until the broker's JIT compilers use under JIT_SETTLED of
# a core over JIT_WINDOW_S.
INTRODUCE_ROUNDS, INTRODUCE_RATE, INTRODUCE_MAX_S = 2, 2_000, 180.0
JIT_SETTLED, JIT_WINDOW_S = 0.05, 5.0


def _mode(ctx: Context, admin, one_core: bool, seconds: float, n_probes: int) -> dict:
    from schemas.topics import catalog

    tag = "1c" if one_core else "all"
    with on_one_core(ctx.bootstrap_servers, enabled=one_core) as pin_broker:
        progress(f"freshness [{tag}]: worker capacity over a backlog")
        capacity = worker_capacity(ctx, admin, 20_000 if ctx.quick else 100_000)
        quarter = quarter_rate(capacity)
        asked = os.environ.get(RATES_ENV) if ctx.quick else None
        rates = sorted({*(int(r) for r in asked.split(","))} if asked else {*RATES, quarter})
        topics = log_append_catalog(catalog(ctx.unique("fresh") + ".", PARTITIONS))
        admin.ensure_topics(list(topics))
        broker = listener_pid(int(ctx.bootstrap_servers.rsplit(":", 1)[1]))
        # Deleting the capacity run's backlog keeps the broker busy for seconds (a full core
        # at the first point of a sweep, measured): the sweep starts once it is quiet.
        wait_until_quiet(broker)
        pipe = Pipeline(ctx, topics, PARTITIONS, broker)
        floor = Floor(ctx, admin, PARTITIONS, broker)
        points: list[Point] = []
        floors: dict[int, dict] = {}
        introduced = 0.0
        try:
            pipe.start()
            introduced = _introduce_fleet(ctx, tag, topics, broker)
            # The relay's and the reader's first fetches and metadata, not the floor's.
            floor.point(INTRODUCE_RATE, 2.0, 5)
            time.sleep(1)
            for rate in rates:
                progress(
                    f"freshness [{tag}]: {rate:,} heartbeats/s for {seconds:.0f}s, "
                    f"{n_probes} probes (capacity {capacity:,.0f}/s)"
                )
                points.append(pipe.point(tag, rate, seconds, n_probes))
                pt = points[-1]
                progress(
                    f"freshness [{tag}] {rate:,}/s: p50 {pct(pt.e2e(), 50):.1f} ms, "
                    f"p99 {pct(pt.e2e(), 99):.1f} ms"
                )
                time.sleep(1)  # what the load left behind drains
                floors[rate] = fl = floor.point(rate, seconds, n_probes)
                progress(
                    f"freshness [{tag}] {rate:,}/s, Kafka floor: "
                    f"p50 {pct(fl['hops']['e2e'], 50):.1f} ms, "
                    f"p99 {pct(fl['hops']['e2e'], 99):.1f} ms"
                )
                time.sleep(1)
        finally:
            floor.close()
            pipe.close()
            admin.delete_topics([t.name for t in topics])
    return {
        "one_core": one_core,
        "capacity": capacity,
        "quarter": quarter,
        "points": points,
        "floors": floors,
        "broker_pinned": pin_broker,
        "introduced_s": introduced,
    }


def _introduce_fleet(ctx: Context, tag: str, topics, broker: int | None) -> float:
    """Load at a rate the points also run until every device has passed twice and the
    broker's JIT compilers have settled; returns the seconds it took.

    The points measure rates, not a start. A device's first heartbeat is always predicted
    (first seen) and fully validated by the board feed, and the load cycles the same 10,000
    devices: at 1,000/s the first point was half made of first heartbeats. And a freshly
    started broker compiles its request paths for minutes on this class of machine: in quick
    runs on a fresh stack its C2 compiler thread took 30-50 % of the broker's CPU through
    every point (678-830 µs of 1,507-1,655 per event at 1,000/s), where a warm broker's took
    1-2 % (docs/workers.md)."""
    least = INTRODUCE_ROUNDS * LOAD_DEVICES / INTRODUCE_RATE
    progress(f"freshness [{tag}]: every device first, and the broker's JIT settled")
    load = LoadProcess(
        ctx.kafka_settings(),
        topics.heartbeats.name,
        rate=INTRODUCE_RATE,
        seconds=INTRODUCE_MAX_S,
        step_s=LOAD_STEP_S,
    )
    t0 = time.monotonic()
    load.start()
    before = _compiling_s(broker)
    while time.monotonic() - t0 < INTRODUCE_MAX_S:
        time.sleep(JIT_WINDOW_S)
        now = _compiling_s(broker)
        settled = (now - before) / JIT_WINDOW_S < JIT_SETTLED
        before = now
        if settled and time.monotonic() - t0 >= least:
            break
    load.stop.set()
    load.join()
    took = time.monotonic() - t0
    progress(f"freshness [{tag}]: introduced in {took:.0f}s")
    wait_until_quiet(broker)  # the worker and the API have caught up
    return took


def _compiling_s(pid: int | None) -> float:
    """CPU seconds of the JVM's JIT compiler threads ("C1/C2 CompilerThread<n>")."""
    return sum(v for name, v in thread_cpu_s(pid).items() if "Compiler" in name)


def _passes_up_to(points: list[Point]) -> int:
    """The highest swept rate at which p99 <= the goal there and at every lower rate (0: none)."""
    ok = 0
    for pt in sorted(points, key=lambda p: p.rate):
        if not pct(pt.e2e(), 99) <= GOAL_P99:
            break
        ok = pt.rate
    return ok


def _rows(mode: dict) -> list[list]:
    label = "1 core" if mode["one_core"] else f"{os.cpu_count()} cores"
    rows = []
    for pt in mode["points"]:
        e2e, sse = pt.e2e(), pt.sse()
        q = " (quarter of capacity)" if pt.rate == mode["quarter"] else ""
        head = f"{label}, {pt.rate:,}/s{q}"
        rows.append(
            [
                f"{head}: event -> readable (GET)",
                f"{len(e2e)}/{len(pt.probes)}",
                pct(e2e, 50),
                pct(e2e, 99),
                f"achieved {pt.achieved:,.0f}/s; pushed p50 {pct(sse, 50):.1f} / p99 "
                f"{pct(sse, 99):.1f} ms",
            ]
        )
        for name, a, b in HOPS:
            xs = pt.hop(a, b)
            rows.append([f"  {name}", len(xs), pct(xs, 50), pct(xs, 99), ""])
        cpu = ", ".join(f"{k} {pt.cpu_us[k]:.0f}" for k in PROCESSES)
        for proc, threads in pt.extra.get("threads", {}).items():
            top = sorted(threads.items(), key=lambda kv: -kv[1])[:5]
            rows.append(
                [
                    f"  CPU per event (us), {proc} by thread",
                    "",
                    "",
                    "",
                    ", ".join(f"{n} {v:.0f}" for n, v in top),
                ]
            )
        rows.append(
            [
                "  CPU per event (us)",
                "",
                "",
                "",
                f"{cpu}; worker batches {pt.batches_per_s:,.0f}/s of {pt.mean_batch:.1f}",
            ]
        )
        fl = mode["floors"].get(pt.rate)
        if fl is not None:
            rows += _floor_rows(head, pt, fl)
    return rows


def _floor_rows(head: str, pt: Point, fl: dict) -> list[list]:
    """The Kafka floor measured right after the pipeline's point at the same rate."""
    e2e = fl["hops"]["e2e"]
    cpu = ", ".join(f"{k} {v:.0f}" for k, v in fl["cpu"].items())
    rows = [
        [
            f"{head}: Kafka floor, produce -> reader (relay, reader)",
            f"{len(e2e)}/{fl['n']}",
            pct(e2e, 50),
            pct(e2e, 99),
            f"pipeline / floor: p50 {ratio(pt.e2e(), e2e, 50):.2f}, p99 "
            f"{ratio(pt.e2e(), e2e, 99):.2f}; achieved {fl['achieved']:,.0f}/s; "
            f"CPU per event (us): {cpu}",
        ]
    ]
    rows += [
        [f"  floor: {h}", len(fl["hops"][h]), pct(fl["hops"][h], 50), pct(fl["hops"][h], 99), ""]
        for h, _, _ in FLOOR_HOPS
    ]
    return rows


def _figures(mode: dict) -> list[Figure]:
    one = mode["one_core"]
    suffix = "_one_core" if one else ""
    where = (
        "every process pinned to one core (taskset"
        + ("" if mode["broker_pinned"] else "; broker not pinned")
        + ")"
        if one
        else f"{os.cpu_count()} cores"
    )
    quarter = next((p for p in mode["points"] if p.rate == mode["quarter"]), None)
    if quarter is None:  # a development run of chosen rates
        return []
    cond = (
        f"{quarter.rate:,} heartbeats/s = a quarter of the worker's capacity measured in the "
        f"same run ({mode['capacity']:,.0f} events/s over a backlog), {where}; 1 worker + 1 API "
        f"process (in-process view), {PARTITIONS} partitions, at-least-once, "
        f"{len(quarter.e2e())} probes (first-seen devices), GET polled every 0.5 ms"
    )
    out = [
        Figure(
            f"freshness_p50_ms_at_quarter_capacity{suffix}",
            round(pct(quarter.e2e(), 50), 1),
            "ms",
            f"goal <= {GOAL_P50:g}",
            cond,
        ),
        Figure(
            f"freshness_p99_ms_at_quarter_capacity{suffix}",
            round(pct(quarter.e2e(), 99), 1),
            "ms",
            f"goal <= {GOAL_P99:g}",
            cond,
        ),
        Figure(
            f"freshness_worker_capacity_events_per_s{suffix}",
            round(mode["capacity"]),
            "events/s",
            "-",
            f"one worker over a backlog of the fleet's heartbeats, {where}",
        ),
        Figure(
            f"freshness_p99_within_goal_up_to_events_per_s{suffix}",
            _passes_up_to(mode["points"]),
            "events/s",
            f"highest swept rate with p99 <= {GOAL_P99:g} ms there and below",
            f"rates {', '.join(f'{p.rate:,}' for p in mode['points'])}, {where}",
        ),
    ]
    floor_e2e = {r: fl["hops"]["e2e"] for r, fl in mode["floors"].items()}
    ratios = ratios_at({p.rate: p.e2e() for p in mode["points"]}, floor_e2e, mode["quarter"])
    if ratios is not None:
        fq = floor_e2e[quarter.rate]
        fcond = (
            f"pipeline event -> readable over Kafka's floor (load, relay, reader: `bench floor`) "
            f"at {quarter.rate:,} heartbeats/s, both in this run, the floor right after the "
            f"pipeline's point; floor p50 {pct(fq, 50):.2f} / p99 "
            f"{pct(fq, 99):.2f} ms over {len(fq)} probes; {where}"
        )
        out += [
            Figure(
                f"freshness_vs_floor_p{q}{suffix}",
                round(ratios[f"p{q}"], 2),
                "x",
                "reported (pipeline / floor, same run)",
                fcond,
            )
            for q in (50, 99)
        ]
    ten = next((p for p in mode["points"] if p.rate == 10_000), None)
    if ten is not None and not one:  # the names issue 12 recorded, at 10k events/s
        c10 = f"10,000 heartbeats/s, {where}, otherwise as above"
        out += [
            Figure("freshness_e2e_p50_ms", round(pct(ten.e2e(), 50), 1), "ms", "goal <= 5", c10),
            Figure("freshness_e2e_p99_ms", round(pct(ten.e2e(), 99), 1), "ms", "goal <= 25", c10),
            Figure("sse_push_p99_ms", round(pct(ten.sse(), 99), 1), "ms", "goal <= 25", c10),
        ]
    return out


def run(ctx: Context) -> Report:
    from precast.kafka import Admin

    seconds = 6.0 if ctx.quick else 20.0
    n_probes = 40 if ctx.quick else 200  # at most PRECAST_API__SSE_MAX_DEVICES per stream
    admin = Admin(ctx.kafka_settings())
    only = os.environ.get(MODES_ENV, "") if ctx.quick else ""
    modes = [
        _mode(ctx, admin, one_core, seconds, n_probes)
        for one_core in (False, True)
        if only in ("", "one" if one_core else "all")
    ]
    rows = [r for m in modes for r in _rows(m)]
    figures = [f for m in modes for f in _figures(m)]
    caps = ", ".join(
        f"{'one core' if m['one_core'] else 'all cores'} {m['capacity']:,.0f}/s" for m in modes
    )
    intro = ", ".join(
        f"{'one core' if m['one_core'] else 'all cores'} {m['introduced_s']:.0f} s" for m in modes
    )
    return Report(
        "Freshness end to end, swept over rates (`python -m bench freshness`)",
        ["point / hop", "probes", "p50 ms", "p99 ms", "notes"],
        rows,
        figures,
        [
            f"Worker capacity measured in the same run, before each sweep: {caps}.",
            f"Before each sweep the load ran at {INTRODUCE_RATE:,}/s until every device had "
            f"passed {INTRODUCE_ROUNDS} times and the broker's JIT compilers used under "
            f"{JIT_SETTLED:.0%} of a core over {JIT_WINDOW_S:.0f} s (at most "
            f"{INTRODUCE_MAX_S:.0f} s): {intro}.",
            "Probe = a heartbeat of a device the worker has never seen (first_seen: always "
            f"predicted), flushed at once; the load: fleet heartbeats from {LOAD_DEVICES:,} "
            "devices, from a process at nice 10 through the producer library's defaults (5 ms "
            f"linger), every device seen {INTRODUCE_ROUNDS} times before the first point.",
            "Hops from the probe's produce call, the broker's append times of the probe and of "
            "its prediction (LogAppendTime on both topics), the worker's batch start "
            "(produced_at_ms) and the materializer's receive time (Server-Timing): ms clocks, "
            "so a hop's sub-millisecond part is rounded.",
            "Kafka floor: at each rate, right after the pipeline's point, the same load into a "
            "topic of its own, a relay process copying every record to a second topic as the "
            "worker's loop would, and a reader thread here with a fetch parked on it "
            "(`python -m bench floor`'s code); the worker and the API are idle meanwhile, the "
            "relay idle during the pipeline's point. freshness_vs_floor_p50 / _p99 = the "
            "pipeline's event -> readable percentile over the floor's produce -> reader one.",
            "CPU per event: user + system CPU of each process over the point / events sent; "
            "bench = this process (probe, poller, event stream, predictions reader); broker = "
            "the stack's broker (shared with anything else running).",
        ],
    )
