"""Helpers for the fault suite on the private 3-broker cluster: who leads what, waiting for full
replication, watching predictions flow again after a fault, and API replica processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx2
import orjson

from precast.kafka import OFFSET_END, Admin, Consumer, TopicPartitionOffset
from schemas.leases import is_lease_key

ROOT = Path(__file__).resolve().parents[2]


def high_watermarks(kafka_settings, topic: str, partitions: int, group: str) -> dict[int, int]:
    c = Consumer(kafka_settings, group)
    try:
        return {p: c.watermarks(topic, p)[1] for p in range(partitions)}
    finally:
        c.close()


def busiest_leader(admin: Admin, records: dict[int, int], topic: str) -> int:
    """The broker leading the partitions of `topic` that hold the most records."""
    per_leader: Counter[int] = Counter()
    for part in admin.partition_replicas(topic):
        per_leader[part.leader] += records.get(part.partition, 0)
    return per_leader.most_common(1)[0][0]


def led_by(admin: Admin, topics: list[str], broker: int) -> set[int]:
    return {p.partition for t in topics for p in admin.partition_replicas(t) if p.leader == broker}


class PredictionTail(threading.Thread):
    """Reads predictions from the end while a fault happens. For each partition, the first
    moment a prediction arrives for an input record written after `marks` (input offsets at
    the fault): when answers for new events flow again there."""

    def __init__(self, kafka_settings, predictions: str, inputs: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.c = Consumer(kafka_settings, f"tail-{os.getpid()}-{time.monotonic_ns()}")
        self.c.assign([TopicPartitionOffset(predictions, p, OFFSET_END) for p in range(partitions)])
        self.inputs = inputs
        self.marks: dict[int, int] | None = None
        # Arrivals before this monotonic time (the fault) do not count: an input written after
        # `marks` may be answered before the fault itself.
        self.armed = float("inf")
        self.flowing: dict[int, float] = {}
        self.count = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            for m in self.c.consume(2_000, 0.1):
                self.count += 1
                marks = self.marks
                if marks is None or m.partition() in self.flowing:
                    continue
                if time.monotonic() < self.armed or is_lease_key(m.key()):
                    continue
                for ref in orjson.loads(m.value())["lineage"]:
                    if ref["topic"] == self.inputs and ref["offset"] >= marks[ref["partition"]]:
                        self.flowing[m.partition()] = time.monotonic()
                        break
        self.c.close()

    def wait_flowing(self, partitions: set[int], timeout: float) -> float:
        """The monotonic time by which every partition in `partitions` flows again."""
        deadline = time.monotonic() + timeout
        while not partitions <= set(self.flowing):
            if time.monotonic() > deadline:
                missing = sorted(partitions - set(self.flowing))
                raise AssertionError(f"partitions {missing} gave no new prediction in {timeout}s")
            time.sleep(0.05)
        return max(self.flowing[p] for p in partitions)

    def stop(self) -> None:
        self._done.set()
        self.join(10)


def spawn_api(
    kafka_settings, topics, redis_settings, port: int, group: str, log: Path
) -> subprocess.Popen:
    """A read-API replica that reads from Redis (no local view): the replicas share one store."""
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.predictions.name.removesuffix("predictions"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.predictions.partitions),
        "PRECAST_TOPICS__REPLICATION_FACTOR": "3",
        "PRECAST_REDIS__URL": redis_settings.url,
        "PRECAST_REDIS__CLUSTER": "true",
        "PRECAST_REDIS__KEY_PREFIX": redis_settings.key_prefix,
        "PRECAST_API__LOCAL_VIEW": "false",
        "PRECAST_API__PORT": str(port),
        "PRECAST_API__GROUP_ID": group,
        "PRECAST_LOG_LEVEL": "WARNING",
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "consumer_api.cli"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def api_ready(port: int) -> bool:
    try:
        return httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx2.TransportError:
        return False


def sources(port: int, devices: list[str]) -> Counter[str]:
    """How the replica on `port` answers a batch of devices: precomputed / fallback counts."""
    r = httpx2.get(
        f"http://127.0.0.1:{port}/v1/predictions", params={"ids": ",".join(devices)}, timeout=5
    )
    r.raise_for_status()
    return Counter(p["source"] for p in r.json()["predictions"])
