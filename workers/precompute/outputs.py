"""Where the loop's batches, rejected records and commits go: the `Output` seam. The worker's
own is `PredictionOutput` (predictions and worker state to Kafka through the delivery sink,
input offsets committed only once their outputs are acknowledged, or inside the same
transaction); the shadow run passes its own (workers.shadow.worker.ShadowOutput)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from precast.kafka import Consumer, KafkaMessage, TopicPartitionOffset
from precast.telemetry.trace_links import record_contexts
from precast.telemetry.tracing import Tracing
from schemas.deadletters import Reason
from workers.model.registry import ModelRegistry
from workers.model.serving_metrics import MODEL_FAILURES
from workers.precompute import metrics
from workers.precompute.config import LoopConfig
from workers.precompute.items import Pending
from workers.precompute.pipeline import BatchResult, Pipeline
from workers.precompute.publish.delivery import DEFER_S, SETTLE_S, AtLeastOnce, ExactlyOnce, Rewind

log = logging.getLogger("precast.workers")

Clock = Callable[[], int]  # ms; the policy's clock (throttle windows, predicted_at)
RunBatch = Callable[[list[Pending], float, bool], bool]


class Output(Protocol):
    """The loop's seam: what becomes of each batch, each rejected record and each commit."""

    batches: int  # batches produced so far
    next_commit: float  # monotonic time the next periodic commit falls due

    def run_batch(self, items: list[Pending], delay: float, latency: bool = True) -> bool:
        """Compute and produce one batch; False when it did not go out."""
        ...

    def reject(self, msg: KafkaMessage, reason: Reason, detail: str) -> None: ...

    def commit(self, sync: bool = False, rewind: bool = True) -> None: ...

    def discard(self) -> None:
        """Partitions were lost: forget whatever waits to be committed for them."""
        ...


def run_batches(pipeline: Pipeline, registry: ModelRegistry, run: RunBatch, force: bool) -> None:
    """Every batch due now (all of them with `force`), each with the model current at its start."""
    while True:
        items, delay = pipeline.next_batch(time.monotonic(), force)
        if not items:
            return
        registry.poll()  # a new version switches in here, between batches
        run(items, delay, True)


def drain(pipeline: Pipeline, registry: ModelRegistry, clock: Clock, run: RunBatch) -> None:
    """Predict everything waiting, throttled devices included (revoke, shutdown, EOS commit)."""
    pipeline.release_deferred(clock(), time.monotonic(), everything=True)
    run_batches(pipeline, registry, run, force=True)


