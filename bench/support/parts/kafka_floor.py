"""Kafka's own freshness floor, the measuring half of `python -m bench floor` and of the floor
points of `python -m bench freshness`: the freshness sweep's load and probes, with a relay
process that copies every record from a heartbeats topic to a predictions topic in place of the
worker, and a reader in place of the read API. No decoding, no model, no store, no HTTP: two
Kafka hops and the CPU they need.

Per probe (a heartbeat-sized record, flushed at once):
    produced   the probe's produce call (this process)
    appended   the broker's append time of the probe (LogAppendTime, from its delivery report)
    relayed    the broker's append time of its copy on the answers topic (LogAppendTime)
    received   when the reader (a thread of this process, parked fetch) got the copy
"""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
import time
from typing import Any

import orjson

from bench.support.harness import Context
from bench.support.loads.fleet_load import LoadProcess
from bench.support.parts.freshness_run import LOAD_STEP_S, log_append_catalog, pct
from bench.support.procstat import cpu_s

HOPS = (
    ("producer -> broker", "produced", "appended"),
    ("broker -> relay -> broker", "appended", "relayed"),
    ("broker -> reader", "relayed", "received"),
)


def quarter_rate(capacity: float) -> int:
    """The sweep's quarter point: a quarter of the worker's capacity, down to a multiple of 500
    heartbeats/s (issue 27's "a quarter of the worker's capacity")."""
    return int(capacity / 4 // 500 * 500)


def ratio(pipeline_ms: list[float], floor_ms: list[float], q: float) -> float:
    """The pipeline's q-th percentile over the floor's at the same rate in the same run: how
    many times Kafka's own floor the pipeline takes (nan when either side has no probe)."""
    top, bottom = pct(pipeline_ms, q), pct(floor_ms, q)
    if math.isnan(top) or math.isnan(bottom) or bottom <= 0:
        return float("nan")
    return top / bottom


def ratios_at(
    pipeline_ms: dict[int, list[float]], floor_ms: dict[int, list[float]], rate: int
) -> dict[str, float] | None:
    """{"p50": ratio, "p99": ratio} of the pipeline over the floor, both at `rate` (end-to-end
    ms of each probe, by swept rate); None when either was not swept there (a development
    run of chosen rates)."""
    if rate not in pipeline_ms or rate not in floor_ms:
        return None
    return {f"p{q}": ratio(pipeline_ms[rate], floor_ms[rate], q) for q in (50, 99)}


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


def _relay_child(settings, src: str, dst: str, partitions: int, stop, ready) -> None:
    """Copy `src` to `dst` as the worker's loop moves records: wake on the first record, take
    what else is fetched, produce, commit every 200 ms without waiting."""
    from precast.kafka import OFFSET_END, Consumer, Producer, TopicPartitionOffset

    # linger 0, as the worker's predictions producer (workers.precompute.publish.delivery.LINGER_MS)
    linger: dict[str, Any] = {"linger.ms": 0}
    c, p = Consumer(settings, f"relay-{os.getpid()}"), Producer(settings, **linger)
    c.assign([TopicPartitionOffset(src, q, OFFSET_END) for q in range(partitions)])
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
    def __init__(self, settings, topic: str, partitions: int, group: str) -> None:
        from precast.kafka import OFFSET_END, Consumer, TopicPartitionOffset

        super().__init__(name="floor-reader", daemon=True)
        self.c = Consumer(settings, group)
        self.c.assign([TopicPartitionOffset(topic, q, OFFSET_END) for q in range(partitions)])
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


class Floor:
    """The relay over its own heartbeats and predictions topics (the freshness sweep's, stamped
    by the broker at append), started once and fed at one rate after another. Start it inside
    `on_one_core` for the one-core points: the relay inherits this process's CPU mask."""

    def __init__(self, ctx: Context, admin, partitions: int, broker_pid: int | None) -> None:
        from schemas.topics import catalog

        self.ctx, self.admin, self.partitions, self.broker = ctx, admin, partitions, broker_pid
        topics = log_append_catalog(catalog(ctx.unique("floor") + ".", partitions))
        admin.ensure_topics([topics.heartbeats, topics.predictions])
        self.src, self.dst = topics.heartbeats.name, topics.predictions.name
        mp = multiprocessing.get_context("spawn")
        self._stop, ready = mp.Event(), mp.Event()
        self.relay = mp.Process(
            target=_relay_child,
            args=(ctx.kafka_settings(), self.src, self.dst, partitions, self._stop, ready),
            daemon=True,
        )
        self.relay.start()
        if not ready.wait(60):
            self.close()
            raise RuntimeError("the relay did not start")

    def close(self) -> None:
        self._stop.set()
        self.relay.join(30)
        self.admin.delete_topics([self.src, self.dst])

    def point(self, rate: int, seconds: float, n: int) -> dict:
        """`rate` heartbeats/s of load for `seconds` (after 3 s of warm-up) with `n` probes:
        {"rate", "achieved", "hops" (split_hops), "n", "cpu" (µs per event by process)}."""
        from precast.kafka import Producer

        ctx = self.ctx
        reader = _Reader(ctx.kafka_settings(), self.dst, self.partitions, ctx.unique("floor-r"))
        reader.start()
        reports: dict[str, Any] = {"delivery.report.only.error": False}
        producer = Producer(ctx.kafka_settings(), **reports)
        producer.produce(self.src, b"warmup", b"{}")
        producer.flush(10)
        load = LoadProcess(
            ctx.kafka_settings(), self.src, rate=rate, seconds=seconds + 4, step_s=LOAD_STEP_S
        )
        load.start()
        time.sleep(3)
        pids = {
            "relay": self.relay.pid,
            "load": load.pid,
            "broker": self.broker,
            "bench": os.getpid(),
        }
        cpu0, t0 = {k: cpu_s(v) for k, v in pids.items()}, time.monotonic()
        body = orjson.dumps({"device_id": "probe", "pad": "x" * 400})
        probes: dict[bytes, list[float]] = {}
        for i in range(n):
            key = f"probe-{rate}-{i:04d}".encode()
            rec = probes[key] = [time.time() * 1000, float("nan")]

            def delivered(err, msg, rec=rec) -> None:
                if err is None:
                    rec[1] = float(msg.timestamp()[1])

            producer.produce(self.src, key, body, on_delivery=delivered)
            producer.flush(5)
            time.sleep(max(0.0, seconds / n - (time.time() * 1000 - rec[0]) / 1000))
        el = time.monotonic() - t0
        cpu1 = {k: cpu_s(v) for k, v in pids.items()}
        load.stop.set()
        sent = load.join(seconds + 60)
        time.sleep(0.5)  # the last probes' copies
        reader.close()
        events = max(1.0, min(rate, sent / (seconds + 4)) * el)
        return {
            "rate": rate,
            "achieved": sent / (seconds + 4),
            "hops": split_hops(probes, reader.seen),
            "n": n,
            "cpu": {k: 1e6 * (cpu1[k] - cpu0[k]) / events for k in pids},
        }
