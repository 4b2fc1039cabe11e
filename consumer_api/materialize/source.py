"""Where the materializer's records come from: its own Kafka consumer (`DirectSource`), or a
gate process that reads the topic and passes on only what the view can use
(consumer_api.materialize.gated). The materializer sees the same `Source` either way."""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple, Protocol

from precast.kafka import Consumer, KafkaMessage, TopicPartitionOffset, retry_settling
from precast.settings import KafkaSettings


class Taken(NamedTuple):
    """One poll's records, and where each partition's reading now stands when the source knows
    better than the records do (a gate that dropped what it rejected); None: after the records."""

    records: list[KafkaMessage]
    ends: dict[int, int] | None = None


class Source(Protocol):
    def start(self) -> None:
        """Get ready to be assigned (a gate process starts here); nothing to do for most."""
        ...

    def assign(self, positions: dict[int, int], live_from: dict[int, int]) -> None:
        """Read each partition from its position (OFFSET_BEGINNING: from the start); offsets
        below `live_from` were read before (a replay: count what is rejected, no letter)."""
        ...

    def high_watermarks(self) -> dict[int, int]:
        """Each partition's end offset as the broker reports it now."""
        ...

    def take(self, n: int, timeout: float) -> Taken: ...

    def close(self) -> None: ...


class DirectSource:
    """The topic through the materializer's own consumer: it sees every record, and rejects
    what it cannot use itself."""

    def __init__(self, consumer: Consumer, topic: str, partitions: int) -> None:
        self._c, self.topic, self.partitions = consumer, topic, partitions

    def start(self) -> None:
        return

    def assign(self, positions: dict[int, int], live_from: dict[int, int]) -> None:
        self._c.assign([TopicPartitionOffset(self.topic, p, o) for p, o in positions.items()])

    def high_watermarks(self) -> dict[int, int]:
        return {p: high_watermark(self._c, self.topic, p) for p in range(self.partitions)}

    def take(self, n: int, timeout: float) -> Taken:
        return Taken(self._c.consume_available(n, timeout))

    def close(self) -> None:
        self._c.close()


def topic_consumer(kafka: KafkaSettings, group_id: str) -> Consumer:
    """The consumer that reads the predictions topic for a replica (its own or its gate's)."""
    committed_only: dict[str, Any] = {"isolation.level": "read_committed"}
    # Bounded prefetch: a replica that falls behind (a busy machine, a slow Redis) must not hold
    # what librdkafka fetched ahead (100-300 MiB with the defaults; docs/workers.md).
    return Consumer(kafka, group_id, bounded_prefetch=True, **committed_only)


def replica_group(prefix: str) -> str:
    """Every replica must read every partition: a consumer group of its own."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    # A just-created topic or a leader election answers NOT_LEADER for a moment.
    _, high = retry_settling(
        lambda: consumer.watermarks(topic, partition),
        patience_s=10.0,
        interval_s=0.25,
        what=f"watermarks of {topic}[{partition}]",
    )
    return high
