"""What a worker does when the group moves partitions (`Rebalancing`, mixed into `Worker`):
restore the worker state and device context of gained partitions before their input is
processed, drain and commit before revoked ones go, forget lost ones, and rewind to the
committed offsets after an aborted transaction."""

from __future__ import annotations

import logging
import time

from precast.kafka import OFFSET_BEGINNING, Consumer, TopicPartitionOffset, retry_settling
from precast.settings import KafkaSettings
from schemas.topics import Topics
from workers.precompute.config import LoopConfig
from workers.precompute.delivery import AtLeastOnce, ExactlyOnce
from workers.precompute.pipeline import Pipeline
from workers.precompute.restore import StateRestorer

log = logging.getLogger("precast.workers")


class Rebalancing:
    """The group-membership half of `Worker`."""

    cfg: LoopConfig
    topics: Topics
    consumer: Consumer
    pipeline: Pipeline
    sink: AtLeastOnce | ExactlyOnce
    assigned: list[TopicPartitionOffset]
    restoring: dict[int, int]
    _paused: list[TopicPartitionOffset]
    _state: dict[bytes, bytes]
    _held: list[TopicPartitionOffset] | None
    _restorer: StateRestorer | None
    _kafka: KafkaSettings

    def drain(self) -> None:
        raise NotImplementedError

    def commit(self, sync: bool = False, rewind: bool = True) -> None:
        raise NotImplementedError

    # -- rebalancing ----------------------------------------------------------------------------------
    def _on_assign(self, parts: list[TopicPartitionOffset]) -> None:
        ctx = self.topics.device_context.name
        # Context is state, not input: restore each assigned context partition from the start.
        assigned = [
            TopicPartitionOffset(p.topic, p.partition, OFFSET_BEGINNING) if p.topic == ctx else p
            for p in parts
        ]
        gained = sorted({p.partition for p in parts})
        self.pipeline.awaiting.keep(gained)  # what a revoke kept (exactly-once) and is still ours
        self._restore_state(gained)
        # a new lease generation per gained partition, above what the restored state saw
        self.pipeline.assign_leases(gained, time.time_ns() // 1_000_000)
        self.consumer.assign(assigned)
        self.assigned = assigned
        self.restoring = {}
        for p in parts:
            if p.topic == ctx:
                low, high = self._watermarks(ctx, p.partition)
                if high > low:
                    self.restoring[p.partition] = high
        self._paused = [p for p in parts if p.topic != ctx] if self.restoring else []
        if self._paused:
            self.consumer.pause(self._paused)
        log.info("assigned %d partitions; restoring context of %d", len(parts), len(self.restoring))

    def _restore_state(self, partitions: list[int]) -> None:
        """Worker state of these partitions from the changelog, before any of their input is
        processed (this runs inside the assignment callback, so consume() returns nothing of
        theirs until it is done)."""
        if not self.cfg.worker_state or not partitions:
            return
        if self._restorer is None:
            self._restorer = StateRestorer(
                self._kafka, self.topics.worker_state.name, read_committed=self.cfg.exactly_once
            )
        self._restorer.restore(partitions, self.pipeline.table)

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        # A just-created topic or a leader election answers NOT_LEADER for a moment.
        return retry_settling(
            lambda: self.consumer.watermarks(topic, partition, timeout=5.0),
            patience_s=15.0,
            what=f"watermarks of {topic}[{partition}]",
        )

    def _check_restored(self) -> None:
        pos = self.pipeline.positions
        ctx = self.topics.device_context.name
        if all(pos.get((ctx, p), 0) >= end for p, end in self.restoring.items()):
            self.restoring = {}
            if self._paused:
                self.consumer.resume(self._paused)
                self._paused = []

    def _on_revoke(self, parts: list[TopicPartitionOffset]) -> None:
        # Commit on revoke: everything consumed from these partitions gets its prediction and
        # its offset committed before another member takes over.
        log.info(
            "revoking %d partitions: draining %d waiting devices, then committing",
            len(parts),
            self.pipeline.pending,
        )
        try:
            self.drain()
            self.commit(sync=True, rewind=False)
        finally:
            self.pipeline.forget(
                sorted({p.partition for p in parts}), keep_awaiting=self.sink.exactly_once
            )
            self.sink.forget(parts)
            self.restoring = {}
            gone = {(p.topic, p.partition) for p in parts}
            self.assigned = [p for p in self.assigned if (p.topic, p.partition) not in gone]

    def _on_lost(self, parts: list[TopicPartitionOffset]) -> None:
        # Too late to commit: another member owns these now. Outputs already produced are
        # duplicates at worst (at-least-once); an open transaction is aborted.
        log.warning("lost %d partitions", len(parts))
        self.sink.abort()
        self.sink.begin()
        self._state.clear()  # the new owner's state must not be overwritten by ours
        self._held = None  # nor its committed offsets by ours
        self.pipeline.forget(sorted({p.partition for p in parts}))
        self.sink.forget(parts)
        gone = {(p.topic, p.partition) for p in parts}
        self.assigned = [p for p in self.assigned if (p.topic, p.partition) not in gone]

    def _rewind(self) -> None:
        parts = self.consumer.assignment()
        self.pipeline.reset()
        self._restore_state(sorted({p.partition for p in parts}))
        self.pipeline.rewarm_leases()  # the re-read input must be seen again before a lease
        ctx = self.topics.device_context.name
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
