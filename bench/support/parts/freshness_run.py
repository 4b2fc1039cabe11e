"""The measuring half of `python -m bench freshness`: a worker and an API process over a topic
catalog whose heartbeats and predictions topics stamp records with the broker's append time,
paced fleet heartbeats from a load process, and probes whose answers are followed hop by hop.

Per probe (a heartbeat of a device the worker has never seen, so it is always predicted):

    produced     the probe's produce call (this process; the probe is flushed at once, so it
                 pays no producer linger, as a device sending one event would not)
    appended     the broker's append time of the probe (its delivery report, LogAppendTime)
    batch        the worker's clock when the batch holding it started (`produced_at_ms`)
    published    the broker's append time of its prediction (read back here, LogAppendTime)
    received     the materializer's clock when it took the prediction (the answer's
                 Server-Timing `kafka` segment: received - produced_at)
    readable     the first GET that served an answer computed from the probe (polled every
                 0.5 ms: a tight loop would take the CPU from the processes it waits for)
    pushed       the answer's arrival on an event stream watching the probe's device

Hops: producer -> broker, broker -> worker batch, worker batch -> prediction in Kafka,
Kafka -> materializer, materializer -> readable. All clocks are this machine's (ms).
CPU per event: each process's user + system CPU over the point, per event the load sent.
"""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import orjson

from bench.support.harness import ROOT, app_env, stop_processes
from bench.support.loads.fleet_load import LoadProcess
from bench.support.parts.worker_freshness import wait_ready
from bench.support.procstat import cpu_s, thread_cpu_s
from precast.kafka.config import PRODUCER_DEFAULTS

HOPS = (
    ("producer -> broker", "produced", "appended"),
    ("broker -> worker batch", "appended", "batch"),
    ("worker batch -> prediction in Kafka", "batch", "published"),
    ("Kafka -> materializer", "published", "received"),
    ("materializer -> readable (GET)", "received", "readable"),
)
POLL_S = 0.0005
# One linger window of the load's producer (the library default): see `Pipeline.point`.
# PRECAST_BENCH_LOAD_STEP_MS=1 brings back the millisecond steps, for a side-by-side run.
LOAD_STEP_S = (
    float(os.environ.get("PRECAST_BENCH_LOAD_STEP_MS", PRODUCER_DEFAULTS["linger.ms"])) / 1000
)
PROCESSES = ("worker", "api", "load", "broker", "bench")


def pct(xs, q: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=float), q)) if len(xs) else float("nan")


def log_append_catalog(catalog):
    """The catalog with heartbeats and predictions stamped by the broker at append."""
    stamp = {"message.timestamp.type": "LogAppendTime"}
    return replace(
        catalog,
        heartbeats=replace(catalog.heartbeats, config={**catalog.heartbeats.config, **stamp}),
        predictions=replace(catalog.predictions, config={**catalog.predictions.config, **stamp}),
    )


@dataclass
class Probe:
    device: str
    produced: float
    event_ms: int
    appended: float | None = None
    batch: float | None = None
    published: float | None = None
    received: float | None = None
    readable: float | None = None
    pushed: float | None = None

    def hop(self, a: str, b: str) -> float | None:
        x, y = getattr(self, a), getattr(self, b)
        return None if x is None or y is None else y - x


@dataclass
class Point:
    rate: int
    achieved: float
    probes: list[Probe]
    cpu_us: dict[str, float]  # process -> CPU microseconds per event
    batches_per_s: float
    mean_batch: float
    extra: dict = field(default_factory=dict)

    def e2e(self) -> list[float]:
        return [p.readable - p.produced for p in self.probes if p.readable is not None]

    def sse(self) -> list[float]:
        return [p.pushed - p.produced for p in self.probes if p.pushed is not None]

    def hop(self, a: str, b: str) -> list[float]:
        return [x for p in self.probes if (x := p.hop(a, b)) is not None]


