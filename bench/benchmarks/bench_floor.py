"""Kafka's own freshness floor on this machine: the freshness sweep's load and probes, with a
relay that copies every record from the heartbeats topic to an answers topic in place of the
worker, and a reader in place of the read API. No decoding, no model, no store, no HTTP: two
Kafka hops and the CPU they need. Issue 27 asks the whole pipeline for p50 <= 5 ms and
p99 <= 25 ms up to a quarter of the worker's capacity; if the floor alone misses that on a
core, no worker or API design can meet it there (docs/workers.md, eighth stop).

Per probe (a heartbeat-sized record, flushed at once):
    produced   the probe's produce call (this process)
    appended   the broker's append time of the probe (LogAppendTime, from its delivery report)
    relayed    the broker's append time of its copy on the answers topic (LogAppendTime)
    received   when the reader (a thread of this process, parked fetch) got the copy
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from typing import Any

import orjson

from bench.support.harness import Context, Figure, Report, listener_pid, on_one_core, progress
from bench.support.loads.fleet_load import LoadProcess
from bench.support.parts.freshness_run import LOAD_STEP_S, log_append_catalog, pct
from bench.support.parts.worker_run import worker_capacity
from bench.support.procstat import cpu_s, wait_until_quiet

NAME = "floor"
DESCRIPTION = "freshness of Kafka alone (load, relay, reader) at the freshness sweep's rates"
SPARE_CPU = (
    "all cores free for the all-core points; the one-core points pin this process, the relay, "
    "the load and the broker to CPU 0 and need that core to themselves. Like the freshness "
    "sweep, these figures are run-queue waits: anything else running adds to them."
)
PARTITIONS = 6
RATES = (1_000, 2_000, 5_000, 10_000)
HOPS = (
    ("producer -> broker", "produced", "appended"),
    ("broker -> relay -> broker", "appended", "relayed"),
    ("broker -> reader", "relayed", "received"),
)


def _relay_child(settings, src: str, dst: str, stop, ready) -> None:
    """Copy `src` to `dst` as the worker's loop moves records: wake on the first record, take
    what else is fetched, produce, commit every 200 ms without waiting."""
    from precast.kafka import OFFSET_END, Consumer, Producer, TopicPartitionOffset

    # linger 0, as the worker's predictions producer (workers.precompute.publish.delivery.LINGER_MS)
    linger: dict[str, Any] = {"linger.ms": 0}
    c, p = Consumer(settings, f"relay-{os.getpid()}"), Producer(settings, **linger)
    c.assign([TopicPartitionOffset(src, q, OFFSET_END) for q in range(PARTITIONS)])
    pos: dict[int, int] = {}
    next_commit = time.monotonic() + 0.2
    ready.set()
    while not stop.is_set():
        msgs = c.consume_available(5_000, 0.1)
        if msgs:
            p.produce_batch(dst, [m.key() or b"" for m in msgs], [m.value() or b"" for m in msgs])
            p.poll(0)
            for m in msgs:
                pos[m.partition()] = m.offset() + 1
        if time.monotonic() >= next_commit and pos:
            c.commit([TopicPartitionOffset(src, q, o) for q, o in pos.items()], asynchronous=True)
            next_commit = time.monotonic() + 0.2
    p.flush(10)
    c.close()


class _Reader(threading.Thread):
    def __init__(self, settings, topic: str, group: str) -> None:
        from precast.kafka import OFFSET_END, Consumer, TopicPartitionOffset

        super().__init__(name="floor-reader", daemon=True)
        self.c = Consumer(settings, group)
        self.c.assign([TopicPartitionOffset(topic, q, OFFSET_END) for q in range(PARTITIONS)])
        self.seen: dict[bytes, tuple[float, float]] = {}  # probe key -> (received, relayed)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for m in self.c.consume_available(5_000, 0.1):
                key = m.key() or b""
                if key.startswith(b"probe-"):
                    self.seen.setdefault(key, (time.time() * 1000, float(m.timestamp()[1])))

    def close(self) -> None:
        self.stop.set()
        self.join(5)
        self.c.close()


def _topics(ctx: Context, admin) -> tuple[str, str]:
    """The freshness sweep's heartbeats and predictions topics (same settings, stamped by the
    broker at append), as the relay's source and destination."""
    from schemas.topics import catalog

    topics = log_append_catalog(catalog(ctx.unique("floor") + ".", PARTITIONS))
    admin.ensure_topics([topics.heartbeats, topics.predictions])
    return topics.heartbeats.name, topics.predictions.name


