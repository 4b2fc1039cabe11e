"""The one Kafka consumer wrapper: batch consumption, explicit commits, typed rebalance hooks."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

import confluent_kafka

from precast.kafka.config import BACKGROUND_FETCH, BOUNDED_PREFETCH, consumer_config, prefetch_bound
from precast.kafka.errors import (
    AUTHENTICATION_CODES,
    AccessRefused,
    KafkaFailure,
    build_client,
    failure,
    is_refusal,
    refused,
)
from precast.kafka.types import KafkaMessage, TopicPartitionOffset
from precast.settings import KafkaSettings

log = logging.getLogger("precast.kafka.consumer")

RebalanceHook = Callable[[list[TopicPartitionOffset]], None]

OFFSET_BEGINNING = confluent_kafka.OFFSET_BEGINNING
OFFSET_END = confluent_kafka.OFFSET_END

# Errors on a message that mean "nothing to read here right now", not failure.
_BENIGN = {confluent_kafka.KafkaError._PARTITION_EOF}


def _to_tpo(parts: Sequence[confluent_kafka.TopicPartition]) -> list[TopicPartitionOffset]:
    return [TopicPartitionOffset(p.topic, p.partition, p.offset) for p in parts]


def _to_native(parts: Sequence[TopicPartitionOffset]) -> list[confluent_kafka.TopicPartition]:
    return [confluent_kafka.TopicPartition(p.topic, p.partition, p.offset) for p in parts]


class Consumer:
    """Wraps `confluent_kafka.Consumer`. Offsets are never auto-committed: callers commit what
    they have finished with `commit(...)`, typically after their outputs were acknowledged."""

    def __init__(
        self,
        settings: KafkaSettings,
        group_id: str,
        *,
        on_assign: RebalanceHook | None = None,
        on_revoke: RebalanceHook | None = None,
        on_lost: RebalanceHook | None = None,
        logger: logging.Logger | None = None,
        bounded_prefetch: bool | int = False,
        background: bool = False,
        **overrides: Any,
    ) -> None:
        """`bounded_prefetch`: hold only a few thousand fetched records while the caller lags
        (`precast.kafka.config.BOUNDED_PREFETCH`; a number: that many), for processes whose
        memory must stay flat. `background`: records may wait up to 100 ms to be fetched in
        fewer, larger responses (`BACKGROUND_FETCH`), for readers no answer waits on."""
        if bounded_prefetch is True:
            overrides = {**BOUNDED_PREFETCH, **overrides}
        elif bounded_prefetch:
            overrides = {**prefetch_bound(bounded_prefetch), **overrides}
        if background:
            overrides = {**BACKGROUND_FETCH, **overrides}
        # The deployment's namespace (settings.group_prefix): callers name groups as before.
        group_id = f"{settings.group_prefix or ''}{group_id}"
        conf = consumer_config(settings, group_id, **overrides)
        conf["error_cb"] = self._on_client_error
        self._fatal: KafkaFailure | None = None
        self._settings = settings
        self._hooks = (on_assign, on_revoke, on_lost)
        self.group_id = group_id
        self._c = build_client(
            confluent_kafka.Consumer,
            "consumer",
            conf,
            logger=logger or logging.getLogger("precast.kafka.librdkafka"),
        )

    def _on_client_error(self, err: confluent_kafka.KafkaError) -> None:
        if err.fatal():
            self._fatal = failure(err, "consumer fatal error")
        elif err.name() in AUTHENTICATION_CODES:
            # Wrong credentials do not pass by themselves: stop at the next consume.
            self._fatal = refused(err.name(), self._settings, detail=err.str())
        else:
            log.debug("consumer: %s", err.str())

    def _refusal(self, err: confluent_kafka.KafkaError, topic: str | None) -> AccessRefused:
        if err.name() == "GROUP_AUTHORIZATION_FAILED":
            return refused(err.name(), self._settings, "use", self.group_id)
        return refused(err.name(), self._settings, "read", topic or "", err.str())

    # -- subscription ---------------------------------------------------------------------------
    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assign: RebalanceHook | None = None,
        on_revoke: RebalanceHook | None = None,
        on_lost: RebalanceHook | None = None,
    ) -> None:
        """Join the group. Hooks given here win over the constructor's (a caller that needs the
        consumer inside its hooks can only pass them after building it)."""
        on_assign = on_assign or self._hooks[0]
        on_revoke = on_revoke or self._hooks[1]
        on_lost = on_lost or self._hooks[2]

        def _wrap(hook: RebalanceHook | None) -> Callable[[Any, list[Any]], None] | None:
            if hook is None:
                return None
            return lambda _c, parts: hook(_to_tpo(parts))

        kwargs = {
            k: v
            for k, v in (
                ("on_assign", _wrap(on_assign)),
                ("on_revoke", _wrap(on_revoke)),
                ("on_lost", _wrap(on_lost)),
            )
            if v is not None
        }
        self._c.subscribe(list(topics), **kwargs)

    def assign(self, parts: Sequence[TopicPartitionOffset]) -> None:
        self._c.assign(_to_native(parts))

    def incremental_assign(self, parts: Sequence[TopicPartitionOffset]) -> None:
        self._c.incremental_assign(_to_native(parts))

    def assignment(self) -> list[TopicPartitionOffset]:
        return _to_tpo(self._c.assignment())

    # -- reading -----------------------------------------------------------------------------------
    def consume(self, max_messages: int = 1000, timeout: float = 0.5) -> list[KafkaMessage]:
        """Up to `max_messages` records (fewer on timeout). Per-partition errors that are not
        fatal are logged and skipped; a fatal client error raises `KafkaFailure`."""
        if self._fatal is not None:
            raise self._fatal
        msgs = self._c.consume(max_messages, timeout)
        if not msgs:
            return []
        # Fast path: one pass that only builds a new list when an error is present.
        for m in msgs:
            if m.error() is not None:
                return self._drop_errors(msgs)
        # A consumed record has topic, partition and offset: see `KafkaMessage`.
        return cast(list[KafkaMessage], msgs)

    def consume_available(
        self, max_messages: int = 1000, timeout: float = 0.5
    ) -> list[KafkaMessage]:
        """Like `consume`, but returns as soon as anything is there: waits up to `timeout` for
        the first record, then takes what else is already fetched without waiting. A plain
        batch consume waits for a full batch or its whole timeout, which at low rates makes the
        timeout the latency of every record."""
        first = self.consume(1, timeout)
        if not first or max_messages <= 1:
            return first
        return first + self.consume(max_messages - 1, 0)

    def _drop_errors(self, msgs: list[Any]) -> list[KafkaMessage]:
        good = []
        for m in msgs:
            err = m.error()
            if err is None:
                good.append(m)
            elif err.code() in _BENIGN:
                continue
            elif err.fatal():
                raise failure(err, "consume")
            elif is_refusal(err.name()):
                raise self._refusal(err, m.topic())
            else:
                log.warning("consume error on %s[%s]: %s", m.topic(), m.partition(), err.str())
        return good

    # -- offsets ------------------------------------------------------------------------------------
    def commit(
        self, offsets: Sequence[TopicPartitionOffset] | None = None, *, asynchronous: bool = False
    ) -> None:
        """Commit the given next-offsets (offset of the last processed record + 1)."""
        try:
            # The client's stub overloads `commit` on Literal[True]/Literal[False] only.
            if offsets is None:
                self._c.commit(asynchronous=asynchronous)  # type: ignore[call-overload]
            elif offsets:
                native = _to_native(offsets)
                self._c.commit(offsets=native, asynchronous=asynchronous)  # type: ignore[call-overload]
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            if err.code() == confluent_kafka.KafkaError._NO_OFFSET:
                return
            if is_refusal(err.name()):
                raise self._refusal(err, None) from None
            raise failure(err, "commit") from None

    def committed(
        self, parts: Sequence[TopicPartitionOffset], timeout: float = 10.0
    ) -> list[TopicPartitionOffset]:
        return _to_tpo(self._c.committed(_to_native(parts), timeout=timeout))

    def position(self, parts: Sequence[TopicPartitionOffset]) -> list[TopicPartitionOffset]:
        return _to_tpo(self._c.position(_to_native(parts)))

    def seek(self, part: TopicPartitionOffset) -> None:
        self._c.seek(confluent_kafka.TopicPartition(part.topic, part.partition, part.offset))

    def watermarks(self, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
        """(low, high) offsets of a partition as the broker reports them now."""
        try:
            return self._c.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, partition), timeout=timeout, cached=False
            )
        except confluent_kafka.KafkaException as exc:
            raise failure(exc.args[0], f"watermarks of {topic}[{partition}]") from None

    def offsets_for_times(
        self, parts: Sequence[TopicPartitionOffset], timeout: float = 10.0
    ) -> list[TopicPartitionOffset]:
        """`parts[i].offset` carries a timestamp in ms; returns the first offset at or after it
        (-1 when no such record exists)."""
        try:
            return _to_tpo(self._c.offsets_for_times(_to_native(parts), timeout=timeout))
        except confluent_kafka.KafkaException as exc:
            raise failure(exc.args[0], "offsets_for_times") from None

    def pause(self, parts: Sequence[TopicPartitionOffset]) -> None:
        self._c.pause(_to_native(parts))

    def resume(self, parts: Sequence[TopicPartitionOffset]) -> None:
        self._c.resume(_to_native(parts))

    def lag(self, parts: Sequence[TopicPartitionOffset]) -> list[tuple[TopicPartitionOffset, int]]:
        """(partition, records behind the end) from the client's cached high watermarks (updated
        on every fetch), so it costs no broker round trip; -1 when not known yet."""
        out = []
        for p in self._c.position(_to_native(parts)):
            try:
                _low, high = self._c.get_watermark_offsets(p, cached=True)
            except confluent_kafka.KafkaException:
                high = -1
            lag = high - p.offset if high >= 0 and p.offset >= 0 else -1
            out.append((TopicPartitionOffset(p.topic, p.partition, p.offset), lag))
        return out

    def group_metadata(self) -> Any:
        """Opaque token for `Producer.send_offsets_to_transaction`."""
        return self._c.consumer_group_metadata()

    def native_offsets(self, offsets: Sequence[TopicPartitionOffset]) -> list[Any]:
        """Offsets in the client's own type, for `Producer.send_offsets_to_transaction`."""
        return _to_native(offsets)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # already closed
            self._c.close()
