"""Reads the predictions topic into the serving store, newest data first-class."""

from __future__ import annotations

import logging
import threading
import uuid

import orjson
from prometheus_client import Counter, Gauge

from consumer_api.store import Entry, MemoryStore
from precast.kafka import OFFSET_BEGINNING, Consumer, TopicPartitionOffset
from precast.settings import KafkaSettings

log = logging.getLogger("precast.api.materializer")

APPLIED = Counter("precast_api_materialized_total", "prediction records read", ["result"])
DEVICES = Gauge("precast_api_devices", "devices with a stored prediction")


class Materializer:
    """Assigns every partition of the predictions topic from the beginning (the topic is
    compacted, so that is about one record per device) and keeps following it."""

    def __init__(self, kafka: KafkaSettings, topic: str, partitions: int, store: MemoryStore, group_prefix: str) -> None:
        # Each replica must read every partition, so it uses a group of its own and assigns
        # partitions itself instead of sharing them with other replicas.
        self._consumer = Consumer(kafka, f"{group_prefix}-{uuid.uuid4().hex[:8]}", **{"isolation.level": "read_committed"})
        self._topic, self._partitions, self.store = topic, partitions, store
        self._targets: dict[int, int] = {}
        self._caught_up = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="materializer", daemon=True)

    def start(self) -> None:
        for p in range(self._partitions):
            _low, high = self._consumer.watermarks(self._topic, p)
            self._targets[p] = high
        self._consumer.assign([TopicPartitionOffset(self._topic, p, OFFSET_BEGINNING) for p in range(self._partitions)])
        if all(h == 0 for h in self._targets.values()):
            self._caught_up.set()
        self._thread.start()

    @property
    def ready(self) -> bool:
        return self._caught_up.is_set()

    def _run(self) -> None:
        positions: dict[int, int] = {}
        while not self._stop.is_set():
            msgs = self._consumer.consume(5000, 0.2)
            for m in msgs:
                value = m.value()
                key = m.key()
                positions[m.partition()] = m.offset() + 1
                if not value or not key:
                    APPLIED.labels("skipped").inc()
                    continue
                try:
                    p = orjson.loads(value)
                    entry = Entry(int(p["computed_at_ms"]), int(p["produced_at_ms"]), str(p["model_version"]), value)
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    APPLIED.labels("invalid").inc()
                    continue
                APPLIED.labels("applied" if self.store.put(key.decode(), entry) else "older").inc()
            DEVICES.set(len(self.store))
            if not self._caught_up.is_set() and all(positions.get(p, 0) >= h for p, h in self._targets.items()):
                log.info("materializer caught up: %d devices", len(self.store))
                self._caught_up.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._consumer.close()
