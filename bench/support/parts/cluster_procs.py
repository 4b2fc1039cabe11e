"""Processes and probes for the cluster benchmark: a private 3-broker stack with a Redis Cluster,
worker and API replica processes, a paced heartbeat load, RSS samples, and a predictions tail
that says when answers for new events flow again after a fault."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import orjson

from schemas.leases import is_lease_key

ROOT = Path(__file__).resolve().parents[3]
PARTITIONS = 6


def private_stack():
    """Three KRaft brokers and a Redis Cluster on free ports in a scratch home (never the
    shared stack): returned started."""
    from opsctl.settings import StackSettings
    from opsctl.stack import LocalStack
    from opsctl.stack.process import free_port_block

    kafka = free_port_block(6)
    stack = LocalStack(
        StackSettings(
            home=Path(tempfile.mkdtemp(prefix="precast-bench-cluster-")),
            brokers=3,
            kafka_port=kafka,
            controller_port=kafka + 1,
            redis_cluster=True,
            redis_cluster_port=free_port_block(6, bus_offset=10_000, low=11_000),
        )
    )
    stack.up(progress=lambda m: print(f"bench: {m}", file=sys.stderr, flush=True))
    return stack


def app_env(stack, topics, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        **stack.client_env(),
        "PRECAST_TOPICS__PREFIX": topics.heartbeats.name.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": str(PARTITIONS),
        "PRECAST_LOG_LEVEL": "WARNING",
        **extra,
    }


def spawn(module: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )


def spawn_worker(stack, topics, group: str, port: int, log: Path) -> subprocess.Popen:
    env = app_env(
        stack,
        topics,
        PRECAST_WORKER__GROUP_ID=group,
        # the group is chosen by its coordinator (cluster_groups): exactly that name, unprefixed
        PRECAST_KAFKA__GROUP_PREFIX="",
        PRECAST_METRICS__PORT=str(port),
        PRECAST_MODEL__PROVIDER="cpu",
        # every heartbeat is a trigger: the load is the work, and every input must show up in a
        # prediction's lineage (the answer-aware policy would rightly skip most heartbeats)
        PRECAST_POLICY__THROTTLE_MS="0",
        PRECAST_POLICY__MIN_CHANGE="0",
        PRECAST_POLICY__EVERY_EVENT="true",
    )
    return spawn("workers.precompute.cli", env, log)


def spawn_api(stack, topics, group: str, port: int, key_prefix: str, log: Path):
    env = app_env(
        stack,
        topics,
        PRECAST_API__PORT=str(port),
        PRECAST_API__GROUP_ID=group,
        PRECAST_API__LOCAL_VIEW="false",
        PRECAST_REDIS__KEY_PREFIX=key_prefix,
    )
    return spawn("consumer_api.cli", env, log)


def wait_http(port: int, path: str = "/readyz", timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"nothing ready on port {port} within {timeout}s")


def heap_sample(port: int) -> dict[str, float]:
    """A process's heap gauges (precast.telemetry.heap) from its /metrics: Python's blocks and glibc
    malloc's bytes in use and free; {} when it does not answer."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    wanted = {
        ("precast_python_heap_blocks", ""): "python_blocks",
        ("precast_malloc_bytes", "in_use"): "malloc_in_use",
        ("precast_malloc_bytes", "free"): "malloc_free",
    }
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = wanted.get((s.name, s.labels.get("state", "")))
            if key:
                out[key] = s.value
    return out


