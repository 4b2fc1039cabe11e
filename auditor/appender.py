"""Consume the predictions topic and append one leaf per record; sign and publish checkpoints.

Positions come only from the log's own store (leaves and next offsets commit in one SQLite
transaction), so a kill -9 at any point resumes exactly after the last stored leaf: no gap, no
duplicate. A checkpoint is signed over the in-memory frontier, stored with a full fsync, and
only then mirrored to the compacted checkpoints topic.

A record whose value cannot be read still gets its leaf (`invalid`, precast.audit.leaf), counted
through `precast.guard` (`precast_records_rejected_total{reader="auditor"}`, a bounded log
line); the loop runs under `precast.supervise`: a failure restarts it from the log's own
positions (counted), one that keeps failing turns health false and ends the process.

With tracing on, each leaf batch is an `append` span linked to its records' traces (the first
sampled one its parent: the answer's trace then shows where it was logged)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import orjson

from auditor import metrics
from precast.audit.batch import prepare
from precast.audit.checkpoint import Checkpoint, Signer
from precast.audit.store import LogStore
from precast.guard import Guard
from precast.kafka import OFFSET_BEGINNING, Consumer, KafkaMessage, Producer, TopicPartitionOffset
from precast.supervise import Supervised
from precast.telemetry.trace_links import record_contexts
from precast.telemetry.tracing import Tracing

log = logging.getLogger("auditor.appender")

# Called after each checkpoint with (publish time ms, Kafka timestamps of the records it newly
# covers): the benchmark measures checkpoint lag through it.
LagHook = Callable[[int, list[int]], None]


class Appender:
    def __init__(
        self,
        store: LogStore,
        signer: Signer,
        consumer: Consumer,
        producer: Producer | None,
        *,
        topic: str,
        checkpoint_topic: str | None,
        partitions: int,
        interval_s: float = 1.0,
        batch: int = 5_000,
        on_checkpoint: LagHook | None = None,
        supervised: Supervised | None = None,  # its restart policy (tests pass their own)
        tracing: Tracing | None = None,
    ) -> None:
        self.tracing = tracing or Tracing.off()
        self.store, self.signer, self.consumer, self.producer = store, signer, consumer, producer
        self.topic, self.checkpoint_topic, self.partitions = topic, checkpoint_topic, partitions
        self.interval_s, self.batch, self.on_checkpoint = interval_s, batch, on_checkpoint
        store.bind(signer.name, topic)
        self.tree = store.frontier()
        self.offsets = store.offsets()
        self._uncovered: list[int] = []  # Kafka timestamps of leaves no checkpoint covers yet
        self._last_checkpoint = 0.0
        self.last_checkpoint_at = 0.0
        self.guard = Guard("auditor", log)
        self.supervised = supervised or Supervised("audit-appender")
        self._runs = 0
        self._stop = threading.Event()

    @property
    def error(self) -> BaseException | None:
        """Set once the loop failed too often and gave up (health turns false)."""
        return self.supervised.failure

    def assign(self) -> None:
        self.consumer.assign(
            [
                TopicPartitionOffset(self.topic, p, self.offsets.get(p, OFFSET_BEGINNING))
                for p in range(self.partitions)
            ]
        )

    # -- the loop ---------------------------------------------------------------------------------
    def step(self, timeout: float = 0.1) -> int:
        msgs = self.consumer.consume(self.batch, timeout)
        if msgs:
            self.append(msgs)
        if time.monotonic() - self._last_checkpoint >= self.interval_s:
            self.checkpoint()
        return len(msgs)

    def run(self) -> None:
        """Until `stop()`, or until the loop failed too often (`error` is then set)."""
        try:
            loop = self.supervised.thread(self._loop, self._stop)
            loop.start()
            loop.join()
        finally:
            try:
                if self.producer is not None:
                    self.producer.flush(10)
            finally:
                self.consumer.close()
                self.store.close()  # the last connection folds the WAL back into the file

    def _loop(self) -> None:
        self._runs += 1
        if self._runs > 1:  # a restart: resume after the last stored leaf
            self.tree = self.store.frontier()
            self.offsets = self.store.offsets()
        self.assign()
        while not self._stop.is_set():
            self.step()
        self.checkpoint()

    def stop(self) -> None:
        self._stop.set()

    # -- appending --------------------------------------------------------------------------------
    def append(self, msgs: list[KafkaMessage]) -> None:
        started = time.perf_counter()
        offsets = self.offsets
        # A record below a partition's stored position is already in the log (a refetch).
        fresh = [m for m in msgs if m.offset() >= offsets.get(m.partition(), -1)]
        if not fresh:
            return
        if self.tracing.enabled:
            ctx = record_contexts(fresh, "auditor")
            attributes = {"precast.leaves": len(fresh), "precast.links": len(ctx.links)}
            with self.tracing.span(
                "append", parent=ctx.parent, links=ctx.links, attributes=attributes
            ):
                self._append(fresh, started)
        else:
            self._append(fresh, started)

    def _append(self, fresh: list[KafkaMessage], started: float) -> None:
        offsets = self.offsets
        topic = self.topic
        batch = prepare(topic, fresh, self.tree, self.guard.reject)
        self.store.append(batch.rows, batch.tree, batch.nodes, batch.ends)
        self.tree = batch.tree
        offsets.update(batch.ends)
        self._uncovered.extend(m.timestamp()[1] for m in fresh)
        if self.producer is not None:  # let Kafka lag tools see the auditor's position
            self.consumer.commit(
                [TopicPartitionOffset(topic, p, o) for p, o in batch.ends.items()],
                asynchronous=True,
            )
        kinds: dict[str, int] = {}
        for x in batch.leaves:
            kinds[x.kind] = kinds.get(x.kind, 0) + 1
        for kind, n in kinds.items():
            metrics.LEAVES.labels(kind).inc(n)
        metrics.TREE_SIZE.set(batch.tree.size)
        metrics.APPEND_SECONDS.observe(time.perf_counter() - started)

    # -- checkpoints ------------------------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        self._last_checkpoint = time.monotonic()
        cp = Checkpoint(self.signer.name, self.tree.size, self.tree.root())
        note = self.signer.sign(cp)
        now_ms = int(time.time() * 1000)
        self.store.add_checkpoint(cp.size, cp.root, note, now_ms)  # fsync before publishing
        if self.producer is not None and self.checkpoint_topic:
            doc = {"size": cp.size, "root": cp.root.hex(), "published_at_ms": now_ms, "note": note}
            self.producer.produce(self.checkpoint_topic, cp.origin.encode(), orjson.dumps(doc))
            self.producer.poll(0)
        covered, self._uncovered = self._uncovered, []
        if covered:
            metrics.CHECKPOINT_LAG.observe(max(0, now_ms - min(covered)) / 1000)
            if self.on_checkpoint is not None:
                self.on_checkpoint(now_ms, covered)
        metrics.CHECKPOINTS.inc()
        metrics.LAST_CHECKPOINT.set(now_ms / 1000)
        self.last_checkpoint_at = time.time()
        return cp
