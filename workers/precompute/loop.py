"""The worker loop: consume a batch of records -> pipeline (decode, policy, micro-batches,
inference) -> produce predictions -> commit inputs only once their outputs are acknowledged
(at-least-once) or inside the same transaction (exactly-once).

`Worker` holds its parts, each built alone by `workers.precompute.assembly` and handed in: the
consumer, the pipeline, the rebalancer (with the worker-state restorer), the lease publisher,
the delivery sink, and the output (`workers.precompute.outputs`: the worker's own, or the
shadow run's).

Group membership uses the `range` assignor: with every member subscribed to the same
co-partitioned topics it gives a member the same partition numbers of every topic, so a device's
heartbeats, work orders, alarms, context and precompute requests meet in one worker. (The
cooperative-sticky assignor balances each partition independently and breaks that.)
"""

from __future__ import annotations

import gc
import logging
import time
from operator import methodcaller

from precast.kafka import Consumer, TopicPartitionOffset
from precast.telemetry.tracing import Tracing
from workers.model.registry import ModelRegistry
from workers.precompute import metrics, outputs
from workers.precompute.config import LoopConfig
from workers.precompute.items import Pending
from workers.precompute.outputs import Clock, Output
from workers.precompute.pipeline import Pipeline
from workers.precompute.publish.delivery import AtLeastOnce, ExactlyOnce
from workers.precompute.publish.lease_publisher import LeasePublisher
from workers.precompute.rebalance import Membership, Rebalancer

log = logging.getLogger("precast.workers")

__all__ = ["LoopConfig", "Worker", "tune_gc", "wall_ms"]


