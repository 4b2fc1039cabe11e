"""The input events behind an answer: the records its `lineage` names (topic, partition,
offset), read back from Kafka when an operator opens a device on the board.

Only the event topics of this deployment's catalog are read (a lineage entry naming anything
else is reported, not followed), at most `MAX_REFS` records per call, one call at a time on
one consumer (assign, fetch, done), from a worker thread so the event loop never waits on
Kafka. A record gone from the topic (retention) is reported as missing.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import orjson

from precast.kafka import Consumer, KafkaFailure, TopicPartitionOffset
from precast.settings import KafkaSettings

MAX_REFS = 16
Ref = tuple[Any, Any, Any]  # (topic, partition, offset) as the lineage and the records give them
MAX_EVENT_BYTES = 32 * 1024  # larger than any valid event (schemas.events.MAX_EVENT_BYTES)


class LineageReader:
    def __init__(self, kafka: KafkaSettings, event_topics: set[str], group_prefix: str) -> None:
        self._kafka, self.event_topics = kafka, event_topics
        self._group = f"{group_prefix}-lineage-{uuid.uuid4().hex[:8]}"
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()

    def read(self, refs: list[dict[str, Any]], timeout_s: float = 3.0) -> list[dict[str, Any]]:
        """One result per ref (up to MAX_REFS): the record's event JSON, or why there is none."""
        out: list[dict[str, Any]] = []
        wanted: dict[Ref, dict[str, Any]] = {}
        for ref in refs[:MAX_REFS]:
            topic, part, off = ref.get("topic"), ref.get("partition"), ref.get("offset")
            item: dict[str, Any] = {"topic": topic, "partition": part, "offset": off}
            out.append(item)
            if topic not in self.event_topics:
                item["missing"] = "not an event topic of this deployment"
            elif not isinstance(part, int) or not isinstance(off, int) or part < 0 or off < 0:
                item["missing"] = "malformed lineage entry"
            else:
                wanted[(topic, part, off)] = item
        if wanted:
            with self._lock:
                self._fetch(wanted, timeout_s)
        for item in wanted.values():
            if "event" not in item:
                item.setdefault("missing", "not found (not written yet, or not readable now)")
        return out

    def _fetch(self, wanted: dict[Ref, dict[str, Any]], timeout_s: float) -> None:
        if self._consumer is None:
            # A reader someone waits on, assigned anew per read: a fetch of the last read still
            # parked at the broker (fetch.wait.max.ms) delays the next one's, so park briefly.
            parked: dict[str, Any] = {"fetch.wait.max.ms": 50}
            self._consumer = Consumer(self._kafka, self._group, bounded_prefetch=True, **parked)
        c = self._consumer
        left = dict(wanted)
        starts: dict[tuple[str, int], int] = {}
        try:
            lows = {(t, p): c.watermarks(t, p, 2.0)[0] for t, p, _ in left}
            for key in [k for k in left if k[2] < lows[(k[0], k[1])]]:
                left.pop(key)["missing"] = "deleted by the topic's retention"
            # Several refs may share a partition: fetch from its lowest offset, pick them out.
            for topic, part, off in left:
                starts[(topic, part)] = min(off, starts.get((topic, part), off))
            c.assign([TopicPartitionOffset(t, p, o) for (t, p), o in starts.items()])
            deadline = time.monotonic() + timeout_s
            while left and time.monotonic() < deadline:
                for m in c.consume(100, 0.05):
                    item = left.pop((m.topic(), m.partition(), m.offset()), None)
                    if item is None:
                        continue
                    value = m.value() or b""
                    item["timestamp_ms"] = m.timestamp()[1]
                    if len(value) > MAX_EVENT_BYTES:
                        item["missing"] = f"record of {len(value)} bytes not shown"
                        continue
                    try:
                        item["event"] = orjson.loads(value)
                    except orjson.JSONDecodeError:
                        item["missing"] = "record is not JSON"
        except KafkaFailure as exc:
            for item in left.values():
                item["missing"] = f"Kafka: {exc}"[:200]
        finally:
            if starts:
                c.assign([])

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
