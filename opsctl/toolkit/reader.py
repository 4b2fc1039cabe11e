"""Read bounded offset ranges of a topic to their end, in batches: what replay, dry runs,
dead-letter listings, resume and rebuild all do."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from opsctl.toolkit.ranges import OffsetRange, OffsetSpec, TimeRange, resolve_offsets, resolve_times
from precast.errors import PrecastError
from precast.kafka import Consumer, KafkaMessage, TopicPartitionOffset
from precast.settings import KafkaSettings

BATCH = 10_000


def range_consumer(settings: KafkaSettings, purpose: str) -> Consumer:
    """A consumer that only reads: its own throwaway group, nothing committed, committed data only
    (aborted transactions are not part of any range)."""
    conf: dict[str, Any] = {
        "isolation.level": "read_committed",
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
    }
    return Consumer(settings, f"precast-ops-{purpose}-{uuid.uuid4().hex[:8]}", **conf)


class RangeReader:
    """Iterate to get batches of the records inside `ranges` (in offset order per partition).
    `positions[p]` is the next offset to read of partition p (== end once it is finished)."""

    def __init__(
        self,
        consumer: Consumer,
        topic: str,
        ranges: Sequence[OffsetRange],
        *,
        batch: int = BATCH,
        idle_timeout_s: float = 30.0,
    ) -> None:
        self.consumer, self.topic, self.batch = consumer, topic, batch
        self.ends = {r.partition: r.end for r in ranges}
        self.positions = {r.partition: r.start for r in ranges}
        self.active = {r.partition: r.end for r in ranges if r.start < r.end}
        self.idle_timeout_s = idle_timeout_s
        self.partitions: list[int] = []  # partition of each record of the batch last yielded
        if self.active:
            consumer.assign(
                [TopicPartitionOffset(topic, p, self.positions[p]) for p in self.active]
            )

    def _finish(self, p: int) -> None:
        self.positions[p] = self.ends[p]
        self.active.pop(p, None)
        self.consumer.pause([TopicPartitionOffset(self.topic, p)])

    def _check_positions(self) -> None:
        """Past a trailing transaction marker or compacted-away records no message arrives,
        but the consumer position moves on to the end."""
        parts = [TopicPartitionOffset(self.topic, p) for p in self.active]
        for tp in self.consumer.position(parts):
            if tp.offset >= self.active.get(tp.partition, 1 << 62):
                self._finish(tp.partition)

    def __iter__(self) -> Iterator[list[KafkaMessage]]:
        idle_since = time.monotonic()
        while self.active:
            # never ask for more than the ranges hold: consume() waits until it has the count
            # or times out, so a range's last batch would wait out the timeout every time (a
            # build that reads many small ranges, one partition after another, paid 0.2 s each)
            left = sum(e - self.positions[p] for p, e in self.active.items())
            msgs = self.consumer.consume(max(1, min(self.batch, left)), 0.2)
            if not msgs:
                self._check_positions()
                if self.active and time.monotonic() - idle_since > self.idle_timeout_s:
                    raise PrecastError(
                        f"no records from {self.topic} partitions {sorted(self.active)} for "
                        f"{self.idle_timeout_s:g}s before their range ended (deleted by retention?)"
                    )
                continue
            idle_since = time.monotonic()
            # Per-batch work in C: the partitions, and each partition's last offset (offsets
            # rise within a partition, so dict(zip()) keeps the highest); Python only loops over
            # the few partitions, and over records only for a batch that crosses a range end.
            parts = [m.partition() for m in msgs]
            last = dict(zip(parts, [m.offset() for m in msgs], strict=True))
            out = msgs
            if all(o < self.active.get(p, -1) for p, o in last.items()):
                for p, o in last.items():
                    self.positions[p] = o + 1
                self.partitions = parts
            else:
                out = self._trim(msgs)
                self.partitions = [m.partition() for m in out]
            for p in [p for p, e in self.active.items() if self.positions[p] >= e]:
                self._finish(p)
            if out:
                yield out

    def _trim(self, msgs: list[KafkaMessage]) -> list[KafkaMessage]:
        """The slow path, only for a batch that crosses a range end."""
        out = []
        for m in msgs:
            p = m.partition()
            end = self.active.get(p)
            if end is None:
                continue
            if m.offset() >= end:
                self._finish(p)
                continue
            self.positions[p] = m.offset() + 1
            out.append(m)
        return out


def resolve(
    settings: KafkaSettings,
    topic: str,
    partitions: int,
    tr: TimeRange | None,
    spec: OffsetSpec | None,
) -> list[OffsetRange]:
    """Offsets of a time range or offset spec, asked of the cluster in `settings` (KafkaSettings)."""
    c = range_consumer(settings, "resolve")
    try:
        if tr:
            return resolve_times(c, topic, partitions, tr)
        if spec is None:
            raise ValueError("resolve needs a time range or an offset spec")
        return resolve_offsets(c, topic, partitions, spec)
    finally:
        c.close()