class PredictionOutput:
    """The worker's output. Given the pipeline, the registry, the delivery sink, the consumer
    (commits go through it), the predictions and worker-state topics, the loop's settings, its
    clock, and what to do when a transaction aborted (`rewind`: back to the committed offsets).
    With tracing on, each batch is a `batch` span (linked to every input's trace, the first
    sampled input its parent) with `inference` and `produce` children, and every prediction it
    publishes carries the batch span's `traceparent` for the materializer to continue."""

    def __init__(
        self,
        pipeline: Pipeline,
        registry: ModelRegistry,
        sink: AtLeastOnce | ExactlyOnce,
        consumer: Consumer,
        predictions_topic: str,
        state_topic: str,
        cfg: LoopConfig,
        clock: Clock,
        rewind: Callable[[], None],
        tracing: Tracing | None = None,
    ) -> None:
        self.tracing = tracing or Tracing.off()
        self.pipeline, self.registry, self.sink, self.consumer = pipeline, registry, sink, consumer
        self.predictions_topic, self.state_topic = predictions_topic, state_topic
        self.cfg, self.clock, self._rewind = cfg, clock, rewind
        self.write_state = cfg.worker_state  # a backfill turns it off
        self.batches = 0
        self.next_commit = time.monotonic() + cfg.commit_interval_s
        # at-least-once: newest state record per device key since the last commit
        self._state: dict[bytes, bytes] = {}
        # at-least-once: offsets whose outputs and state records are on their way; committed
        # at the next moment everything produced is acknowledged (see `_commit_acknowledged`)
        self._held: list[TopicPartitionOffset] | None = None
        self._due_since = 0.0  # when the commit now waiting for acknowledgements fell due
        self._defer_until = 0.0  # no blocking commit before then (one was just put off)

    def run_batch(self, items: list[Pending], delay: float, latency: bool = True) -> bool:
        """Compute and produce one batch; False when the model failed (inputs dead-lettered).
        `latency=False`: not an answer to new input (lapsed answers), kept out of the
        event-to-prediction histogram."""
        items = self.pipeline.with_data(items)
        if not items:
            return True
        if self.tracing.enabled:  # when off, this check is all tracing costs a batch
            return self._traced_batch(items, delay, latency)
        return self._run_batch(items, delay, latency, None)

    def _traced_batch(self, items: list[Pending], delay: float, latency: bool) -> bool:
        ctx = record_contexts((m for it in items for m, _ in it.refs), "worker")
        attributes = {
            "precast.batch.items": len(items),
            "precast.batch.inputs": ctx.valid,
            "precast.batch.links": len(ctx.links),
        }
        with self.tracing.span("batch", parent=ctx.parent, links=ctx.links, attributes=attributes):
            return self._run_batch(items, delay, latency, self.tracing.header())

    def _run_batch(
        self, items: list[Pending], delay: float, latency: bool, traceparent: bytes | None
    ) -> bool:
        """`traceparent`: the batch span's, written on each prediction (None: tracing off)."""
        tracing = self.tracing
        model = self.registry.current  # one model for the whole batch
        now_ms = self.clock()
        result: BatchResult | None = None
        for attempt in (1, 2):
            t0 = time.perf_counter()
            try:
                if traceparent is None:
                    result = self.pipeline.compute(items, model, now_ms)
                else:
                    with tracing.span("inference", attributes={"precast.model": model.version}):
                        result = self.pipeline.compute(items, model, now_ms)
                break
            except Exception as exc:  # noqa: BLE001 - any model failure is handled the same way
                MODEL_FAILURES.labels(model.version).inc()
                log.error(
                    "inference failed on a batch of %d (attempt %d, model %s): %s",
                    len(items),
                    attempt,
                    model.version,
                    exc,
                )
                error = f"{type(exc).__name__}: {exc}"
            finally:
                metrics.INFER_S.observe(time.perf_counter() - t0)
        if result is None:
            for it in items:
                for m, _ in it.refs:
                    self.reject(m, Reason.MODEL_FAILURE, error)
            return False
        t0 = time.perf_counter()
        ages_s = (now_ms - result.computed_at) / 1000.0 if latency else None
        if traceparent is None:
            self._produce(result, now_ms, None)
        else:
            # precast.freshness_ms: what the deployment's tail sampling keeps slow answers by
            # (deploy/tracing/jaeger-tail-sampling.yaml)
            worst = {"precast.freshness_ms": int(ages_s.max() * 1000)} if ages_s is not None else {}
            with tracing.span("produce", kind="producer", attributes=worst):
                self._produce(result, now_ms, traceparent)
        metrics.STAGE["produce"].inc(time.perf_counter() - t0)
        self.batches += 1
        metrics.BATCH_SIZE.observe(len(items))
        metrics.QUEUE_DELAY.observe(delay)
        metrics.PREDICTIONS.labels(result.version).inc(len(items))
        if ages_s is not None:
            trace_id = traceparent[3:35].decode() if traceparent is not None else None
            metrics.observe_many(metrics.LATENCY, ages_s, trace_id)
        return True

    def _produce(self, result: BatchResult, now_ms: int, traceparent: bytes | None) -> None:
        keys = result.out.keys
        if traceparent is None:
            self.sink.produce(self.predictions_topic, keys, result.out.values)
        else:
            self.sink.produce(self.predictions_topic, keys, result.out.values, traceparent)
        self.pipeline.mark_predicted(result, now_ms)
        if self.write_state:
            state = self.pipeline.state_records(result)
            if self.sink.exactly_once:  # in the same transaction as the predictions
                self.sink.produce(self.state_topic, keys, state)
            else:  # at the commit, after the predictions are acknowledged (see _flush_state)
                self._state.update(zip(keys, state, strict=True))

    def reject(self, msg: KafkaMessage, reason: Reason, detail: str) -> None:
        self.sink.dead_letter(msg, reason, detail)

    def discard(self) -> None:
        self._state.clear()  # the new owner's state must not be overwritten by ours
        self._held = None  # nor its committed offsets by ours

    def commit(self, sync: bool = False, rewind: bool = True) -> None:
        t0 = time.perf_counter()
        try:
            self._commit(sync, rewind)
        finally:
            metrics.STAGE["commit"].inc(time.perf_counter() - t0)

    def _commit(self, sync: bool, rewind: bool) -> None:
        if not self.sink.exactly_once and not sync and self._commit_acknowledged():
            return
        self.next_commit = time.monotonic() + self.cfg.commit_interval_s
        self._held = None  # what follows commits everything consumed so far
        if self.sink.exactly_once:
            # a transaction commits all consumed input, so nothing may wait past it
            drain(self.pipeline, self.registry, self.clock, self.run_batch)
            offsets = self.pipeline.commit_offsets(include_pending=True)
            try:
                self.sink.commit(self.consumer, offsets)
            except Rewind as exc:
                if rewind:  # (on revoke there is nothing to rewind: the next owner re-reads)
                    log.warning("rewinding to the committed offsets: %s", exc)
                    self._rewind()
            self.sink.begin()
        elif isinstance(self.sink, AtLeastOnce):
            t = None if sync else SETTLE_S  # None: the sink's own bound (a sync commit raises)
            settled = self.sink.settle(sync, t)  # the predictions, then their state the same way
            if settled:
                self._flush_state()
            if settled and self.sink.settle(sync, t):
                offsets = self.pipeline.commit_offsets()
                self.sink.commit(self.consumer, offsets, sync=sync, flush=False)
            else:  # some outputs wait for a partition without a leader: go on, commit later
                self._defer_until = time.monotonic() + DEFER_S

    def _commit_acknowledged(self) -> bool:
        """At-least-once without blocking the loop: a commit that falls due waits for a moment
        when every output produced so far is acknowledged (a light or moderate load leaves
        many), the loop consuming and predicting meanwhile. Then the state records of what was
        predicted go out and the input offsets of that moment are held; at the next such
        moment the held offsets are committed. Both orders of the blocking commit hold: state
        only after its predictions are acknowledged, offsets only after their state. A flush
        would stop the loop for a broker round trip per commit (two with the state), and every
        record arriving meanwhile waited: on a slower machine, where that round trip is longer,
        this was a large share of the freshness tail. Returns False when the commit must block
        after all: it has waited a whole interval (the loop never idles at saturation)."""
        sink, mono = self.sink, time.monotonic()
        assert isinstance(sink, AtLeastOnce)
        if self._due_since < self.next_commit:
            self._due_since = mono
        if not sink.acknowledged():  # else block, unless a blocking commit was just put off
            return mono - self._due_since < self.cfg.commit_interval_s or mono < self._defer_until
        if self._held is not None:
            sink.commit(self.consumer, self._held, flush=False)
            self._held = None
        elif self._state:
            keys, values = list(self._state), list(self._state.values())
            self._state.clear()
            sink.produce(self.state_topic, keys, values)
            self._held = self.pipeline.commit_offsets()
            return True  # committed at the next moment all of it is acknowledged
        else:
            sink.commit(self.consumer, self.pipeline.commit_offsets(), flush=False)
        self.next_commit = mono + self.cfg.commit_interval_s
        return True

    def _flush_state(self) -> None:
        """At-least-once: the state of the devices predicted since the last commit goes out only
        once their predictions are acknowledged (the caller has settled them), then the commit
        flushes it with everything else. State produced with the predictions could be delivered
        without them (another partition, another batch) by a worker killed before its commit:
        the next owner would restore it and skip the re-read inputs as already seen, and their
        predictions would be lost. This way the restored state never runs ahead of the
        published predictions."""
        if not self._state:
            return
        keys, values = list(self._state), list(self._state.values())
        self._state.clear()
        self.sink.produce(self.state_topic, keys, values)
