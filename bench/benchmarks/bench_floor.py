"""Kafka's own freshness floor on this machine: the freshness sweep's load and probes, with a
relay that copies every record from the heartbeats topic to an answers topic in place of the
worker, and a reader in place of the read API (bench/support/parts/kafka_floor.py, shared with
`python -m bench freshness`, which runs the floor beside the pipeline at each rate). Issue 27
asks the whole pipeline for p50 <= 5 ms and p99 <= 25 ms up to a quarter of the worker's
capacity; if the floor alone misses that on a core, no worker or API design can meet it there
(docs/workers.md, eighth stop).
"""

from __future__ import annotations

import os

from bench.support.harness import Context, Figure, Report, listener_pid, on_one_core, progress
from bench.support.parts.freshness_run import pct
from bench.support.parts.kafka_floor import HOPS, Floor, quarter_rate
from bench.support.parts.worker_run import worker_capacity
from bench.support.procstat import wait_until_quiet

NAME = "floor"
DESCRIPTION = "freshness of Kafka alone (load, relay, reader) at the freshness sweep's rates"
SPARE_CPU = (
    "all cores free for the all-core points; the one-core points pin this process, the relay, "
    "the load and the broker to CPU 0 and need that core to themselves. Like the freshness "
    "sweep, these figures are run-queue waits: anything else running adds to them."
)
PARTITIONS = 6
RATES = (1_000, 2_000, 5_000, 10_000)


def _mode(ctx: Context, admin, one_core: bool, seconds: float, n: int) -> dict:
    tag = "one core" if one_core else f"{os.cpu_count()} cores"
    with on_one_core(ctx.bootstrap_servers, enabled=one_core):
        progress(f"floor [{tag}]: worker capacity over a backlog (for the quarter point)")
        capacity = worker_capacity(ctx, admin, 20_000 if ctx.quick else 100_000)
        quarter = quarter_rate(capacity)
        broker = listener_pid(int(ctx.bootstrap_servers.rsplit(":", 1)[1]))
        wait_until_quiet(broker)
        floor = Floor(ctx, admin, PARTITIONS, broker)
        points = []
        try:
            progress(f"floor [{tag}]: 30 s of load at 2,000/s first (the broker's JIT)")
            floor.point(2_000, 30 if not ctx.quick else 5, 10)
            for rate in sorted({*RATES, quarter}):
                pt = floor.point(rate, seconds, n)
                points.append(pt)
                progress(
                    f"floor [{tag}] {rate:,}/s: p50 {pct(pt['hops']['e2e'], 50):.2f} ms, "
                    f"p99 {pct(pt['hops']['e2e'], 99):.2f} ms"
                )
        finally:
            floor.close()
    return {"tag": tag, "capacity": capacity, "quarter": quarter, "points": points}


def _rows(mode: dict) -> list[list]:
    rows = []
    for pt in mode["points"]:
        q = " (quarter of capacity)" if pt["rate"] == mode["quarter"] else ""
        e2e = pt["hops"]["e2e"]
        cpu = pt["cpu"]
        busy = sum(cpu.values()) * pt["achieved"] / 1e6
        rows.append(
            [
                f"{mode['tag']}, {pt['rate']:,}/s{q}: produce -> reader",
                f"{len(e2e)}/{pt['n']}",
                pct(e2e, 50),
                pct(e2e, 99),
                f"achieved {pt['achieved']:,.0f}/s; CPU per event (us): "
                + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items())
                + f"; {busy:.2f} cores busy",
            ]
        )
        rows += [
            [f"  {h}", len(pt["hops"][h]), pct(pt["hops"][h], 50), pct(pt["hops"][h], 99), ""]
            for h, _, _ in HOPS
        ]
    return rows


def _figures(mode: dict, suffix: str) -> list[Figure]:
    pt = next(p for p in mode["points"] if p["rate"] == mode["quarter"])
    cond = (
        f"{mode['tag']}: load at {pt['rate']:,}/s (a quarter of the worker's {mode['capacity']:,.0f}/s), "
        "relay in place of the worker, reader in place of the API"
    )
    e2e = pt["hops"]["e2e"]
    return [
        Figure(
            f"kafka_floor_p50_ms_at_quarter_capacity{suffix}",
            round(pct(e2e, 50), 2),
            "ms",
            "pipeline goal <= 5",
            cond,
        ),
        Figure(
            f"kafka_floor_p99_ms_at_quarter_capacity{suffix}",
            round(pct(e2e, 99), 2),
            "ms",
            "pipeline goal <= 25",
            cond,
        ),
    ]


def run(ctx: Context) -> Report:
    from precast.kafka import Admin

    admin = Admin(ctx.kafka_settings())
    seconds, n = (5.0, 40) if ctx.quick else (15.0, 150)
    modes = [_mode(ctx, admin, False, seconds, n), _mode(ctx, admin, True, seconds, n)]
    return Report(
        title="Kafka's own freshness floor: load, relay and reader (`python -m bench floor`)",
        columns=["point / hop", "probes", "p50 ms", "p99 ms", "notes"],
        rows=[r for m in modes for r in _rows(m)],
        figures=[*_figures(modes[0], ""), *_figures(modes[1], "_one_core")],
        notes=[
            "The freshness sweep's load (10,000 devices' heartbeats from a process at nice 10, "
            "producer library defaults) into a heartbeats-sized topic; a relay process copies "
            "every record to a second topic as the worker's loop would (wake on the first record, "
            "produce the batch, commit every 200 ms); a reader thread here keeps a fetch parked "
            "on it, as the read API's materializer does. Probes are flushed at once.",
            "Hops from the broker's append times (LogAppendTime on both topics) and this machine's "
            "ms clocks. 'cores busy': CPU per event of the four processes times the achieved rate.",
            "Before the points, 30 s of load at 2,000/s settle the broker's JIT compiler; the "
            "quarter point uses the worker capacity measured in the same run, as the freshness "
            "sweep does.",
        ],
    )
