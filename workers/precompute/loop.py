"""The worker loop: consume a batch of records -> pipeline (decode, policy, micro-batches,
inference) -> produce predictions -> commit inputs only once their outputs are acknowledged
(at-least-once) or inside the same transaction (exactly-once).

Group membership uses the `range` assignor: with every member subscribed to the same
co-partitioned topics it gives a member the same partition numbers of every topic, so a device's
heartbeats, work orders, alarms, context and precompute requests meet in one worker. (The
cooperative-sticky assignor balances each partition independently and breaks that.)
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from operator import methodcaller
from typing import Any

from precast.fleet import Fleet
from precast.kafka import Consumer, KafkaMessage, TopicPartitionOffset
from precast.settings import KafkaSettings
from schemas.deadletters import Reason
from schemas.topics import Topics
from workers.model.registry import ModelRegistry
from workers.model.serving_metrics import MODEL_FAILURES
from workers.precompute import metrics
from workers.precompute.config import LoopConfig
from workers.precompute.delivery import DEFER_S, SETTLE_S, AtLeastOnce, ExactlyOnce, Rewind
from workers.precompute.lease_loop import LeasePublishing
from workers.precompute.pipeline import Pipeline, PipelineConfig
from workers.precompute.rebalance import Rebalancing
from workers.precompute.restore import StateRestorer

log = logging.getLogger("precast.workers")

__all__ = ["LoopConfig", "Worker", "tune_gc"]


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


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Worker(Rebalancing, LeasePublishing):
    """One worker process's loop. `assignment` (explicit partitions with start offsets) and
    `stop_at` ({(topic, partition): end offset, exclusive}) run a bounded range instead of
    joining the group's subscription (backfill, tests); `run()` returns once all are reached."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topics: Topics,
        registry: ModelRegistry,
        pipeline: PipelineConfig | None = None,
        cfg: LoopConfig | None = None,
        *,
        assignment: list[TopicPartitionOffset] | None = None,
        stop_at: dict[tuple[str, int], int] | None = None,
        fleet: Fleet | None = None,
    ) -> None:
        cfg = cfg or LoopConfig()
        self.cfg, self.topics, self.registry = cfg, topics, registry
        self.sink: AtLeastOnce | ExactlyOnce = (
            ExactlyOnce(
                kafka,
                topics.dead_letters.name,
                cfg.transactional_id,
                cfg.transaction_timeout_ms,
                cfg.linger_ms,
            )
            if cfg.exactly_once
            else AtLeastOnce(kafka, topics.dead_letters.name, cfg.linger_ms)
        )
        overrides: dict[str, Any] = {"partition.assignment.strategy": "range"}
        if cfg.exactly_once:
            overrides["isolation.level"] = "read_committed"
        # A bounded prefetch: a worker that lags by 100k records held them all (librdkafka
        # fetches ahead until 100,000 wait), +15-18 % RSS in the one-core soak; 20,000 keep a
        # backlog drain as fast (docs/workers.md, "Memory").
        self.consumer = Consumer(kafka, cfg.group_id, bounded_prefetch=20_000, **overrides)
        self.pipeline = Pipeline(topics, pipeline or PipelineConfig(), self._reject, fleet)
        self.assignment, self.stop_at = assignment, dict(stop_at or {})
        self._first_end = min(self.stop_at.values(), default=0)
        self.sources = [
            topics.heartbeats.name,
            topics.work_orders.name,
            topics.alarms.name,
            topics.precompute_requests.name,
            topics.device_context.name,
            topics.read_hints.name,
        ]
        self.running = True
        self.last_loop = time.monotonic()
        # What the group gave us, kept here because probes run on another thread and the client
        # serializes calls (an assignment() from there waits behind consume()).
        self.assigned: list[TopicPartitionOffset] = []
        self.restoring: dict[int, int] = {}  # context partition -> end offset to restore up to
        self._paused: list[TopicPartitionOffset] = []
        self._next_commit = time.monotonic() + cfg.commit_interval_s
        self._next_lag = time.monotonic() + cfg.lag_interval_s
        self.batches = 0
        # The policy's clock (throttle windows, predicted_at). A shadow run replays history on
        # the event-time clock instead, so the policy decides as it did at the time.
        self.clock: Callable[[], int] = _now_ms
        self.write_state = cfg.worker_state
        # at-least-once: newest state record per device key since the last commit
        self._state: dict[bytes, bytes] = {}
        # at-least-once: offsets whose outputs and state records are on their way; committed
        # at the next moment everything produced is acknowledged (see `_commit_acknowledged`)
        self._held: list[TopicPartitionOffset] | None = None
        self._due_since = 0.0  # when the commit now waiting for acknowledgements fell due
        self._defer_until = 0.0  # no blocking commit before then (one was just put off)
        self._restorer: StateRestorer | None = None
        self._kafka = kafka

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        self.pipeline.prime(self.registry.current)  # sensitivities before the first heartbeat
        self.sink.begin()
        if self.assignment is None:
            self.consumer.subscribe(
                self.sources,
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
        else:
            for tpo in self.assignment:
                end = self.stop_at.get((tpo.topic, tpo.partition))
                if end is not None and 0 <= end <= tpo.offset:
                    self.pipeline.positions[(tpo.topic, tpo.partition)] = end  # nothing to read
            self.consumer.assign(self.assignment)
            self.assigned = list(self.assignment)

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
        if self._restorer is not None:
            self._restorer.close()
        self.registry.close()

    def finished(self) -> bool:
        if not self.stop_at:
            return False
        pos = self.pipeline.positions
        return all(pos.get(tp, -1) >= end for tp, end in self.stop_at.items() if end > 0)

    # -- the loop -------------------------------------------------------------------------------------
    def step(self) -> int:
        p = self.pipeline
        mono = time.monotonic()
        timeout = min(self.cfg.poll_timeout_s, self._next_commit - mono)
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
        if mono >= self._next_commit and not self.sink.exactly_once:
            self.commit()  # before this step produces anything: earlier outputs may be acked
        now_ms = self.clock()
        if self.stop_at and msgs:
            msgs = self._within_range(msgs)
        if msgs:
            p.ingest(msgs, now_ms, mono)
        if self.restoring:
            self._check_restored()
        p.release_deferred(now_ms, mono)
        self._run_batches(force=False)
        if p.leases:  # validity leases of the assigned partitions, when due
            self.publish_leases(now_ms)
        if mono >= self._next_commit and self.sink.exactly_once:
            self.commit()
        if mono >= self._next_lag:
            self._update_lag()
        metrics.PENDING.set(p.pending)
        return len(msgs)

    def _run_batches(self, force: bool) -> None:
        while True:
            items, delay = self.pipeline.next_batch(time.monotonic(), force)
            if not items:
                return
            self.registry.poll()  # a new version switches in here, between batches
            self._run_batch(items, delay)

    def _run_batch(self, items: list, delay: float, latency: bool = True) -> bool:
        """Compute and produce one batch; False when the model failed (inputs dead-lettered).
        `latency=False`: not an answer to new input (lapsed answers), kept out of the
        event-to-prediction histogram."""
        items = self.pipeline.with_data(items)
        if not items:
            return True
        model = self.registry.current  # one model for the whole batch
        now_ms = self.clock()
        result = None
        for attempt in (1, 2):
            t0 = time.perf_counter()
            try:
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
                    self._reject(m, Reason.MODEL_FAILURE, error)
            return False
        t0 = time.perf_counter()
        self.sink.produce(self.topics.predictions.name, result.out.keys, result.out.values)
        self.pipeline.mark_predicted(result, now_ms)
        if self.write_state:
            state = self.pipeline.state_records(result)
            if self.sink.exactly_once:  # in the same transaction as the predictions
                self.sink.produce(self.topics.worker_state.name, result.out.keys, state)
            else:  # at the commit, after the predictions are acknowledged (see _flush_state)
                self._state.update(zip(result.out.keys, state, strict=True))
        metrics.STAGE["produce"].inc(time.perf_counter() - t0)
        self.batches += 1
        metrics.BATCH_SIZE.observe(len(items))
        metrics.QUEUE_DELAY.observe(delay)
        metrics.PREDICTIONS.labels(result.version).inc(len(items))
        if latency:
            metrics.observe_many(metrics.LATENCY, (now_ms - result.computed_at) / 1000.0)
        return True

    def drain(self) -> None:
        """Predict everything waiting, throttled devices included (revoke, shutdown, EOS commit)."""
        self.pipeline.release_deferred(self.clock(), time.monotonic(), everything=True)
        self._run_batches(force=True)

    def commit(self, sync: bool = False, rewind: bool = True) -> None:
        t0 = time.perf_counter()
        try:
            self._commit(sync, rewind)
        finally:
            metrics.STAGE["commit"].inc(time.perf_counter() - t0)

    def _commit(self, sync: bool, rewind: bool) -> None:
        if not self.sink.exactly_once and not sync and self._commit_acknowledged():
            return
        self._next_commit = time.monotonic() + self.cfg.commit_interval_s
        self._held = None  # what follows commits everything consumed so far
        if self.sink.exactly_once:
            self.drain()  # a transaction commits all consumed input, so nothing may wait past it
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
        if self._due_since < self._next_commit:
            self._due_since = mono
        if not sink.acknowledged():  # else block, unless a blocking commit was just put off
            return mono - self._due_since < self.cfg.commit_interval_s or mono < self._defer_until
        if self._held is not None:
            sink.commit(self.consumer, self._held, flush=False)
            self._held = None
        elif self._state:
            keys, values = list(self._state), list(self._state.values())
            self._state.clear()
            sink.produce(self.topics.worker_state.name, keys, values)
            self._held = self.pipeline.commit_offsets()
            return True  # committed at the next moment all of it is acknowledged
        else:
            sink.commit(self.consumer, self.pipeline.commit_offsets(), flush=False)
        self._next_commit = mono + self.cfg.commit_interval_s
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
        self.sink.produce(self.topics.worker_state.name, keys, values)

    def _reject(self, msg: KafkaMessage, reason: Reason, detail: str) -> None:
        self.sink.dead_letter(msg, reason, detail)

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
        if self.assigned:
            for p, lag in self.consumer.lag(self.assigned):
                if lag >= 0:
                    metrics.LAG.labels(p.topic, str(p.partition)).set(lag)

    @property
    def ready(self) -> bool:
        return bool(self.assigned) and not self.restoring
