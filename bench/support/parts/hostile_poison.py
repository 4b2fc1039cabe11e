"""Poison records on the predictions topic beside live traffic, for `python -m bench hostile`
(issue 36): one read API replica reads a topic that a live writer keeps fresh (a new answer per
device every 100 ms) while a burst of records no reader can use (nested 5,000 deep, not JSON,
invalid UTF-8, numbers out of range, wrong types, a CR/LF model version, a foreign key, headers
of any bytes) is written into the same partitions. Measured, in alternated rounds of one run:
GET p99 during the burst vs without it, whether every answer served during the burst was the
newest the writer had published a second before, and the rejections the replica counted
against the poison sent."""

from __future__ import annotations

import contextlib
import http.client
import json
import multiprocessing
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import orjson

from bench.support.harness import Context, listener_pid, pin, progress
from bench.support.loads.hostile_load import ApiProcess, get
from bench.support.procstat import cores_jiffies, tree_cpu_s

DEVICES = [f"live-{i:03d}" for i in range(20)]
spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no Kafka client forked
ROUND_S = 0.1  # the live writer's period: a new answer for every device each round
SETTLED_S = 1.0  # an answer published this long before a read must be what the read gets
# The second read load: `python -m bench api`'s lowest fixed rate, which leaves the replica's
# core most of its time idle, as a replica sized with headroom runs.
FIXED_RATE = 1_000


def _prediction(device: str, computed: int) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "device_id": device,
        "candidates": [{"strategy": "remote_restart", "score": 0.7}],
        "model_version": "1.0.0",
        "computed_at_ms": computed,
        "valid_until_ms": computed + 600_000,
        "produced_at_ms": computed,
        "trigger": "heartbeat",
        "lineage": [],
    }


Headers = list[tuple[str, bytes]]


def poison_kinds(now: int) -> list[tuple[bytes, bytes, Headers | None]]:
    """(key, value, headers) of records the read API must reject, each exactly once."""
    valid = orjson.dumps(_prediction("live-000", now))
    deep = b"[" * 5000 + b"]" * 5000
    # header values of any bytes, and none at all (librdkafka sends a None value as null)
    odd = cast(Headers, [("traceparent", b"\xff\x00"), ("x", None), ("\x1b[2J", b"\x00" * 32)])
    return [
        (b"live-000", valid[:-1] + b',"zz":' + deep + b"}", None),  # issue 36's record
        (b"live-000", b'{"x":' * 5000 + b"1" + b"}" * 5000, odd),
        (b"live-000", b"not json", None),
        (b"live-000", b"\xff\xfe\xfd", odd),
        (b"live-000", json.dumps(_prediction("live-000", 2**70)).encode(), None),
        (b"live-000", valid.replace(b'"computed_at_ms":', b'"computed_at_ms":1e400,"x":'), None),
        (b"live-000", valid.replace(b'"live-000"', b"17"), None),
        (b"live-000", valid.replace(b'"1.0.0"', b'"1.0\\r\\nX-Evil: 1"'), None),
        (b"\xff\x00foreign", valid, odd),
        (b"#lease:1", b'{"kind":"validity_lease","partition":2}', None),
    ]


@dataclass
class LiveWriter:
    """Publishes a new answer for every device each ROUND_S; remembers when each was flushed."""

    kafka: Any
    topic: str
    history: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        from precast.kafka import Producer

        p = Producer(self.kafka)
        try:
            while not self._stop.wait(ROUND_S):
                computed = int(time.time() * 1000)
                for d in DEVICES:
                    p.produce(self.topic, d.encode(), orjson.dumps(_prediction(d, computed)))
                p.flush(10)
                at = time.monotonic()
                for d in DEVICES:
                    self.history.setdefault(d, []).append((at, computed))
        except Exception as exc:  # noqa: BLE001 - the benchmark fails on it
            self.error = exc

    def settled(self, device: str, at: float) -> int:
        """The newest answer of `device` flushed at least SETTLED_S before `at` (0: none)."""
        best = 0
        for flushed, computed in self.history.get(device, []):
            if flushed + SETTLED_S <= at:
                best = computed
        return best


def rejected(api: ApiProcess, reader: str = "api-materializer") -> float:
    """precast_records_rejected_total of `reader`, every reason summed."""
    text = get(api.port, "/metrics", timeout=10)[1].decode()
    pat = re.compile(r"^precast_records_rejected_total\{([^}]*)\} ([0-9.e+-]+)$", re.M)
    return sum(float(v) for labels, v in pat.findall(text) if f'reader="{reader}"' in labels)