class Pipeline:
    """One worker and one API process (in-process view) over `topics`, started once and fed
    at one rate after another."""

    def __init__(self, ctx, topics, partitions: int, broker_pid: int | None) -> None:
        from opsctl.stack.process import free_port

        self.ctx, self.topics, self.broker_pid = ctx, topics, broker_pid
        self.api_port, self.worker_port = free_port(), free_port()
        env = app_env(
            ctx.bootstrap_servers,
            topics,
            partitions,
            PRECAST_REDIS__URL="",
            PRECAST_API__GROUP_ID=ctx.unique("api"),
            PRECAST_API__PORT=str(self.api_port),
            PRECAST_WORKER__GROUP_ID=ctx.unique("w"),
            PRECAST_MODEL__PROVIDER="cpu",
        )
        self.procs = {
            name: subprocess.Popen(
                [sys.executable, "-m", mod],
                env={**env, "PRECAST_METRICS__PORT": str(port)},
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            for name, mod, port in (
                ("worker", "workers.precompute.cli", self.worker_port),
                ("api", "consumer_api.cli", 0),
            )
        }
        from precast.kafka import Producer

        # Delivery reports for successes too: the probe's carries the broker's append time.
        reports: dict[str, Any] = {"delivery.report.only.error": False}
        self.producer = Producer(ctx.kafka_settings(), **reports)

    def start(self) -> None:
        wait_ready(self.worker_port)
        wait_ready(self.api_port, timeout=120)
        # A new producer's first record waits for topic metadata (~0.5 s): not the pipeline's.
        self.producer.produce(self.topics.heartbeats.name, b"warmup", b"{}")
        self.producer.flush(10)

    def close(self) -> None:
        stop_processes(list(self.procs.values()))

    def _ends(self) -> dict[int, int]:
        from precast.kafka import Consumer

        t = self.topics.predictions
        c = Consumer(self.ctx.kafka_settings(), self.ctx.unique("fr-ends"))
        try:
            return {p: c.watermarks(t.name, p)[1] for p in range(t.partitions)}
        finally:
            c.close()

    def _published(self, start: dict[int, int]) -> dict[str, tuple[int, int, int]]:
        """Probe device -> (broker append time, produced_at, computed_at) of its first
        prediction since `start`: read back after the point, so reading costs it nothing."""
        from precast.kafka import Consumer, TopicPartitionOffset

        t, end = self.topics.predictions, self._ends()
        c = Consumer(self.ctx.kafka_settings(), self.ctx.unique("fr-read"))
        parts = [TopicPartitionOffset(t.name, p, o) for p, o in start.items() if end[p] > o]
        out: dict[str, tuple[int, int, int]] = {}
        try:
            c.assign(parts)
            deadline = time.monotonic() + 30
            while parts and time.monotonic() < deadline:
                for m in c.consume(10_000, 0.2):
                    key = m.key() or b""
                    if key.startswith(b"probe-"):
                        body = orjson.loads(m.value() or b"{}")
                        out.setdefault(
                            key.decode(),
                            (m.timestamp()[1], body["produced_at_ms"], body["computed_at_ms"]),
                        )
                if all(q.offset >= end[q.partition] for q in c.position(parts)):
                    break
        finally:
            c.close()
        return out

    def _worker_batches(self) -> tuple[float, float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.worker_port}/metrics").read()
        count = re.search(rb"^precast_worker_batch_size_count (\S+)", text, re.M)
        total = re.search(rb"^precast_worker_batch_size_sum (\S+)", text, re.M)
        return float(count[1]) if count else 0.0, float(total[1]) if total else 0.0

    def point(self, tag: str, rate: int, seconds: float, n_probes: int) -> Point:
        """`rate` heartbeats/s for `seconds` (after 3 s of warm-up) with `n_probes` probes."""
        # The load wakes once per linger window, not once per millisecond: its producer sends
        # one request per window either way, and here no figure starts at a load record (the
        # probes are produced and flushed apart). It cut the load's CPU per event, CPU taken
        # from the pipeline under test, from 79-106 to 54-60 µs at 2,000/s and from 32-36 to
        # 25-26 µs at 9,000/s (two interleaved runs each; docs/workers.md).
        load = LoadProcess(
            self.ctx.kafka_settings(),
            self.topics.heartbeats.name,
            rate=rate,
            seconds=seconds + 4,
            step_s=LOAD_STEP_S,
        )
        probes = [
            Probe(f"probe-{tag}-{rate}-{i:04d}", 0.0, 0) for i in range(n_probes)
        ]  # PRECAST_API__SSE_MAX_DEVICES is 200 per stream
        stream = _Stream(self.api_port, [p.device for p in probes], probes)
        stream.start()
        start = self._ends()
        load.start()
        time.sleep(3)  # the load reaches steady state
        pids = {
            "worker": self.procs["worker"].pid,
            "api": self.procs["api"].pid,
            "load": load.pid,
            "broker": self.broker_pid,
            "bench": os.getpid(),
        }
        # The broker by thread too: its cost follows requests, and its request handlers and
        # network threads ("data-plane-kafk...") are where that shows.
        threads0 = {k: thread_cpu_s(pids[k]) for k in ("worker", "api", "broker")}
        cpu0, b0, t0 = (
            {k: cpu_s(v) for k, v in pids.items()},
            self._worker_batches(),
            time.monotonic(),
        )
        self._probe(probes, seconds)
        el = time.monotonic() - t0
        cpu1, b1 = {k: cpu_s(v) for k, v in pids.items()}, self._worker_batches()
        threads1 = {k: thread_cpu_s(pids[k]) for k in ("worker", "api", "broker")}
        load.stop.set()
        sent = load.join(seconds + 60)
        stream.stop()
        published = self._published(start)
        for p in probes:
            got = published.get(p.device)
            if got is not None and got[2] >= p.event_ms:
                p.published, p.batch = float(got[0]), float(got[1])
        # Per event actually sent: on a busy machine the load falls short of the asked rate
        # (67-94 % of the asked rate measured), and dividing by the asked rate understated every row.
        events = max(1.0, min(rate, sent / (seconds + 4)) * el)
        batches = b1[0] - b0[0]
        return Point(
            rate,
            sent / (seconds + 4),
            probes,
            {k: 1e6 * (cpu1[k] - cpu0[k]) / events for k in pids},
            batches / el,
            (b1[1] - b0[1]) / batches if batches else float("nan"),
            {
                "threads": {
                    proc: {
                        name: 1e6 * (v - threads0[proc].get(name, 0.0)) / events
                        for name, v in threads1[proc].items()
                        if v > threads0[proc].get(name, 0.0)
                    }
                    for proc in threads1
                }
            },
        )

    def _probe(self, probes: list[Probe], seconds: float) -> None:
        from producers.simulator import Fleet

        template = Fleet(1, seed=3).heartbeats(1, 0)[0]
        conn = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=5)
        gap = seconds / len(probes)
        try:
            for p in probes:
                start = time.time() * 1000
                t = int(start)
                event = {
                    **template,
                    "device_id": p.device,
                    "event_id": f"{p.device}-{t}",
                    "event_time_ms": t,
                    "produced_at_ms": t,
                }

                def delivered(err, msg, p=p) -> None:
                    if err is None:
                        p.appended = float(msg.timestamp()[1])

                p.event_ms, p.produced = t, time.time() * 1000
                self.producer.produce(
                    self.topics.heartbeats.name,
                    p.device.encode(),
                    orjson.dumps(event),
                    [("event_id", event["event_id"].encode())],
                    on_delivery=delivered,
                )
                self.producer.flush(5)  # on its way now; no linger
                self._poll(conn, p)
                time.sleep(max(0.0, gap - (time.time() * 1000 - start) / 1000))
        finally:
            conn.close()

    def _poll(self, conn: http.client.HTTPConnection, p: Probe) -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            conn.request("GET", f"/v1/devices/{p.device}/prediction")
            resp = conn.getresponse()
            body = orjson.loads(resp.read())
            if (body.get("computed_at_ms") or 0) >= p.event_ms:  # made from the probe
                p.readable = time.time() * 1000
                seg = _segments(resp.getheader("server-timing") or "")
                produced_at = body.get("produced_at_ms")
                if produced_at is not None and "kafka" in seg:
                    p.received = float(produced_at + seg["kafka"])
                return
            time.sleep(POLL_S)


