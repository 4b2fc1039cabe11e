"""The input events behind an answer: the records its `lineage` names (topic, partition,
offset), read back from Kafka when an operator opens a device on the board.

A stored answer's body is whatever a writer to the predictions topic put there, so its lineage
is read as untrusted: anything but a list of `{topic, partition, offset}` objects naming an
event topic of this deployment's catalog, a partition in 0..2^31-1 and an offset in 0..2^63-1
is reported per entry (`missing` says why), never followed and never an error. At most
`MAX_REFS` records per call, within one deadline for the whole call (watermarks included).

Reads are bounded (consumer_api.edge.admission): one call per client and `MAX_READS` per replica
at once, each on its own consumer taken from a small pool, so a 2-3 s Kafka wait never queues
another board's request; past the bound the board gets 503 with Retry-After.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import orjson

from consumer_api.edge.admission import Admission
from precast.kafka import Consumer, TopicPartitionOffset
from precast.settings import KafkaSettings

MAX_REFS = 16
MAX_READS = 2  # lineage reads in flight per replica (one consumer each)
Ref = tuple[str, int, int]  # (topic, partition, offset), checked
MAX_EVENT_BYTES = 32 * 1024  # larger than any valid event (schemas.events.MAX_EVENT_BYTES)
MAX_PARTITION = 2**31 - 1  # Kafka's partition is an int32
MAX_OFFSET = 2**63 - 1
_SHOWN = 200  # characters of an unusable value echoed back


def lineage_of(body: bytes) -> Any:
    """The `lineage` value of a stored answer's body, as stored (not checked); [] when the body
    is not a JSON object (a stored answer always is; the body is re-read, not trusted)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    return doc.get("lineage") if isinstance(doc, dict) else []


