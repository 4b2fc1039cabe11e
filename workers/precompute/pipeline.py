"""The worker's pure core: records in -> decisions -> micro-batches -> PredictionSet records out.
No Kafka client here (records are anything satisfying `KafkaMessage`), so it is unit-testable
and reusable by a backfill that feeds it a bounded offset range (docs/workers.md).

`Pipeline` holds its parts, each built alone and handed in by `build_pipeline`: the ingest
(`Ingest`, with `HeartbeatIngest`), the work queue (`WorkQueue`), the scorer (`Scorer`) and
the lease book (`LeaseBook`), over one `PipelineState` they share."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from precast.deadletter import RejectLetters
from precast.fleet import Fleet, load_fleet
from precast.guard import Guard
from precast.kafka import KafkaMessage, TopicPartitionOffset
from schemas.topics import Topics
from workers.model.predictor import Predictor
from workers.precompute import metrics
from workers.precompute.config import PipelineConfig
from workers.precompute.decide.awaiting import AwaitingData
from workers.precompute.decide.batching import MicroBatcher
from workers.precompute.decide.routing import WorkQueue
from workers.precompute.ingest.decode import Decoder, Reject
from workers.precompute.ingest.heartbeats import HeartbeatIngest
from workers.precompute.ingest.router import Ingest, input_topics
from workers.precompute.items import Pending, Reason
from workers.precompute.publish.lease_book import LeaseBook, LeaseTick, PartitionLease
from workers.precompute.score.scorer import BatchResult, Scorer, StateRef
from workers.precompute.state.device_table import DeviceTable
from workers.precompute.state.shared import PipelineState

log = logging.getLogger("precast.workers.precompute.pipeline")

__all__ = ["BatchResult", "Pipeline", "PipelineConfig", "build_pipeline"]


def build_pipeline(
    topics: Topics,
    cfg: PipelineConfig,
    reject: Reject,
    fleet: Fleet | None = None,
    reader: str = "worker",
) -> Pipeline:
    """Every part of a pipeline, built here and handed in. `reject` dead-letters a bad record
    (the shadow run counts it instead); `reader` names the guard's counter."""
    # The fleet spec, compiled: decoders, context reducer, features (the built-in fleet
    # unless the worker's settings name another).
    fleet = fleet or load_fleet()
    state = PipelineState(cfg, fleet, DeviceTable(top_k=cfg.top_k, fleet=fleet))
    # The boundary for what no decoder expects (precast.guard): the record is counted,
    # logged (bounded) and dead-lettered through `reject`, and the loop goes on.
    guard = Guard(reader, log, RejectLetters(reject))
    decoder = Decoder(fleet, _count_unknown)
    queue = WorkQueue(state)
    heartbeats = HeartbeatIngest(state, queue, decoder, guard, reject)
    ingest = Ingest(state, queue, heartbeats, decoder, guard, reject, input_topics(topics))
    leases = LeaseBook(
        state
    )  # validity leases per assigned partition (workers.precompute.publish.lease_book)
    scorer = Scorer(state, leases, topics.heartbeats.name)
    return Pipeline(state, queue, ingest, scorer, leases, topics.device_context.name)


