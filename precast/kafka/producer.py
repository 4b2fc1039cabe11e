"""The one Kafka producer wrapper: murmur2 partitioning, backpressure, visible delivery failures."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka
from prometheus_client import Counter

from precast.kafka.config import producer_config
from precast.kafka.errors import (
    AUTHENTICATION_CODES,
    AccessRefused,
    DeliveryFailed,
    EmptyKeyError,
    KafkaFailure,
    build_client,
    failure,
    is_refusal,
    refused,
)
from precast.kafka.types import Headers, KafkaMessage
from precast.settings import KafkaSettings

log = logging.getLogger("precast.kafka.producer")

DeliveryCallback = Callable[[KafkaFailure | None, Any], None]

DELIVERY_FAILURES = Counter(
    "precast_producer_delivery_failures_total",
    "records the broker did not acknowledge",
    ["topic", "code"],
)
BACKPRESSURE_WAITS = Counter(
    "precast_producer_backpressure_waits_total",
    "produce calls that waited because the local queue was full",
)
BACKPRESSURE_SECONDS = Counter(
    "precast_producer_backpressure_seconds_total",
    "time produce calls spent waiting for room in the local queue",
)


class Producer:
    """Wraps `confluent_kafka.Producer`.

    - Refuses empty keys (they would be spread at random over partitions).
    - A full local queue makes `produce` wait for the broker instead of failing or dropping.
    - Failed deliveries are counted and kept; `flush()` raises `DeliveryFailed` when any
      record since the last flush was not acknowledged, so callers can commit only after it.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        logger: logging.Logger | None = None,
        on_backpressure: Callable[[float], None] | None = None,
        on_delivery_error: Callable[[KafkaFailure], None] | None = None,
        **overrides: Any,
    ) -> None:
        conf = producer_config(settings, **overrides)
        conf["error_cb"] = self._on_client_error
        conf["on_delivery"] = self._on_delivery
        self._failures: list[KafkaFailure] = []
        self._failed_total = 0
        self._on_backpressure = on_backpressure
        self._on_delivery_error = on_delivery_error
        self._fatal: KafkaFailure | None = None
        self._settings = settings
        self._txn_id = str(conf.get("transactional.id", ""))
        self._p = build_client(
            confluent_kafka.Producer,
            "producer",
            conf,
            logger=logger or logging.getLogger("precast.kafka.librdkafka"),
        )

    # -- callbacks (run inside poll/flush on the caller's thread) ---------------------------
    def _on_delivery(self, err: confluent_kafka.KafkaError | None, msg: Any) -> None:
        if err is None:
            return
        failed = failure(err, f"delivery to {msg.topic()} failed")
        if is_refusal(err.name()) and self._fatal is None:
            # No ACL to write there: every later record would fail the same way.
            self._fatal = refused(err.name(), self._settings, "write to", msg.topic() or "")
        self._failed_total += 1
        DELIVERY_FAILURES.labels(msg.topic() or "", err.name()).inc()
        if len(self._failures) < 1000:  # keep a sample, not an unbounded list
            self._failures.append(failed)
        if self._on_delivery_error is not None:
            self._on_delivery_error(failed)

    def _on_client_error(self, err: confluent_kafka.KafkaError) -> None:
        if err.fatal():
            self._fatal = failure(err, "producer fatal error")
            log.error("%s", self._fatal)
        elif err.name() in AUTHENTICATION_CODES:
            self._fatal = refused(err.name(), self._settings, detail=err.str())
        else:
            log.debug("producer: %s", err.str())

    # -- API ---------------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
        *,
        timestamp_ms: int = 0,
        partition: int = -1,
        on_delivery: Callable[[Any, Any], None] | None = None,
        allow_empty_key: bool = False,
    ) -> None:
        # allow_empty_key exists only to inject bad records (the simulator's --bad-rate).
        if not key and not allow_empty_key:
            raise EmptyKeyError(f"refusing to produce a record without a key to {topic!r}")
        if self._fatal is not None:
            raise self._fatal
        kwargs: dict[str, Any] = {
            "key": key,
            "value": value,
            "headers": headers,
            "timestamp": timestamp_ms,
            "partition": partition,
        }
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        try:
            self._p.produce(topic, **kwargs)
            return
        except BufferError:
            pass
        self._when_room(lambda: self._p.produce(topic, **kwargs))

    def _when_room(self, send: Callable[[], None]) -> None:
        """Backpressure: serve delivery reports until librdkafka has room again, then send."""
        started = time.monotonic()
        while True:
            self._p.poll(0.05)
            if self._fatal is not None:
                raise self._fatal
            try:
                send()
                break
            except BufferError:
                continue
        waited = time.monotonic() - started
        BACKPRESSURE_WAITS.inc()
        BACKPRESSURE_SECONDS.inc(waited)
        if self._on_backpressure is not None:
            self._on_backpressure(waited)

    def copy(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp_ms: int = 0,
    ) -> None:
        """Write a record exactly as it was (replay, redrive): an absent key stays absent, which
        is why the partition is explicit. Same backpressure as `produce`; the hot loop of a
        replay, so no per-call dict."""
        # `type: ignore[arg-type]` here and below: the client's stub types headers as an
        # invariant list[tuple[str, str | bytes | None]]; our list[tuple[str, bytes]] is one.
        try:
            self._p.produce(topic, value, key, partition, None, None, timestamp_ms, headers)  # type: ignore[arg-type]
        except BufferError:
            self._when_room(
                lambda: self._p.produce(
                    topic,
                    value,
                    key,
                    partition,
                    None,
                    None,
                    timestamp_ms,
                    headers,  # type: ignore[arg-type]
                )
            )

    def copy_same_partition(
        self, topic: str, msgs: list[KafkaMessage], keep_timestamps: bool = False
    ) -> None:
        """`copy` for a whole consumed batch into the same partition numbers of `topic`: the
        unfiltered replay's loop, kept here so it calls the client without a wrapper per record."""
        produce = self._p.produce
        for m in msgs:
            ts = m.timestamp()[1] if keep_timestamps else 0
            try:
                produce(topic, m.value(), m.key(), m.partition(), None, None, ts, m.headers())  # type: ignore[arg-type]
            except BufferError:
                self.copy(topic, m.partition(), m.key(), m.value(), m.headers(), ts)

    def produce_batch(self, topic: str, keys: list[bytes], values: list[bytes]) -> None:
        """Many keyed records to one topic: the hot-path form of `produce` (same checks, same
        backpressure), without a Python-level call per record into this wrapper."""
        if not all(keys):
            raise EmptyKeyError(f"refusing to produce a record without a key to {topic!r}")
        if self._fatal is not None:
            raise self._fatal
        produce = self._p.produce
        for k, v in zip(keys, values, strict=True):
            try:
                produce(topic, v, k)
            except BufferError:
                self.produce(topic, k, v)  # waits for room (backpressure)
        self._p.poll(0)

    def poll(self, timeout: float = 0.0) -> int:
        return self._p.poll(timeout)

    def pending(self) -> int:
        return len(self._p)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait for every queued record; raise if any failed or some are still in flight."""
        remaining = self._p.flush(timeout)
        failures, self._failures = self._failures, []
        if self._fatal is not None and isinstance(self._fatal, AccessRefused):
            raise self._fatal
        if failures:
            raise DeliveryFailed(
                f"{len(failures)} record(s) not delivered; first: {failures[0]}",
                code=failures[0].code,
            )
        if remaining:
            raise DeliveryFailed(
                f"{remaining} record(s) still in flight after {timeout}s",
                code="_TIMED_OUT",
                retriable=True,
            )

    @property
    def failed_total(self) -> int:
        return self._failed_total

    # -- transactions (exactly-once mode) ------------------------------------------------------
    def init_transactions(self, timeout: float = 30.0) -> None:
        self._call("init_transactions", timeout)

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def send_offsets_to_transaction(
        self, offsets: Any, group_metadata: Any, timeout: float = 30.0
    ) -> None:
        self._call("send_offsets_to_transaction", offsets, group_metadata, timeout)

    def commit_transaction(self, timeout: float = 30.0) -> None:
        self._call("commit_transaction", timeout)

    def abort_transaction(self, timeout: float = 30.0) -> None:
        self._call("abort_transaction", timeout)

    def _call(self, name: str, *args: Any) -> None:
        try:
            getattr(self._p, name)(*args)
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            if is_refusal(err.name()):
                txn = err.name() == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
                raise refused(
                    err.name(), self._settings, "use", self._txn_id if txn else ""
                ) from None
            raise failure(err, name) from None

    @property
    def raw(self) -> confluent_kafka.Producer:
        """The underlying client, for adapter modules only (e.g. transactional offsets)."""
        return self._p
