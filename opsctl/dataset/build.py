"""Reading one partition's records for a dataset build: the offsets each pass needs (resolved
once from the brokers' time index and kept in the checkpoint), then the passes of
`precast.fleet.outcomes.PartitionRows` fed from range readers, one topic at a time.

Every device-keyed topic has the same partition count and a device's records all land in the
same partition number (docs/architecture.md, co-partitioning), so a partition of the three
event topics is a closed world: built on its own, written as its own part, and the unit a
resumed build skips or redoes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from opsctl.toolkit.ranges import OffsetRange, TimeRange, resolve_times
from opsctl.toolkit.reader import RangeReader, range_consumer
from precast.errors import ConfigError
from precast.fleet import Fleet
from precast.fleet.outcomes import PartitionRows, Window
from precast.kafka import Admin, Consumer, KafkaMessage, TopicPartitionOffset
from precast.settings import KafkaSettings
from schemas.topics import Topics

PASSES = ("outcomes", "context", "heartbeats")


@dataclass(frozen=True)
class Plan:
    """Which offsets each pass reads, per topic role and partition ([start, end))."""

    window: Window
    topics: dict[str, str]  # role -> topic name
    ranges: dict[str, dict[int, tuple[int, int]]]  # "pass:role" -> partition -> (start, end)
    partitions: int

    def to_json(self) -> dict[str, Any]:
        return {
            "window": self.window.__dict__,
            "topics": self.topics,
            "ranges": {k: {str(p): list(v) for p, v in r.items()} for k, r in self.ranges.items()},
            "partitions": self.partitions,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        return cls(
            Window(**d["window"]),
            dict(d["topics"]),
            {
                k: {int(p): (int(v[0]), int(v[1])) for p, v in r.items()}
                for k, r in d["ranges"].items()
            },
            int(d["partitions"]),
        )

    def size(self, partition: int | None = None) -> int:
        return sum(
            e - s
            for r in self.ranges.values()
            for p, (s, e) in r.items()
            if partition is None or p == partition
        )


def make_plan(
    kafka: KafkaSettings, admin: Admin, fleet: Fleet, topics: Topics, window: Window
) -> Plan:
    rows = PartitionRows(fleet, window)  # only to know the roles each pass reads
    w = window
    reads = [("outcomes", rows.outcome_role, TimeRange(w.from_ms, w.resolved_until_ms))]
    ctx_from = w.from_ms - w.context_lookback_ms
    reads += [("context", role, TimeRange(ctx_from, w.to_ms)) for role in rows.context_roles]
    reads.append(
        ("heartbeats", "heartbeats", TimeRange(w.from_ms - w.heartbeat_lookback_ms, w.to_ms))
    )
    have = admin.topic_partitions()
    names = {role: getattr(topics, role).name for _, role, _ in reads}
    counts = {}
    for role, name in names.items():
        if name not in have:
            raise ConfigError(f"unknown topic {name!r} ({role}; PRECAST_TOPICS__PREFIX)")
        counts[name] = have[name]
    if len(set(counts.values())) != 1:
        raise ConfigError(
            f"the event topics are not co-partitioned ({counts}): a device's records must share "
            "a partition number (precast topics ensure)"
        )
    n = next(iter(counts.values()))
    c = range_consumer(kafka, "dataset-resolve")
    try:
        ranges = {
            f"{what}:{role}": {
                r.partition: (r.start, r.end) for r in resolve_times(c, names[role], n, tr)
            }
            for what, role, tr in reads
        }
    finally:
        c.close()
    return Plan(window, names, ranges, n)


def build_partition(
    consumer: Consumer, fleet: Fleet, plan: Plan, p: int, progress: Callable[[int], None]
) -> PartitionRows:
    """The rows of partition p, read with `consumer` (one for the whole build: its metadata
    and connections are reused by every pass); `progress(n)` after each batch and for the
    ranges a pass can skip."""
    rows = PartitionRows(fleet, plan.window)
    _read(consumer, plan, "outcomes", rows.outcome_role, p, rows.outcomes, progress)
    labelled = bool(rows.plan())
    for role in rows.context_roles:
        _read(consumer, plan, "context", role, p, partial(rows.context, role), progress, labelled)
    rows.fold()
    _read(consumer, plan, "heartbeats", "heartbeats", p, rows.heartbeats, progress, labelled)
    return rows


def _read(
    consumer: Consumer,
    plan: Plan,
    what: str,
    role: str,
    p: int,
    sink: Callable[[list[KafkaMessage]], None],
    progress: Callable[[int], None],
    needed: bool = True,
) -> None:
    start, end = plan.ranges[f"{what}:{role}"][p]
    if not needed or end <= start:  # no outcomes in this partition: nothing else to read
        progress(max(0, end - start))
        return
    topic = plan.topics[role]
    try:
        for batch in RangeReader(consumer, topic, [OffsetRange(p, start, end)]):
            sink(batch)
            progress(len(batch))
    finally:
        # the reader pauses a partition it finished; the next pass may assign it again
        consumer.resume([TopicPartitionOffset(topic, p)])
