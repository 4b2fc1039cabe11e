"""Plain types the rest of the code sees instead of confluent_kafka's.

`KafkaMessage` is a structural protocol for a *consumed* record: `confluent_kafka.Message` objects
returned by `Consumer.consume` satisfy it as they are, so the hot path pays no conversion, while
domain code and unit tests can pass any object with the same methods (`Record`, built from plain
data). The client's own stubs type topic/partition/offset as optional because a produced-but-not-
yet-delivered message has none; a consumed record always has all three, and the protocol says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

Headers = list[tuple[str, bytes]]


@runtime_checkable
class KafkaMessage(Protocol):
    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> Headers | None: ...
    def timestamp(self) -> tuple[int, int]: ...


@dataclass(frozen=True, slots=True)
class TopicPartitionOffset:
    topic: str
    partition: int
    offset: int = -1001  # librdkafka's OFFSET_INVALID: "no offset given"


@dataclass(slots=True)
class Record:
    """A message built from plain data: what tests, replays and the dead-letter helper pass
    around. Satisfies `KafkaMessage`."""

    topic_: str
    partition_: int
    offset_: int
    key_: bytes | None
    value_: bytes | None
    headers_: Headers = field(default_factory=list)
    timestamp_ms: int = 0

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def headers(self) -> Headers:
        return self.headers_

    def timestamp(self) -> tuple[int, int]:
        return (1, self.timestamp_ms)  # TIMESTAMP_CREATE_TIME


class RecordRef:
    """Where a record came from, without its payload: topic, partition, offset and its trace
    id. What a pipeline keeps of an input it no longer needs whole (a lineage reference, a
    record a throttled device waits with). Satisfies `KafkaMessage` for what the pipeline asks
    of a reference. Not a `Record`: that one keeps a key, a value, a headers list and a
    timestamp per instance, which is most of what this class exists to drop."""

    __slots__ = ("offset_", "partition_", "topic_", "trace_")

    def __init__(self, topic: str, partition: int, offset: int, trace: bytes | None = None) -> None:
        self.topic_, self.partition_, self.offset_, self.trace_ = topic, partition, offset, trace

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> None:
        return None

    def value(self) -> None:
        return None

    def headers(self) -> Headers:
        return [] if self.trace_ is None else [("traceparent", self.trace_)]

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)  # TIMESTAMP_NOT_AVAILABLE