def heap_growth(samples: list[dict[str, float]], first: int) -> dict[str, float]:
    """Each gauge's change from sample `first` to the mean of the last quarter."""
    out: dict[str, float] = {}
    tail = samples[-max(1, len(samples) // 4) :]
    for key in ("python_blocks", "malloc_in_use", "malloc_free"):
        base = samples[first].get(key) if first < len(samples) else None
        xs = [s[key] for s in tail if key in s]
        if base is not None and xs:
            out[key] = sum(xs) / len(xs) - base
    return out


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Load(threading.Thread):
    """Heartbeats of a simulated fleet at `rate`/s until `stop` is set (or `seconds` pass);
    counts what it sent and what the brokers refused, and the rate it achieved.

    At 10k/s beside three brokers and two workers on 2 cores, drawing a fleet's metrics and
    encoding JSON per record would take a share of the CPU the brokers need: the records are
    drawn and encoded once (`pool` rounds of the fleet) and cycled, each sent with a fresh event
    time patched into its fixed-width time fields, so every record is still a new trigger."""

    def __init__(
        self, settings, topic: str, devices: int, rate: float, seconds: float, pool: int = 4
    ) -> None:
        super().__init__(daemon=True)
        from precast.kafka import Producer
        from producers.simulator import Fleet

        self.p = Producer(settings)
        self.topic, self.devices, self.rate, self.seconds = topic, devices, rate, seconds
        self.sent = 0
        self.elapsed = 0.0
        self.ended: float | None = None  # monotonic time the last record was sent
        self.stop = threading.Event()
        self.error: BaseException | None = None
        fleet, base = Fleet(devices, seed=5), int(time.time() * 1000)
        self._marker = str(base).encode()  # 13 digits until 2286: same width as any fresh time
        self._records = [
            (e["device_id"].encode(), orjson.dumps(e))
            for e in fleet.heartbeats(devices * pool, base)
        ]

    @property
    def achieved_rate(self) -> float:
        return self.sent / self.elapsed if self.elapsed else 0.0

    def run(self) -> None:
        produce, records, marker = self.p.produce, self._records, self._marker
        start, chunk, i, n = time.monotonic(), 100, 0, len(self._records)
        try:
            while not self.stop.is_set() and time.monotonic() - start < self.seconds:
                ahead = self.sent / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
                now_ms = int(time.time() * 1000)
                now = str(now_ms).encode()
                for _ in range(chunk):
                    key, value = records[i]
                    produce(self.topic, key, value.replace(marker, now), timestamp_ms=now_ms)
                    i = (i + 1) % n
                self.p.poll(0)
                self.sent += chunk
            self.elapsed = time.monotonic() - start
            self.ended = time.monotonic()
            self.p.flush(120)
        except BaseException as exc:  # noqa: BLE001 - reported by the benchmark
            self.error = exc


class PostFaultTail(threading.Thread):
    """Reads a topic from the end while a fault happens. Once `since_ms` is set (the wall time
    of the fault), records per partition when the first record stamped at or after it arrives:
    for inputs the record timestamp (the producer's create time), for predictions the
    `computed_at_ms` (the event time of the input it answers). Also keeps the arrival times of
    what it reads, to find the longest stretch with nothing arriving on any partition."""

    def __init__(self, settings, topic: str, *, predictions: bool) -> None:
        super().__init__(daemon=True)
        from precast.kafka import OFFSET_END, Consumer, TopicPartitionOffset

        self.c = Consumer(settings, f"bench-tail-{time.monotonic_ns()}")
        self.c.assign([TopicPartitionOffset(topic, p, OFFSET_END) for p in range(PARTITIONS)])
        self.predictions = predictions
        self.since_ms: int | None = None
        self.flowing: dict[int, float] = {}
        self.arrivals: list[float] = []  # monotonic time of every non-empty read after since_ms
        self.count = 0
        # Records it could not time. A validity lease has no computed_at_ms: reading one used to
        # end this thread with a KeyError, and with it every answer the benchmark saw (issue
        # 36: "no answer within 90 s" while the workers and the API went on answering).
        self.unreadable = 0
        self.done = threading.Event()

    def _stamp(self, m) -> int | None:
        if not self.predictions:
            return int(m.timestamp()[1])
        if is_lease_key(m.key()):
            return None  # a partition's validity lease: no answer to any event
        try:
            return int(orjson.loads(m.value())["computed_at_ms"])
        except (ValueError, TypeError, KeyError):
            self.unreadable += 1  # not a prediction this tail can time: counted, not fatal
            return None

    def run(self) -> None:
        while not self.done.is_set():
            msgs = self.c.consume(5_000, 0.05)
            since = self.since_ms
            if since is None or not msgs:
                continue
            now = time.monotonic()
            self.arrivals.append(now)
            self.count += len(msgs)
            for m in msgs:
                if m.partition() not in self.flowing:
                    stamp = self._stamp(m)
                    if stamp is not None and stamp >= since:
                        self.flowing[m.partition()] = now
        self.c.close()

    def wait_flowing(self, partitions: set[int], timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while not partitions <= set(self.flowing):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        return max(self.flowing[p] for p in partitions)

    def longest_gap(self, start: float, end: float) -> float:
        """Longest time in [start, end] with nothing read on any partition."""
        times = [start, *(t for t in self.arrivals if start < t < end), end]
        return max(b - a for a, b in zip(times, times[1:], strict=False))


class LeaderWatch(threading.Thread):
    """Asks the surviving brokers for metadata every 100 ms after a broker died: when no
    partition of `topics` names it as leader or in-sync replica any more (the controller fenced
    it and elected new leaders)."""

    def __init__(self, bootstrap: str, topics: list[str], victim: int) -> None:
        super().__init__(daemon=True)
        from precast.kafka import Admin
        from precast.settings import KafkaSettings

        self.admin = Admin(KafkaSettings(bootstrap_servers=bootstrap))
        self.topics, self.victim = topics, victim
        self.moved: float | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set() and self.moved is None:
            try:
                parts = [p for t in self.topics for p in self.admin.partition_replicas(t, 2)]
                if all(p.leader not in (-1, self.victim) for p in parts) and not any(
                    self.victim in p.in_sync for p in parts
                ):
                    self.moved = time.monotonic()
            except Exception:  # noqa: BLE001 - metadata may time out right after the kill
                pass
            time.sleep(0.1)


def active_controller(stack) -> int | None:
    """The node that most recently became KRaft leader (the active controller), from the
    nodes' logs: the highest epoch in a "Completed transition to Leader" line."""
    best: tuple[int, int] | None = None
    for node in stack.brokers:
        for log in sorted(node.logs.glob("server.log*")):
            for line in log.read_text(errors="replace").splitlines():
                m = _EPOCH.search(line) if "Completed transition to Leader" in line else None
                if m and (best is None or int(m.group(1)) > best[0]):
                    best = (int(m.group(1)), node.node_id)
    return None if best is None else best[1]


_EPOCH = re.compile(r"\), epoch=(\d+), epochStartOffset")


def high_watermarks(settings, topic: str) -> dict[int, int]:
    from precast.kafka import Consumer

    c = Consumer(settings, f"bench-marks-{time.monotonic_ns()}")
    try:
        return {p: c.watermarks(topic, p)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def lineage_covered(settings, predictions: str, inputs: str, ends: dict[int, int]) -> int:
    """How many input offsets below `ends` no prediction's lineage names (lost triggers)."""
    from precast.kafka import OFFSET_BEGINNING, Consumer, TopicPartitionOffset
    from schemas.leases import is_lease_key

    # One byte per input offset: millions of offsets in a soak would not fit as int sets.
    seen = {p: bytearray(ends[p]) for p in ends}
    missing = sum(ends.values())
    c = Consumer(settings, f"bench-lineage-{time.monotonic_ns()}")
    c.assign([TopicPartitionOffset(predictions, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    quiet_since = time.monotonic()
    while missing and time.monotonic() - quiet_since < 20:
        msgs = c.consume(5_000, 0.5)
        if msgs:
            quiet_since = time.monotonic()
        for m in msgs:
            if is_lease_key(m.key()):
                continue  # a validity lease names no input
            for ref in orjson.loads(m.value() or b"{}")["lineage"]:
                if ref["topic"] == inputs:
                    part, off = ref["partition"], ref["offset"]
                    if off < len(seen[part]) and not seen[part][off]:
                        seen[part][off] = 1
                        missing -= 1
    c.close()
    return missing


def lost_assignments(log: Path) -> int:
    """How many times a worker lost its partitions (its group session ran out) in this log."""
    try:
        return sum("lost " in line and " partitions" in line for line in log.open(errors="replace"))
    except OSError:
        return 0
