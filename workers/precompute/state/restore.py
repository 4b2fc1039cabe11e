"""Reads the worker-state changelog back when a worker gains partitions, before it processes
them (the Kafka Streams changelog way): every record of each assigned state partition, from its
beginning up to the end offset seen at the start, into the device table.

Its own consumer (assigned partitions, no group membership, nothing committed), so the group's
consumer keeps its positions and the restore blocks the assignment callback: the partitions'
input is consumed only after it returns. Read in large fetches and decoded column-wise
(`workers.precompute.state.changelog`): a million devices restore in a few seconds (BENCHMARKS.md)."""

from __future__ import annotations

import logging
import time
import uuid
from operator import methodcaller
from typing import Any

from precast.guard import REJECTED, Guard, Unusable
from precast.kafka import OFFSET_BEGINNING, Consumer, KafkaFailure, TopicPartitionOffset
from precast.settings import KafkaSettings
from schemas.deadletters import Reason
from workers.precompute import metrics
from workers.precompute.state import changelog
from workers.precompute.state.device_table import DeviceTable

log = logging.getLogger("precast.workers.precompute.state.restore")

_KEY, _VALUE, _PARTITION, _OFFSET = (
    methodcaller("key"),
    methodcaller("value"),
    methodcaller("partition"),
    methodcaller("offset"),
)


class StateRestorer:
    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        *,
        read_committed: bool = False,
        batch: int = 100_000,
        patience_s: float = 120.0,
    ) -> None:
        self.topic, self.batch, self.patience_s = topic, batch, patience_s
        overrides: dict[str, Any] = {
            # big fetches: a restore is one sequential read of whole partitions
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 256 << 10,
        }
        if read_committed:  # exactly-once: only what committed transactions wrote
            overrides["isolation.level"] = "read_committed"
        self.consumer = Consumer(kafka, f"precast-restore-{uuid.uuid4().hex}", **overrides)
        # the worker-state topic has no dead letters: a bad record is counted, logged (bounded)
        # and skipped, and its device starts over from its next events
        self.guard = Guard("worker-restore", log)

    def restore(self, partitions: list[int], table: DeviceTable) -> int:
        """Read these state partitions to their current end into `table`; returns the devices
        restored. Raises `KafkaFailure` if the broker does not answer within the patience."""
        t0 = time.perf_counter()
        ends = {p: self._end(p) for p in partitions}
        todo = {p for p, (low, high) in ends.items() if high > low}
        if not todo:
            return 0
        c = self.consumer
        c.assign([TopicPartitionOffset(self.topic, p, OFFSET_BEGINNING) for p in sorted(todo)])
        deadline = time.monotonic() + self.patience_s
        n = bad = 0
        try:
            while todo:
                msgs = c.consume(self.batch, 0.1)  # returns early: small partitions end fast
                if msgs:
                    done = self._apply(msgs, table)
                    n += done[0]
                    bad += done[1]
                    last: dict[int, int] = dict(
                        zip(map(_PARTITION, msgs), map(_OFFSET, msgs), strict=True)
                    )
                    todo -= {p for p, o in last.items() if o + 1 >= ends[p][1]}
                else:  # a transaction marker may end a partition: the position passes it
                    pos = c.position([TopicPartitionOffset(self.topic, p) for p in todo])
                    todo -= {q.partition for q in pos if q.offset >= ends[q.partition][1]}
                if todo and time.monotonic() > deadline:
                    raise KafkaFailure(
                        f"restoring {self.topic} partitions {sorted(todo)} took over "
                        f"{self.patience_s:.0f} s",
                        code="_TIMED_OUT",
                    )
        finally:
            c.assign([])
        metrics.RESTORED.inc(n)
        metrics.STATE_INVALID.inc(bad)
        metrics.RESTORE_S.inc(time.perf_counter() - t0)
        log.info(
            "restored %d devices of %s partitions %s in %.2f s",
            n,
            self.topic,
            sorted(partitions),
            time.perf_counter() - t0,
        )
        return n

    def _apply(self, msgs: list, table: DeviceTable) -> tuple[int, int]:
        parts = list(map(_PARTITION, msgs))
        keys, values = list(map(_KEY, msgs)), list(map(_VALUE, msgs))
        by_part: dict[int, tuple[list, list]] = {}
        for p, k, v in zip(parts, keys, values, strict=True):
            ks, vs = by_part.setdefault(p, ([], []))
            ks.append(k)
            vs.append(v)
        n = bad = 0
        layout = changelog.Layout(table.fleet.features)
        for p, (ks, vs) in by_part.items():
            try:
                devices, rec, b, foreign = layout.decode(ks, vs)
                metrics.STATE_FOREIGN.inc(foreign)
                b += table.restore(devices, [p] * len(devices), rec)
            except Exception as exc:  # noqa: BLE001 - the boundary: a restore must not fail
                # on what a record holds (the assignment would fail, and again at every retry)
                self.guard.reject(exc)
                continue
            n += len(devices)
            bad += b
        if bad:  # counted per record; one bounded log line for the batch
            self.guard.reject(Unusable(Reason.INVALID, f"{bad} worker-state records unusable"))
            REJECTED.labels(self.guard.reader, Reason.INVALID.value).inc(bad - 1)
        return n, bad

    def _end(self, partition: int, patience_s: float = 15.0) -> tuple[int, int]:
        # A just-created topic or a leader election answers NOT_LEADER for a moment: retry.
        deadline = time.monotonic() + patience_s
        while True:
            try:
                return self.consumer.watermarks(self.topic, partition, timeout=5.0)
            except KafkaFailure:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        self.consumer.close()