def _point(ctx: Context, src: str, dst: str, relay_pid, broker, rate: int, seconds: float, n: int):
    from precast.kafka import Producer

    reader = _Reader(ctx.kafka_settings(), dst, ctx.unique("floor-r"))
    reader.start()
    reports: dict[str, Any] = {"delivery.report.only.error": False}
    producer = Producer(ctx.kafka_settings(), **reports)
    producer.produce(src, b"warmup", b"{}")
    producer.flush(10)
    load = LoadProcess(
        ctx.kafka_settings(), src, rate=rate, seconds=seconds + 4, step_s=LOAD_STEP_S
    )
    load.start()
    time.sleep(3)
    pids = {"relay": relay_pid, "load": load.pid, "broker": broker, "bench": os.getpid()}
    cpu0, t0 = {k: cpu_s(v) for k, v in pids.items()}, time.monotonic()
    body = orjson.dumps({"device_id": "probe", "pad": "x" * 400})
    probes: dict[bytes, list[float]] = {}
    for i in range(n):
        key = f"probe-{rate}-{i:04d}".encode()
        rec = probes[key] = [time.time() * 1000, float("nan")]

        def delivered(err, msg, rec=rec) -> None:
            if err is None:
                rec[1] = float(msg.timestamp()[1])

        producer.produce(src, key, body, on_delivery=delivered)
        producer.flush(5)
        time.sleep(max(0.0, seconds / n - (time.time() * 1000 - rec[0]) / 1000))
    el = time.monotonic() - t0
    cpu1 = {k: cpu_s(v) for k, v in pids.items()}
    load.stop.set()
    sent = load.join(seconds + 60)
    time.sleep(0.5)  # the last probes' copies
    reader.close()
    hops = split_hops(probes, reader.seen)
    events = max(1.0, min(rate, sent / (seconds + 4)) * el)
    return {
        "rate": rate,
        "achieved": sent / (seconds + 4),
        "hops": hops,
        "n": n,
        "cpu": {k: 1e6 * (cpu1[k] - cpu0[k]) / events for k in pids},
    }


def split_hops(
    probes: dict[bytes, list[float]], seen: dict[bytes, tuple[float, float]]
) -> dict[str, list[float]]:
    """ms per hop and end to end ("e2e") of every probe the reader saw: `probes` maps a key to
    (produced, appended), `seen` to (received, relayed)."""
    hops: dict[str, list[float]] = {"e2e": [], **{h: [] for h, _, _ in HOPS}}
    for key, (produced, appended) in probes.items():
        got = seen.get(key)
        if got is None:
            continue
        at = {"produced": produced, "appended": appended, "received": got[0], "relayed": got[1]}
        hops["e2e"].append(got[0] - produced)
        for h, a, b in HOPS:
            hops[h].append(at[b] - at[a])
    return hops


def _mode(ctx: Context, admin, one_core: bool, seconds: float, n: int) -> dict:
    tag = "one core" if one_core else f"{os.cpu_count()} cores"
    with on_one_core(ctx.bootstrap_servers, enabled=one_core):
        progress(f"floor [{tag}]: worker capacity over a backlog (for the quarter point)")
        capacity = worker_capacity(ctx, admin, 20_000 if ctx.quick else 100_000)
        quarter = int(capacity / 4 // 500 * 500)
        src, dst = _topics(ctx, admin)
        broker = listener_pid(int(ctx.bootstrap_servers.rsplit(":", 1)[1]))
        wait_until_quiet(broker)
        mp = multiprocessing.get_context("spawn")
        stop, ready = mp.Event(), mp.Event()
        relay = mp.Process(
            target=_relay_child, args=(ctx.kafka_settings(), src, dst, stop, ready), daemon=True
        )
        relay.start()
        points = []
        try:
            if not ready.wait(60):
                raise RuntimeError("the relay did not start")
            progress(f"floor [{tag}]: 30 s of load at 2,000/s first (the broker's JIT)")
            _point(ctx, src, dst, relay.pid, broker, 2_000, 30 if not ctx.quick else 5, 10)
            for rate in sorted({*RATES, quarter}):
                pt = _point(ctx, src, dst, relay.pid, broker, rate, seconds, n)
                points.append(pt)
                progress(
                    f"floor [{tag}] {rate:,}/s: p50 {pct(pt['hops']['e2e'], 50):.2f} ms, "
                    f"p99 {pct(pt['hops']['e2e'], 99):.2f} ms"
                )
        finally:
            stop.set()
            relay.join(30)
            admin.delete_topics([src, dst])
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
