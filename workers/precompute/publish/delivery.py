"""Where a worker's records go and how its input offsets are committed with them.

- `AtLeastOnce`: outputs are produced as batches finish; at a commit point the producer is
  flushed (every record acknowledged, or `DeliveryFailed` is raised and nothing is committed),
  then the input offsets are committed.
- `ExactlyOnce`: consume-transform-produce in Kafka transactions: the outputs and the input
  offsets (`send_offsets_to_transaction`) commit or abort together. After an abortable error the
  transaction is aborted and the caller rewinds to the committed offsets; after a fatal or
  indeterminate one (the commit's outcome is unknown, or the producer was fenced) the
  transactional producer is rebuilt and re-initialized, which fences its old incarnation and
  aborts whatever it left open, and the caller rewinds too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from prometheus_client import Gauge

from precast.deadletter import DeadLetters
from precast.kafka import (
    Consumer,
    DeliveryFailed,
    EmptyKeyError,
    KafkaFailure,
    KafkaMessage,
    Producer,
    TopicPartitionOffset,
)
from precast.settings import KafkaSettings
from schemas.deadletters import Reason
from workers.precompute import metrics
from workers.settings import WorkerOptions

log = logging.getLogger("precast.workers.sink")

# Exactly-once: records produced in the transaction now open (0 when none is). What a kill
# would abort; the exactly-once kill test waits for it to be non-zero before it kills.
TXN_RECORDS = Gauge(
    "precast_worker_transaction_open_records",
    "exactly-once: records produced in the open transaction (0 when none is open)",
)

COMPONENT = "worker"


class Rewind(Exception):
    """The transaction was aborted: re-read from the committed offsets, forget derived state."""


# Predictions leave as soon as a batch is encoded: a batch is already one produce burst (the
# broker thread wakes at the first record and finds the rest of the burst queued), so a linger
# only adds itself to every answer's age: 1 ms of a 5 ms budget at the median (bench freshness,
# hop "worker batch -> prediction in Kafka"). The worker's `linger_ms` setting chooses; its
# default (the settings model's) is the sinks' default.
LINGER_MS: float = WorkerOptions.model_fields["linger_ms"].default
# At-least-once: how long a periodic commit may stop the loop to wait for its outputs (a busy
# 2-core machine settles in under 1 s). A broker killed with kill -9 leaves the records for the
# partitions it led in flight until the controller has fenced it and the producer has found
# their new leaders (5-8 s when it was the active controller): a flush that waited for them
# stopped the whole loop, the answers of every partition with it, and the backlog left behind
# delayed them further (python -m bench cluster; docs/cluster.md, "Failover time").
SETTLE_S = 2.0
# After a commit was put off that way, the loop does not block for one again for this long; it
# still commits at any moment every output is acknowledged. Nothing is committed before its
# outputs are acknowledged, so a put-off commit only means more to re-read after a crash.
DEFER_S = 5.0
# The longest wait for outputs before a commit that must happen (revoke, shutdown); a periodic
# commit in the worker loop passes SETTLE_S.
SYNC_SETTLE_S = 30.0


class AtLeastOnce:
    exactly_once = False

    def __init__(
        self, kafka: KafkaSettings, dead_letter_topic: str, linger_ms: float = LINGER_MS
    ) -> None:
        conf: dict[str, Any] = {"linger.ms": linger_ms}
        self.producer = Producer(kafka, **conf)
        self.dead_letters = DeadLetters(self.producer, dead_letter_topic, COMPONENT)
        self._committed: dict[tuple[str, int], int] = {}

    def begin(self) -> None:
        return None

    def produce(
        self, topic: str, keys: list[bytes], values: list[bytes], traceparent: bytes | None = None
    ) -> None:
        """`traceparent`: the same W3C header on every record (the batch span's)."""
        if traceparent is None:
            self.producer.produce_batch(topic, keys, values)
        else:
            traced(self.producer, topic, keys, values, traceparent)

    def produce_to(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        """To a named partition (a validity lease goes to the partition it covers)."""
        self.producer.produce(topic, key, value, partition=partition)

    def dead_letter(self, msg: KafkaMessage, reason: Reason, detail: str) -> None:
        self.dead_letters.send(msg, reason, detail)

    def acknowledged(self) -> bool:
        """Whether every record produced so far is acknowledged, without waiting for any (the
        loop keeps consuming meanwhile). Raises `DeliveryFailed` when one was not delivered."""
        self.producer.poll(0)  # serves failed deliveries; acknowledged ones leave the queue
        if self.producer.pending():
            return False
        self.producer.flush(0)  # nothing in flight: raises if a delivery failed
        return True

    def commit(
        self,
        consumer: Consumer,
        offsets: Sequence[TopicPartitionOffset],
        *,
        sync: bool = False,
        flush: bool = True,
    ) -> bool:
        """Commit these input offsets once their outputs are acknowledged: after a flush, or,
        with `flush=False`, because `acknowledged()` just said so."""
        changed = [o for o in offsets if self._committed.get((o.topic, o.partition)) != o.offset]
        if flush and not self.settle(sync):  # raises unless acknowledged or merely in flight
            return False
        if not changed:
            return False
        consumer.commit(changed, asynchronous=not sync)
        self._committed.update({(o.topic, o.partition): o.offset for o in changed})
        return True

    def settle(self, sync: bool, timeout: float | None = None) -> bool:
        """Wait for every output so far before a commit. False when some are still in flight
        after `timeout` (default SYNC_SETTLE_S) on a periodic commit (`sync=False`): a stalled
        broker or a partition between leaders, not a failure. Nothing is committed then, the
        next commit covers these offsets too, and the loop goes on meanwhile. Raising instead
        ended the worker when brokers stalled past 30 s (one starved core in the soak)
        although every record would have been delivered."""
        timeout = SYNC_SETTLE_S if timeout is None else timeout
        try:
            self.producer.flush(timeout)
        except DeliveryFailed as exc:
            if sync or exc.code != "_TIMED_OUT":
                raise
            log.warning("commit deferred: %s", exc)
            metrics.COMMITS_DEFERRED.inc()
            return False
        return True

    def forget(self, partitions: Sequence[TopicPartitionOffset]) -> None:
        for p in partitions:
            self._committed.pop((p.topic, p.partition), None)

    def abort(self) -> None:
        return None


class ExactlyOnce:
    exactly_once = True

    def __init__(
        self,
        kafka: KafkaSettings,
        dead_letter_topic: str,
        transactional_id: str,
        transaction_timeout_ms: int,
        linger_ms: float = LINGER_MS,
    ) -> None:
        self._kafka, self._dlq_topic = kafka, dead_letter_topic
        # librdkafka requires a record's delivery timeout to fit inside its transaction's.
        self._conf: dict[str, Any] = {
            "linger.ms": linger_ms,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": transaction_timeout_ms,
            "delivery.timeout.ms": transaction_timeout_ms,
        }
        self.transactional_id = transactional_id
        self._committed: dict[tuple[str, int], int] = {}
        self._open = False
        self._dirty = False
        self._new_producer()

    def _new_producer(self) -> None:
        self.producer = Producer(self._kafka, **self._conf)
        self.dead_letters = DeadLetters(self.producer, self._dlq_topic, COMPONENT)
        self.producer.init_transactions()
        self._open = False
        TXN_RECORDS.set(0)

    def begin(self) -> None:
        if not self._open:
            self.producer.begin_transaction()
            self._open, self._dirty = True, False
            TXN_RECORDS.set(0)

    def produce(
        self, topic: str, keys: list[bytes], values: list[bytes], traceparent: bytes | None = None
    ) -> None:
        self.begin()
        self._dirty = True
        if traceparent is None:
            self.producer.produce_batch(topic, keys, values)
        else:
            traced(self.producer, topic, keys, values, traceparent)
        TXN_RECORDS.inc(len(keys))  # once per batch

    def produce_to(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        self.begin()
        self._dirty = True
        self.producer.produce(topic, key, value, partition=partition)
        TXN_RECORDS.inc()

    def dead_letter(self, msg: KafkaMessage, reason: Reason, detail: str) -> None:
        self.begin()
        self._dirty = True
        self.dead_letters.send(msg, reason, detail)
        TXN_RECORDS.inc()

    def commit(
        self, consumer: Consumer, offsets: Sequence[TopicPartitionOffset], *, sync: bool = True
    ) -> bool:
        """Commit the open transaction with these input offsets; raises `Rewind` if it aborted."""
        offsets = [o for o in offsets if self._committed.get((o.topic, o.partition)) != o.offset]
        if not self._open or (not self._dirty and not offsets):
            return False
        try:
            if offsets:
                self.producer.send_offsets_to_transaction(
                    consumer.native_offsets(offsets), consumer.group_metadata()
                )
            self._commit_transaction()
        except KafkaFailure as exc:
            self._recover(exc)
            raise Rewind(str(exc)) from None
        self._open = False
        TXN_RECORDS.set(0)
        self._committed.update({(o.topic, o.partition): o.offset for o in offsets})
        metrics.TXN.labels("committed").inc()
        return True

    def _commit_transaction(self) -> None:
        # A retriable failure leaves the outcome unknown; calling again is how librdkafka
        # resolves it (it either completes the commit or reports that an abort is needed).
        for attempt in range(3):
            try:
                self.producer.commit_transaction()
                return
            except KafkaFailure as exc:
                if not exc.retriable or exc.txn_requires_abort or exc.fatal or attempt == 2:
                    raise
                log.warning("commit_transaction retriable failure, retrying: %s", exc)

    def _recover(self, exc: KafkaFailure) -> None:
        if exc.txn_requires_abort and not exc.fatal:
            log.warning("transaction aborted: %s", exc)
            try:
                self.producer.abort_transaction()
                self._open = False
                TXN_RECORDS.set(0)
                metrics.TXN.labels("aborted").inc()
                return
            except KafkaFailure as again:
                exc = again
        log.error("transactional producer re-initialized after %s", exc)
        metrics.TXN.labels("reinitialized").inc()
        self._new_producer()

    def abort(self) -> None:
        """Abort the open transaction (partitions lost, or shutting down after an error)."""
        if not self._open:
            return
        try:
            self.producer.abort_transaction()
            TXN_RECORDS.set(0)
            metrics.TXN.labels("aborted").inc()
        except KafkaFailure as exc:
            log.error("abort failed, re-initializing the transactional producer: %s", exc)
            self._new_producer()
        self._open = False

    def forget(self, partitions: Sequence[TopicPartitionOffset]) -> None:
        for p in partitions:
            self._committed.pop((p.topic, p.partition), None)


def traced(
    producer: Producer, topic: str, keys: list[bytes], values: list[bytes], traceparent: bytes
) -> None:
    """Records with a `traceparent` header each (`produce_batch` writes none), through the
    wrapper's call without a dict per record (`copy`, partition -1: the key's partition, as
    `produce_batch` chooses it)."""
    if not all(keys):
        raise EmptyKeyError(f"refusing to produce a record without a key to {topic!r}")
    headers = [("traceparent", traceparent)]
    copy = producer.copy
    for k, v in zip(keys, values, strict=True):
        copy(topic, -1, k, v, headers)
    producer.poll(0)