def _reads(
    port: int, seconds: float, writer: LiveWriter, pause_s: float = 0.0
) -> tuple[np.ndarray, int, int]:
    """GETs cycling the live devices for `seconds`, back to back or one every `pause_s` (beside
    a fixed-rate load that times the reads): latencies (ms), answers checked against the
    writer's settled newest, and how many of those were older than it."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out: list[float] = []
    checked = stale = i = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            d = DEVICES[i % len(DEVICES)]
            i += 1
            t0 = time.perf_counter()
            c.request("GET", f"/v1/devices/{d}/prediction")
            r = c.getresponse()
            body = r.read()
            out.append((time.perf_counter() - t0) * 1000)
            if r.status != 200:
                raise RuntimeError(f"GET {d}: {r.status} {body[:200]!r}")
            want = writer.settled(d, time.monotonic())
            if want:
                checked += 1
                stale += orjson.loads(body)["computed_at_ms"] < want
            if pause_s:
                time.sleep(pause_s)
    finally:
        c.close()
    return np.array(out), checked, stale


def _fixed_reads(
    port: int, seconds: float, writer: LiveWriter, rate: int, cpus: str
) -> tuple[np.ndarray, int, int]:
    """GETs at a fixed rate (h2load, as `python -m bench api` times reads), with answers
    checked for newest by a slow sequential reader beside it: (latencies ms, checked, stale)."""
    from bench.support.loads.api_load import fixed_rate_log

    out: list[tuple[int, int]] = []
    failure: list[BaseException] = []

    def check() -> None:
        try:
            out.append(_reads(port, seconds, writer, 0.01)[1:])
        except BaseException as exc:  # noqa: BLE001 - raised below, on the bench's thread
            failure.append(exc)

    checker = threading.Thread(target=check, daemon=True)
    checker.start()
    rows = fixed_rate_log(
        f"http://127.0.0.1:{port}",
        [f"/v1/devices/{d}/prediction" for d in DEVICES],
        rate,
        seconds,
        cpus=cpus,
    )
    checker.join(seconds + 30)
    if failure:
        raise RuntimeError(f"the reader checking answers failed: {failure[0]}") from failure[0]
    if not out:
        raise RuntimeError("the reader checking answers did not finish")
    failed = int((rows[:, 1] >= 400).sum())
    if failed:
        raise RuntimeError(f"fixed rate {rate}/s: {failed} of {len(rows)} GETs failed")
    return rows[:, 2] / 1000.0, *out[0]


def _burst(kafka: Any, topic: str, n: int, seconds: float, partitions: int) -> None:
    """`n` poison records paced over `seconds`, spread over every partition."""
    from precast.kafka import Producer

    p = Producer(kafka)
    kinds = poison_kinds(int(time.time() * 1000))
    t0 = time.monotonic()
    for i in range(n):
        key, value, headers = kinds[i % len(kinds)]
        p.produce(topic, key, value, headers, partition=i % partitions)
        ahead = t0 + seconds * (i + 1) / n - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        p.poll(0)
    p.flush(30)


@dataclass
class Probe:
    """One kind of read load, measured in each round without the burst and during it."""

    name: str
    clean: list[float] = field(default_factory=list)  # p99 (ms) per round
    dirty: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)  # the replica's cores, share busy (clean)
    cpu_us: list[float] = field(default_factory=list)  # replica CPU per poison record

    @property
    def clean_p99(self) -> float:
        return float(np.median(self.clean))

    @property
    def poison_p99(self) -> float:
        return float(np.median(self.dirty))

    @property
    def ratio(self) -> float:
        return self.poison_p99 / self.clean_p99


@dataclass
class PoisonResult:
    sent: int
    rejected: float
    checked: int
    stale: int
    rounds: int
    saturated: Probe  # sequential GETs back to back: the replica's core never idle
    fixed: Probe  # FIXED_RATE GETs/s, as `python -m bench api` times reads


def background_threads(pid: int) -> list[int]:
    """The replica's own background threads: its Kafka clients' (librdkafka names them rdk:*)
    and its materializer's (precast.supervise names it after its part)."""
    found = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # ended meanwhile
        if name.startswith("rdk:") or name == "api-materialize":
            found.append(int(t))
    return found


