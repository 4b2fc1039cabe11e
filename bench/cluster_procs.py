"""Processes and probes for the cluster benchmark: a private 3-broker stack with a Redis Cluster,
worker and API replica processes, a paced heartbeat load, RSS samples, and a predictions tail
that says when answers for new events flow again after a fault."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
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
        PRECAST_METRICS__PORT=str(port),
        PRECAST_MODEL__PROVIDER="cpu",
        # every heartbeat is a trigger: the load is the work
        PRECAST_POLICY__THROTTLE_MS="0",
        PRECAST_POLICY__MIN_CHANGE="0",
    )
    return spawn("workers.cli", env, log)


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
    counts what it sent and what the brokers refused."""

    def __init__(self, settings, topic: str, devices: int, rate: float, seconds: float) -> None:
        super().__init__(daemon=True)
        from precast.kafka import Producer

        self.p = Producer(settings)
        self.topic, self.devices, self.rate, self.seconds = topic, devices, rate, seconds
        self.sent = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from producers.simulator import Fleet

        fleet, start, chunk = Fleet(self.devices, seed=5), time.monotonic(), 100
        try:
            while not self.stop.is_set() and time.monotonic() - start < self.seconds:
                ahead = self.sent / self.rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
                for e in fleet.heartbeats(chunk, int(time.time() * 1000)):
                    self.p.produce(self.topic, e["device_id"].encode(), orjson.dumps(e))
                self.p.poll(0)
                self.sent += chunk
            self.p.flush(120)
        except BaseException as exc:  # noqa: BLE001 - reported by the benchmark
            self.error = exc


class PredictionTail(threading.Thread):
    """Predictions from the end; per partition, when the first prediction of an input written
    after `marks` arrives."""

    def __init__(self, settings, predictions: str, inputs: str) -> None:
        super().__init__(daemon=True)
        from precast.kafka import OFFSET_END, Consumer, TopicPartitionOffset

        self.c = Consumer(settings, f"bench-tail-{time.monotonic_ns()}")
        self.c.assign([TopicPartitionOffset(predictions, p, OFFSET_END) for p in range(PARTITIONS)])
        self.inputs = inputs
        self.marks: dict[int, int] | None = None
        self.flowing: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for m in self.c.consume(2_000, 0.1):
                if self.marks is None or m.partition() in self.flowing:
                    continue
                for ref in orjson.loads(m.value())["lineage"]:
                    if (
                        ref["topic"] == self.inputs
                        and ref["offset"] >= self.marks[ref["partition"]]
                    ):
                        self.flowing[m.partition()] = time.monotonic()
                        break
        self.c.close()

    def wait_flowing(self, partitions: set[int], timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while not partitions <= set(self.flowing):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        return max(self.flowing[p] for p in partitions)


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

    want = {p: set(range(ends[p])) for p in ends}
    c = Consumer(settings, f"bench-lineage-{time.monotonic_ns()}")
    c.assign([TopicPartitionOffset(predictions, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    quiet_since = time.monotonic()
    while sum(map(len, want.values())) and time.monotonic() - quiet_since < 20:
        msgs = c.consume(5_000, 0.5)
        if msgs:
            quiet_since = time.monotonic()
        for m in msgs:
            for ref in orjson.loads(m.value())["lineage"]:
                if ref["topic"] == inputs:
                    want[ref["partition"]].discard(ref["offset"])
    c.close()
    return sum(map(len, want.values()))