def tune_gc() -> None:
    """For a worker process, after start-up: the loop allocates many short-lived containers per
    record (parsed JSON, tuples), and with Python's default gen-0 threshold (700) the cyclic
    collector runs every few records and walks the device table each time it reaches the old
    generations (measured: ~1.5x events/s with this). Reference counting still frees everything
    at once; only the rare cycles wait longer. Start-up objects are frozen out of collections."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1_000)


_TOPIC, _PARTITION, _OFFSET = map(methodcaller, ("topic", "partition", "offset"))


# How often a loop with a commit waiting for acknowledgements checks them when no record comes.
ACK_CHECK_S = 0.005


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Worker:
    """One worker process's loop. `assignment` (explicit partitions with start offsets) and
    `stop_at` ({(topic, partition): end offset, exclusive}) run a bounded range instead of
    joining the group's subscription (backfill, tests); `run()` returns once all are reached.
    `clock` is the policy's clock (throttle windows, predicted_at): the wall clock, or for a
    shadow run the records' own, so the policy decides as it did at the time."""

    def __init__(
        self,
        consumer: Consumer,
        sources: list[str],
        pipeline: Pipeline,
        registry: ModelRegistry,
        sink: AtLeastOnce | ExactlyOnce,
        output: Output,
        rebalancer: Rebalancer,
        leases: LeasePublisher,
        membership: Membership,
        cfg: LoopConfig,
        *,
        clock: Clock = wall_ms,
        assignment: list[TopicPartitionOffset] | None = None,
        stop_at: dict[tuple[str, int], int] | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.tracing = tracing or Tracing.off()
        self.consumer, self.sources, self.pipeline, self.registry = (
            consumer,
            sources,
            pipeline,
            registry,
        )
        self.sink, self.output, self.rebalancer, self.leases = sink, output, rebalancer, leases
        self.membership, self.cfg, self.clock = membership, cfg, clock
        self.assignment, self.stop_at = assignment, dict(stop_at or {})
        self._first_end = min(self.stop_at.values(), default=0)
        self.running = True
        self.last_loop = time.monotonic()
        self._next_lag = time.monotonic() + cfg.lag_interval_s

    @property
    def assigned(self) -> list[TopicPartitionOffset]:
        return self.membership.assigned

    @property
    def restoring(self) -> dict[int, int]:
        return self.membership.restoring

    @property
    def batches(self) -> int:
        return self.output.batches

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        self.pipeline.prime(self.registry.current)  # sensitivities before the first heartbeat
        self.sink.begin()
        if self.assignment is None:
            self.consumer.subscribe(
                self.sources,
                on_assign=self.rebalancer.assigned,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
        else:
            for tpo in self.assignment:
                end = self.stop_at.get((tpo.topic, tpo.partition))
                if end is not None and 0 <= end <= tpo.offset:
                    self.pipeline.positions[(tpo.topic, tpo.partition)] = end  # nothing to read
            self.consumer.assign(self.assignment)
            self.membership.assigned = list(self.assignment)

    def run(self) -> None:
        """Until `running` is cleared (SIGTERM) or every `stop_at` end is reached; then drain,
        flush and commit."""
        self.start()
        while self.running and not self.finished():
            self.step()
        self.drain()
        self.commit(sync=True)

    def close(self) -> None:
        self.consumer.close()  # leaves the group; the revoke hook finds nothing left to do
        self.rebalancer.close()
        self.registry.close()

    def finished(self) -> bool:
        if not self.stop_at:
            return False
        pos = self.pipeline.positions
        return all(pos.get(tp, -1) >= end for tp, end in self.stop_at.items() if end > 0)

    # -- the loop -------------------------------------------------------------------------------------
    def step(self) -> int:
        p, out = self.pipeline, self.output
        mono = time.monotonic()
        timeout = min(self.cfg.poll_timeout_s, out.next_commit - mono)
        if timeout <= 0 and not self.sink.exactly_once:  # a commit waits for acknowledgements
            timeout = ACK_CHECK_S
        release = p.next_release_ms()
        if release is not None:  # a throttled device's window ends: wake up for it
            timeout = min(timeout, (release - self.clock()) / 1000.0)
        t0 = time.perf_counter()
        if len(p.batcher):
            # Items wait for a fuller batch (max_queue_delay_ms): consume() fills until then.
            timeout = min(timeout, p.batcher.wait_s(mono))
            msgs = self.consumer.consume(self.cfg.consume_max, max(0.0, timeout))
        else:
            # Natural batching: wake on the first record, take what else is already fetched,
            # and go. A batch is then what arrived while the previous one ran, so it grows with
            # the load and costs no wait when the load is light (a plain batch consume waits
            # for a full batch or its whole timeout, which would be every record's latency).
            msgs = self.consumer.consume_available(self.cfg.consume_max, max(0.0, timeout))
        metrics.STAGE["consume"].inc(time.perf_counter() - t0)
        self.last_loop = mono = time.monotonic()
        if mono >= out.next_commit and not self.sink.exactly_once:
            self.commit()  # before this step produces anything: earlier outputs may be acked
        now_ms = self.clock()
        if self.stop_at and msgs:
            msgs = self._within_range(msgs)
        if msgs:
            if self.tracing.enabled:  # a `consume` span per poll that brought records
                attributes = {"messaging.batch.message_count": len(msgs)}
                with self.tracing.span("consume", kind="consumer", attributes=attributes):
                    p.ingest(msgs, now_ms, mono)
            else:
                p.ingest(msgs, now_ms, mono)
        if self.membership.restoring:
            self.rebalancer.check_restored()
        p.release_deferred(now_ms, mono)
        outputs.run_batches(p, self.registry, out.run_batch, force=False)
        if p.leases:  # validity leases of the assigned partitions, when due
            self.leases.publish(now_ms, self._answer_lapsed)
        if mono >= out.next_commit and self.sink.exactly_once:
            self.commit()
        if mono >= self._next_lag:
            self._update_lag()
        metrics.PENDING.set(p.pending)
        return len(msgs)

    def _answer_lapsed(self, items: list[Pending]) -> bool:
        return self.output.run_batch(items, 0.0, latency=False)

    def drain(self) -> None:
        """Predict everything waiting, throttled devices included (revoke, shutdown, EOS commit)."""
        outputs.drain(self.pipeline, self.registry, self.clock, self.output.run_batch)

    def commit(self, sync: bool = False, rewind: bool = True) -> None:
        self.output.commit(sync, rewind)

    def _on_revoke(self, parts: list[TopicPartitionOffset]) -> None:
        # Commit on revoke: everything consumed from these partitions gets its prediction and
        # its offset committed before another member takes over.
        self.rebalancer.revoked(parts, self._settle)

    def _settle(self) -> None:
        self.drain()
        self.commit(sync=True, rewind=False)

    def _on_lost(self, parts: list[TopicPartitionOffset]) -> None:
        self.output.discard()
        self.rebalancer.lost(parts)

    def _within_range(self, msgs: list) -> list:
        """Drop records at or past a partition's end offset (bounded runs), and pause it."""
        if max(map(_OFFSET, msgs)) < self._first_end:
            return msgs  # every record lies before every end offset
        # Offsets grow within a partition of one consume(): its last record is its largest.
        last = dict(
            zip(
                zip(map(_TOPIC, msgs), map(_PARTITION, msgs), strict=True),
                map(_OFFSET, msgs),
                strict=True,
            )
        )
        if not any(o >= self.stop_at.get(tp, o + 1) for tp, o in last.items()):
            return msgs  # nothing at or past an end: no per-record filtering
        out, done = [], set()
        for m in msgs:
            end = self.stop_at.get((m.topic(), m.partition()))
            if end is None or m.offset() < end:
                out.append(m)
            else:
                done.add((m.topic(), m.partition()))
        for t, p in done:
            self.pipeline.positions[(t, p)] = max(
                self.pipeline.positions.get((t, p), 0), self.stop_at[(t, p)]
            )
        if done:
            self.consumer.pause([TopicPartitionOffset(t, p) for t, p in done])
        return out

    def _update_lag(self) -> None:
        self._next_lag = time.monotonic() + self.cfg.lag_interval_s
        if self.membership.assigned:
            for p, lag in self.consumer.lag(self.membership.assigned):
                if lag >= 0:
                    metrics.LAG.labels(p.topic, str(p.partition)).set(lag)

    @property
    def ready(self) -> bool:
        return bool(self.membership.assigned) and not self.membership.restoring