class Pipeline:
    def __init__(
        self,
        state: PipelineState,
        queue: WorkQueue,
        ingest: Ingest,
        scorer: Scorer,
        leases: LeaseBook,
        context_topic: str,
    ) -> None:
        self.state, self.queue, self.intake, self.scorer, self.lease_book = (
            state,
            queue,
            ingest,
            scorer,
            leases,
        )
        self.context_topic = context_topic  # state, not input: never committed

    # -- what the loop, the rebalancer and their tests read ----------------------------------------
    @property
    def cfg(self) -> PipelineConfig:
        return self.state.cfg

    @cfg.setter
    def cfg(self, cfg: PipelineConfig) -> None:  # a bounded run's own policy, for every part
        self.state.cfg = cfg

    @property
    def table(self) -> DeviceTable:
        return self.state.table

    @table.setter
    def table(self, table: DeviceTable) -> None:
        self.state.table = table

    @property
    def positions(self) -> dict[tuple[str, int], int]:
        """The next offset consumed, per (topic, partition)."""
        return self.state.positions

    @property
    def fleet(self) -> Fleet:
        return self.state.fleet

    @property
    def decoder(self) -> Decoder:
        return self.intake.decoder

    @property
    def guard(self) -> Guard:
        return self.intake.guard

    @property
    def stream_of(self) -> dict[str, str]:
        return self.intake.stream_of

    @property
    def decisions(self) -> Callable[[Reason, int], None]:
        return self.state.decisions

    @decisions.setter
    def decisions(self, count: Callable[[Reason, int], None]) -> None:
        self.state.decisions = count

    @property
    def on_defer(self) -> Callable[[Pending], None] | None:
        return self.queue.on_defer

    @on_defer.setter
    def on_defer(self, hook: Callable[[Pending], None] | None) -> None:
        self.queue.on_defer = hook

    @property
    def batcher(self) -> MicroBatcher[Pending]:
        return self.queue.batcher

    @property
    def awaiting(self) -> AwaitingData:
        return self.queue.awaiting

    @property
    def leases(self) -> dict[int, PartitionLease]:
        return self.lease_book.leases

    @property
    def pending(self) -> int:
        return self.queue.pending

    # -- ingest ---------------------------------------------------------------------------------------
    def ingest(self, msgs: Sequence[KafkaMessage], now_ms: int, mono: float) -> None:
        self.intake.ingest(msgs, now_ms, mono)

    def mark_hot(self, devices: Sequence[str], until_ms: int) -> int:
        return self.intake.mark_hot(devices, until_ms)

    # -- batches --------------------------------------------------------------------------------------
    def release_deferred(self, now_ms: int, mono: float, everything: bool = False) -> int:
        return self.queue.release_deferred(now_ms, mono, everything)

    def next_release_ms(self) -> int | None:
        return self.queue.next_release_ms()

    def next_batch(self, mono: float, force: bool = False) -> tuple[list[Pending], float]:
        return self.queue.next_batch(mono, force)

    def with_data(self, items: list[Pending]) -> list[Pending]:
        """The items whose device has data of its own (a request may have waited in a batch while
        its partition was revoked and restored; anything else is counted and dropped)."""
        has = self.state.table.has_data
        keep = [it for it in items if has(it.device)]
        if len(keep) != len(items):
            metrics.NO_DATA.inc(len(items) - len(keep))
        return keep

    def prime(self, model: Predictor) -> None:
        self.scorer.prime(model)

    def compute(self, items: list[Pending], model: Predictor, produced_at_ms: int) -> BatchResult:
        return self.scorer.compute(items, model, produced_at_ms)

    def features_of(
        self, devices: Sequence[str], slots: np.ndarray, no_data_ms: int = -1
    ) -> tuple[np.ndarray, np.ndarray]:
        return self.scorer.features_of(devices, slots, no_data_ms)

    def mark_predicted(self, r: BatchResult, now_ms: int) -> None:
        self.scorer.mark_predicted(r, now_ms)

    def state_records(self, r: BatchResult) -> list[bytes]:
        return self.scorer.state_records(r)

    # -- leases ---------------------------------------------------------------------------------------
    def lease_tick(self, now_ms: int) -> LeaseTick:
        return self.lease_book.lease_tick(now_ms)

    def assign_leases(self, partitions: list[int], now_ms: int) -> None:
        self.lease_book.assign_leases(partitions, now_ms)

    def forget_leases(self, partitions: list[int] | set[int]) -> None:
        self.lease_book.forget_leases(partitions)

    def rewarm_leases(self) -> None:
        self.lease_book.rewarm_leases()

    # -- offsets and partitions -----------------------------------------------------------------------
    def commit_offsets(self, include_pending: bool = False) -> list[TopicPartitionOffset]:
        """Next offsets safe to commit: everything consumed, except that a partition stops at
        the oldest record still waiting for its prediction (queued, throttled, or a request
        waiting for its device's data)."""
        safe = {tp: o for tp, o in self.state.positions.items() if tp[0] != self.context_topic}
        if not include_pending:
            for it in self.queue:
                for m, _ in it.refs:
                    if type(m) is StateRef:  # a record consumed long ago, not one that waits
                        continue
                    tp = (m.topic(), m.partition())
                    if tp in safe and m.offset() < safe[tp]:
                        safe[tp] = m.offset()
        return [TopicPartitionOffset(t, p, o) for (t, p), o in sorted(safe.items())]

    def forget(self, partitions: Sequence[int], keep_awaiting: bool = False) -> None:
        """Drop state, positions and waiting work of these partition indexes (revoked/lost).
        `keep_awaiting`: requests waiting for data stay until the next assignment says whose
        partitions they are (exactly-once: their offsets are committed, so nobody reads them
        again; a worker given the partition back still answers them)."""
        parts = set(partitions)
        self.state.table.forget_partitions(parts)
        self.lease_book.forget_leases(parts)
        positions = self.state.positions
        for tp in [tp for tp in positions if tp[1] in parts]:
            del positions[tp]
        self.queue.forget(parts, keep_awaiting)

    def reset(self) -> None:
        """Forget everything (after an aborted transaction the consumer rewinds to committed)."""
        self.state.table.clear()
        self.state.positions.clear()
        self.queue.reset()


def _count_unknown(field: str, n: int) -> None:
    metrics.UNKNOWN_CATEGORY.labels(field).inc(n)
