"""What a worker does when the group moves partitions (`Rebalancer`, a part of the loop):
restore the worker state and device context of gained partitions before their input is
processed, forget revoked and lost ones, and rewind to the committed offsets after an aborted
transaction. What the group gave the worker is kept in `Membership`, shared with the loop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from precast.kafka import OFFSET_BEGINNING, Consumer, TopicPartitionOffset, retry_settling
from workers.precompute.pipeline import Pipeline
from workers.precompute.publish.delivery import AtLeastOnce, ExactlyOnce
from workers.precompute.state.restore import StateRestorer

log = logging.getLogger("precast.workers")


@dataclass
class Membership:
    """What the group gave this worker, kept here because probes run on another thread and the
    client serializes calls (an assignment() from there waits behind consume())."""

    assigned: list[TopicPartitionOffset] = field(default_factory=list)
    restoring: dict[int, int] = field(default_factory=dict)  # context partition -> end offset
    paused: list[TopicPartitionOffset] = field(default_factory=list)  # until context is restored

    def drop(self, parts: list[TopicPartitionOffset]) -> None:
        gone = {(p.topic, p.partition) for p in parts}
        self.assigned = [p for p in self.assigned if (p.topic, p.partition) not in gone]


class Rebalancer:
    """Given the consumer, the pipeline, the delivery sink, the context topic, the membership it
    keeps up to date, and how to make the worker-state restorer (None: no worker state). The
    restorer is made at the first assignment that needs it, so a bounded run never opens its
    consumer."""

    def __init__(
        self,
        consumer: Consumer,
        pipeline: Pipeline,
        sink: AtLeastOnce | ExactlyOnce,
        context_topic: str,
        membership: Membership,
        restorer: Callable[[], StateRestorer] | None,
    ) -> None:
        self.consumer, self.pipeline, self.sink = consumer, pipeline, sink
        self.context_topic, self.membership = context_topic, membership
        self._make_restorer = restorer
        self._restorer: StateRestorer | None = None

    def close(self) -> None:
        if self._restorer is not None:
            self._restorer.close()

    def assigned(self, parts: list[TopicPartitionOffset]) -> None:
        ctx, m = self.context_topic, self.membership
        # Context is state, not input: restore each assigned context partition from the start.
        assigned = [
            TopicPartitionOffset(p.topic, p.partition, OFFSET_BEGINNING) if p.topic == ctx else p
            for p in parts
        ]
        gained = sorted({p.partition for p in parts})
        self.pipeline.awaiting.keep(gained)  # what a revoke kept (exactly-once) and is still ours
        self.restore_state(gained)
        # a new lease generation per gained partition, above what the restored state saw
        self.pipeline.assign_leases(gained, time.time_ns() // 1_000_000)
        self.consumer.assign(assigned)
        m.assigned = assigned
        m.restoring = {}
        for p in parts:
            if p.topic == ctx:
                low, high = self._watermarks(ctx, p.partition)
                if high > low:
                    m.restoring[p.partition] = high
        m.paused = [p for p in parts if p.topic != ctx] if m.restoring else []
        if m.paused:
            self.consumer.pause(m.paused)
        log.info("assigned %d partitions; restoring context of %d", len(parts), len(m.restoring))

    def restore_state(self, partitions: list[int]) -> None:
        """Worker state of these partitions from the changelog, before any of their input is
        processed (this runs inside the assignment callback, so consume() returns nothing of
        theirs until it is done)."""
        if self._make_restorer is None or not partitions:
            return
        if self._restorer is None:
            self._restorer = self._make_restorer()
        self._restorer.restore(partitions, self.pipeline.table)

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        # A just-created topic or a leader election answers NOT_LEADER for a moment.
        return retry_settling(
            lambda: self.consumer.watermarks(topic, partition, timeout=5.0),
            patience_s=15.0,
            what=f"watermarks of {topic}[{partition}]",
        )

    def check_restored(self) -> None:
        pos, m = self.pipeline.positions, self.membership
        ctx = self.context_topic
        if all(pos.get((ctx, p), 0) >= end for p, end in m.restoring.items()):
            m.restoring = {}
            if m.paused:
                self.consumer.resume(m.paused)
                m.paused = []

    def revoked(self, parts: list[TopicPartitionOffset], settle: Callable[[], None]) -> None:
        """Commit on revoke: `settle` predicts and commits everything consumed from these
        partitions before another member takes over; then they are forgotten."""
        log.info(
            "revoking %d partitions: draining %d waiting devices, then committing",
            len(parts),
            self.pipeline.pending,
        )
        try:
            settle()
        finally:
            self.pipeline.forget(
                sorted({p.partition for p in parts}), keep_awaiting=self.sink.exactly_once
            )
            self.sink.forget(parts)
            self.membership.restoring = {}
            self.membership.drop(parts)

    def lost(self, parts: list[TopicPartitionOffset]) -> None:
        """Too late to commit: another member owns these now. Outputs already produced are
        duplicates at worst (at-least-once); an open transaction is aborted. (The loop drops
        its unsent state records and held offsets first.)"""
        log.warning("lost %d partitions", len(parts))
        self.sink.abort()
        self.sink.begin()
        self.pipeline.forget(sorted({p.partition for p in parts}))
        self.sink.forget(parts)
        self.membership.drop(parts)

    def rewind(self) -> None:
        """Back to the committed offsets after an aborted transaction."""
        parts = self.consumer.assignment()
        self.pipeline.reset()
        self.restore_state(sorted({p.partition for p in parts}))
        self.pipeline.rewarm_leases()  # the re-read input must be seen again before a lease
        ctx = self.context_topic
        committed = {(c.topic, c.partition): c.offset for c in self.consumer.committed(parts)}
        for p in parts:
            off = (
                OFFSET_BEGINNING
                if p.topic == ctx
                else committed.get((p.topic, p.partition), OFFSET_BEGINNING)
            )
            self.consumer.seek(
                TopicPartitionOffset(p.topic, p.partition, off if off >= 0 else OFFSET_BEGINNING)
            )