@contextlib.contextmanager
def apart(
    ctx: Context, api: ApiProcess, background_apart: bool = False
) -> Iterator[tuple[str, str]]:
    """The broker on the first core this bench may use, the replica and this process (the
    probe, the live writer) on the others, as in production where brokers run on machines of
    their own: the ratio then shows what the replica's own work on the poison costs its reads,
    not the broker's share of 2 cores. Yields (the broker's core, where the burst writer goes
    beside it; the replica's cores, where the fixed-rate load runs); on one core (`taskset -c 0
    python -m bench ...`) nothing is moved and both are that core. Restored on the way out.

    `background_apart`: a replica of two cores, its reads on one and its background work on the
    other: its gate process, and its own Kafka clients' and materializer's threads, go to the
    first core (on this 2-core machine, the broker's; the broker's load there is light)."""
    cpus = sorted(os.sched_getaffinity(0))  # what the bench was given, not the machine
    everything = ",".join(map(str, cpus))
    if len(cpus) < 2:
        yield everything, everything
        return
    first, rest = str(cpus[0]), ",".join(map(str, cpus[1:]))
    broker = listener_pid(int(ctx.bootstrap_servers.rsplit(":", 1)[1]))
    pin(broker, first)
    pin(api.proc.pid, rest, with_children=True)  # its gate process too
    if background_apart:
        pin(api.proc.pid, first, only_children=True)
        for tid in background_threads(api.proc.pid):
            pin(tid, first, one_thread=True)
    pin(os.getpid(), rest)
    try:
        yield first, rest
    finally:
        for pid in (broker, api.proc.pid, os.getpid()):
            pin(pid, everything, with_children=pid == api.proc.pid)


def run_poison(
    ctx: Context, api: ApiProcess, topic: str, partitions: int, background_apart: bool = False
) -> PoisonResult:
    with apart(ctx, api, background_apart) as (broker_cpu, replica_cpus):
        return _run_poison(ctx, api, topic, partitions, broker_cpu, replica_cpus)


def _run_poison(
    ctx: Context,
    api: ApiProcess,
    topic: str,
    partitions: int,
    broker_cpu: str,
    replica_cpus: str,
) -> PoisonResult:
    rounds = 3 if ctx.quick else 5
    seconds = 2.0 if ctx.quick else 4.0
    per_burst = 1_000 if ctx.quick else 3_000
    saturated, fixed = Probe("back to back"), Probe(f"at {FIXED_RATE:,}/s")

    def measure(probe: Probe, writer: LiveWriter) -> tuple[float, int, int, float, float]:
        """(p99 ms, answers checked, stale, share of the replica's cores busy, replica CPU s)"""
        b0, t0 = cores_jiffies(replica_cpus)
        cpu0 = tree_cpu_s(api.proc.pid)  # with its gate process
        if probe is fixed:
            lat, c, s = _fixed_reads(api.port, seconds, writer, FIXED_RATE, replica_cpus)
        else:
            lat, c, s = _reads(api.port, seconds, writer)
        b1, t1 = cores_jiffies(replica_cpus)
        busy = (b1 - b0) / max(1, t1 - t0)
        return float(np.percentile(lat, 99)), c, s, busy, tree_cpu_s(api.proc.pid) - cpu0

    writer = LiveWriter(ctx.kafka_settings(), topic)
    writer.start()
    try:
        deadline = time.monotonic() + 30
        while not all(writer.settled(d, time.monotonic()) for d in DEVICES):
            if writer.error is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the live writer published nothing: {writer.error}")
            time.sleep(0.1)
        before = rejected(api)
        checked = stale = sent = 0
        for rnd in range(rounds):
            for probe in (saturated, fixed):
                p99, _, _, busy, cpu_clean = measure(probe, writer)
                probe.clean.append(p99)
                probe.busy.append(busy)
                # its own process: a thread here would take the GIL from the probe, whose
                # latencies would then grow on the client's side, not the replica's
                burst = spawn.Process(
                    target=_burst,
                    args=(ctx.kafka_settings(), topic, per_burst, seconds, partitions),
                    daemon=True,
                )
                burst.start()
                pin(burst.pid, broker_cpu)  # beside the broker (apart)
                p99, c, s, _, cpu_dirty = measure(probe, writer)
                burst.join(60)
                if burst.exitcode != 0:
                    raise RuntimeError(f"the poison writer failed (exit {burst.exitcode})")
                sent += per_burst
                probe.dirty.append(p99)
                probe.cpu_us.append((cpu_dirty - cpu_clean) / per_burst * 1e6)
                checked, stale = checked + c, stale + s
                progress(
                    f"poison round {rnd + 1}/{rounds}, {probe.name}: p99 {probe.clean[-1]:.3f} "
                    f"-> {p99:.3f} ms (replica's core {busy:.0%} busy without the burst, its "
                    f"CPU +{probe.cpu_us[-1]:.0f} us per poison record), "
                    f"{c:,} answers checked, {s} stale, {rejected(api) - before:,.0f} rejected"
                )
        deadline = time.monotonic() + 60
        while (got := rejected(api) - before) < sent and time.monotonic() < deadline:
            time.sleep(0.2)
        if writer.error is not None:
            raise RuntimeError(f"the live writer failed: {writer.error}")
    finally:
        writer.stop()
    if checked == 0:  # no probe got an answer it could judge: no figure, a failure
        raise RuntimeError("no answer served during the bursts could be checked")
    if got != sent:
        raise RuntimeError(f"{sent:,} poison records sent, {got:,.0f} rejected by the replica")
    return PoisonResult(sent, got, checked, stale, rounds, saturated, fixed)