def _shown(v: Any) -> Any:
    """A lineage field echoed back: an int or a short string as given, anything else by type."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return v if -MAX_OFFSET <= v <= MAX_OFFSET else f"<integer of {len(str(v))} digits>"
    if isinstance(v, str):
        return v[:_SHOWN]
    return f"<{type(v).__name__}>"


def check_refs(
    lineage: Any, event_topics: set[str]
) -> tuple[list[dict[str, Any]], dict[Ref, dict[str, Any]]]:
    """(one item per entry up to MAX_REFS, the items worth a fetch by their checked ref)."""
    if not isinstance(lineage, list):
        if lineage is None:
            return [], {}
        what = type(lineage).__name__
        return [{"topic": None, "partition": None, "offset": None,
                 "missing": f"lineage is a {what}, not a list"}], {}  # fmt: skip
    out: list[dict[str, Any]] = []
    wanted: dict[Ref, dict[str, Any]] = {}
    for ref in lineage[:MAX_REFS]:
        if not isinstance(ref, dict):
            out.append({"topic": None, "partition": None, "offset": None,
                        "missing": f"lineage entry is a {type(ref).__name__}, not an object"})  # fmt: skip
            continue
        topic, part, off = ref.get("topic"), ref.get("partition"), ref.get("offset")
        item: dict[str, Any] = {"topic": _shown(topic), "partition": _shown(part),
                                "offset": _shown(off)}  # fmt: skip
        out.append(item)
        if not isinstance(topic, str) or topic not in event_topics:
            item["missing"] = "not an event topic of this deployment"
        elif (p := _int_in(part, MAX_PARTITION)) is None or (o := _int_in(off, MAX_OFFSET)) is None:
            item["missing"] = "malformed lineage entry"
        else:
            wanted.setdefault((topic, p, o), item)
    return out, wanted


def _int_in(v: Any, hi: int) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= hi else None


class LineageReader:
    def __init__(
        self,
        kafka: KafkaSettings,
        event_topics: set[str],
        group_prefix: str,
        *,
        per_client: int = 1,
        max_reads: int = MAX_READS,
    ) -> None:
        self._kafka, self.event_topics = kafka, event_topics
        self._group = f"{group_prefix}-lineage-{uuid.uuid4().hex[:8]}"
        self._idle: list[Consumer] = []  # taken and given back by the admitted reads only
        self._all: list[Consumer] = []
        self.admission = Admission("lineage", per_client=per_client, total=max_reads)

    async def events(
        self, keys: list[str], body: bytes, timeout_s: float = 3.0
    ) -> list[dict[str, Any]]:
        """The lineage items of a stored answer's body; raises admission.Busy past the bound."""
        out, wanted = check_refs(lineage_of(body), self.event_topics)
        if wanted:
            await self.admission.run(keys, self._fetch_within, wanted, timeout_s)
        return out

    def read(self, lineage: Any, timeout_s: float = 3.0) -> list[dict[str, Any]]:
        """One item per entry (up to MAX_REFS): the record's event JSON, or why there is none.
        Unbounded: for callers that bound it themselves (tests, tools)."""
        out, wanted = check_refs(lineage, self.event_topics)
        if wanted:
            self._fetch_within(wanted, timeout_s)
        return out

    def _fetch_within(self, wanted: dict[Ref, dict[str, Any]], timeout_s: float) -> None:
        try:
            consumer = self._idle.pop()
        except IndexError:
            consumer = self._new_consumer()
        try:
            self._fetch(consumer, wanted, time.monotonic() + timeout_s)
        finally:
            self._idle.append(consumer)
            for item in wanted.values():
                if "event" not in item:
                    item.setdefault("missing", "not found (not written yet, or not readable now)")

    def _new_consumer(self) -> Consumer:
        # A reader someone waits on, assigned anew per read: a fetch of the last read still
        # parked at the broker (fetch.wait.max.ms) delays the next one's, so park briefly.
        parked: dict[str, Any] = {"fetch.wait.max.ms": 50}
        c = Consumer(self._kafka, self._group, bounded_prefetch=True, **parked)
        self._all.append(c)
        return c

    def _fetch(self, c: Consumer, wanted: dict[Ref, dict[str, Any]], deadline: float) -> None:
        left = dict(wanted)
        assigned = False
        try:
            lows = _lows(c, left, deadline)
            if lows is None:
                return
            for key in [k for k in left if k[2] < lows[(k[0], k[1])]]:
                left.pop(key)["missing"] = "deleted by the topic's retention"
            # Several refs may share a partition: fetch from its lowest offset, pick them out.
            starts: dict[tuple[str, int], int] = {}
            for topic, part, off in left:
                starts[(topic, part)] = min(off, starts.get((topic, part), off))
            assigned = bool(starts)
            c.assign([TopicPartitionOffset(t, p, o) for (t, p), o in starts.items()])
            while left and time.monotonic() < deadline:
                for m in c.consume(100, 0.05):
                    item = left.pop((m.topic(), m.partition(), m.offset()), None)
                    if item is not None:
                        _fill(item, m.value() or b"", m.timestamp()[1])
        except Exception as exc:  # noqa: BLE001 - Kafka or the client: each ref says why
            for item in left.values():
                item["missing"] = f"not readable now: {type(exc).__name__}: {exc}"[:200]
        finally:
            if assigned:
                with contextlib.suppress(Exception):  # the next read assigns anew anyway
                    c.assign([])

    def close(self) -> None:
        for c in self._all:
            c.close()


def _lows(c: Consumer, left: dict[Ref, Any], deadline: float) -> dict[tuple[str, int], int] | None:
    """The low watermark of each partition named, or None when the deadline passed first."""
    lows: dict[tuple[str, int], int] = {}
    for t, p, _ in left:
        if (t, p) not in lows:
            wait = deadline - time.monotonic()
            if wait <= 0:
                return None
            lows[(t, p)] = c.watermarks(t, p, min(2.0, wait))[0]
    return lows


def _fill(item: dict[str, Any], value: bytes, timestamp_ms: int) -> None:
    item["timestamp_ms"] = timestamp_ms
    if len(value) > MAX_EVENT_BYTES:
        item["missing"] = f"record of {len(value)} bytes not shown"
        return
    try:
        item["event"] = orjson.loads(value)
    except orjson.JSONDecodeError:
        item["missing"] = "record is not JSON"