class _Stream(threading.Thread):
    """One event stream over a point's probe devices: when an answer made from each probe
    arrives."""

    def __init__(self, port: int, devices: list[str], probes: list[Probe]) -> None:
        super().__init__(daemon=True)
        self.port, self.devices = port, devices
        self.by_device = {p.device: p for p in probes}
        self._halt = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self.ready = threading.Event()

    def start(self) -> None:
        super().start()
        self.ready.wait(10)

    def stop(self) -> None:
        self._halt.set()
        if self._conn is not None and self._conn.sock is not None:
            self._conn.sock.close()
        self.join(5)

    def run(self) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            self._conn.request("GET", "/v1/stream?ids=" + ",".join(self.devices))
            resp = self._conn.getresponse()
            self.ready.set()
            device = None
            while not self._halt.is_set():
                line = resp.fp.readline()
                if not line:
                    return
                if line.startswith(b"id:"):
                    device = line[3:].strip().decode()
                elif line.startswith(b"data:") and device:
                    p = self.by_device.get(device)
                    if p is None or p.pushed is not None or not p.event_ms:
                        continue
                    if (orjson.loads(line[5:]).get("computed_at_ms") or 0) >= p.event_ms:
                        p.pushed = time.time() * 1000
        except (OSError, ValueError):
            return  # closed by stop()
        finally:
            self.ready.set()


def _segments(header: str) -> dict[str, float]:
    """{"queue": ms, "model": ms, "kafka": ms, "cache": ms} from the answer's Server-Timing."""
    out = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            out[name.removeprefix("age.")] = float(dur)  # the age's entries (issue 26)
    return out
