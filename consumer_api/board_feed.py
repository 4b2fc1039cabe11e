"""What the board needs besides predictions, read from Kafka by one thread of the API process:

- device context (open work orders, recent alarms): the compacted device-context topic, read
  from the beginning, so every device's newest snapshot is known after one pass;
- device info (site, device type): heartbeats read from `info_lookback_s` before the start
  (devices beat about once a second, so a few seconds name every live device); a heartbeat is
  parsed only for a device not seen yet (its key is checked first), so the cost stays a dict
  lookup per record;
- fleet throughput: every few seconds the end offsets of the event topics (events), the
  predictions topic (inferences published) and the dead-letter topic, turned into rates. No
  record of those topics is read for this.

Nothing here is on the read path; a failure stops the feed (logged, `/healthz` unaffected:
the board shows what it had) rather than the API.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

from prometheus_client import Counter

from consumer_api.fleet import FleetIndex, parse_context
from precast.kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaFailure, TopicPartitionOffset
from precast.settings import KafkaSettings
from schemas.topics import Topics
from schemas.validation import Rejected, validate_event

log = logging.getLogger("precast.api.board")

FEED = Counter(
    "precast_api_board_feed_records", "records read by the board feed", ["topic", "result"]
)


@dataclass
class Rates:
    """Per-second rates over the last interval and totals (end offsets) of the topics watched."""

    events_per_s: float = 0.0
    inferences_per_s: float = 0.0
    dead_letters_per_s: float = 0.0
    dead_letters_total: int = 0
    at_ms: int = 0
    _last: dict[str, tuple[float, int]] = field(default_factory=dict)

    def update(self, name: str, total: int, mono: float) -> float:
        prev = self._last.get(name)
        self._last[name] = (mono, total)
        if prev is None or mono <= prev[0]:
            return 0.0
        return max(0, total - prev[1]) / (mono - prev[0])


class BoardFeed:
    def __init__(
        self,
        kafka: KafkaSettings,
        topics: Topics,
        index: FleetIndex,
        *,
        group_prefix: str = "precast-api",
        rates_every_s: float = 2.0,
        info_lookback_s: float = 10.0,
    ) -> None:
        self._consumer = Consumer(
            kafka,
            f"{group_prefix}-board-{uuid.uuid4().hex[:8]}",
            bounded_prefetch=True,
            background=True,  # device info and context: 100 ms is nothing on the board
        )
        self.topics, self.index, self._every = topics, index, rates_every_s
        self._lookback_ms = int(info_lookback_s * 1000)
        self.rates = Rates()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="board-feed", daemon=True)
        self._next_rates = 0.0

    def start(self) -> None:
        t = self.topics
        parts = [
            TopicPartitionOffset(t.device_context.name, p, OFFSET_BEGINNING)
            for p in range(t.device_context.partitions)
        ]
        self._consumer.assign(
            parts + self._heartbeats_from(int(time.time() * 1000) - self._lookback_ms)
        )
        self._thread.start()

    def _heartbeats_from(self, at_ms: int) -> list[TopicPartitionOffset]:
        hb = self.topics.heartbeats
        asked = [TopicPartitionOffset(hb.name, p, at_ms) for p in range(hb.partitions)]
        try:
            found = self._consumer.offsets_for_times(asked)
        except KafkaFailure as exc:  # a topic just created: start at the end
            log.info("board feed: heartbeats from the end (%s)", exc)
            return [TopicPartitionOffset(hb.name, p, OFFSET_END) for p in range(hb.partitions)]
        # -1: nothing that recent in the partition, so its end
        return [
            TopicPartitionOffset(hb.name, f.partition, f.offset if f.offset >= 0 else OFFSET_END)
            for f in found
        ]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._consumer.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.run_once()
        except BaseException as exc:  # the board keeps what it has; the read path is unaffected
            self.error = exc
            log.exception("board feed stopped")

    def run_once(self, timeout: float = 0.2) -> int:
        msgs = self._consumer.consume(2_000, timeout)
        ctx_topic, hb_topic = self.topics.device_context.name, self.topics.heartbeats.name
        index = self.index
        read = {"context": 0, "heartbeat": 0, "skipped": 0, "invalid": 0}
        for m in msgs:
            topic = m.topic()
            if topic == ctx_topic:
                value = m.value()
                if not value:
                    continue
                try:
                    device, ctx = parse_context(value)
                except (ValueError, KeyError, TypeError):
                    read["invalid"] += 1
                    continue
                index.set_context(device, ctx)
                read["context"] += 1
            elif topic == hb_topic:
                key = m.key()
                if key is None or index.knows_info(key.decode(errors="replace")):
                    read["skipped"] += 1
                    continue
                got = validate_event("heartbeats", key, m.value())
                if isinstance(got, Rejected):
                    read["invalid"] += 1
                    continue
                hb = got.event
                index.set_info(hb.device_id, hb.meta.site, hb.device_type)
                read["heartbeat"] += 1
        for result, n in read.items():
            if n:
                FEED.labels("heartbeats" if result != "context" else "device_context", result).inc(
                    n
                )
        mono = time.monotonic()
        if mono >= self._next_rates:
            self._next_rates = mono + self._every
            self._update_rates(mono)
        return len(msgs)

    def _update_rates(self, mono: float) -> None:
        t = self.topics
        try:
            events = sum(
                self._end(s.name, s.partitions) for s in (t.heartbeats, t.work_orders, t.alarms)
            )
            preds = self._end(t.predictions.name, t.predictions.partitions)
            dead = self._end(t.dead_letters.name, t.dead_letters.partitions)
        except KafkaFailure as exc:  # a topic not created yet, a leader moving: try next time
            log.debug("board rates: %s", exc)
            return
        r = self.rates
        r.events_per_s = r.update("events", events, mono)
        r.inferences_per_s = r.update("inferences", preds, mono)
        r.dead_letters_per_s = r.update("dead", dead, mono)
        r.dead_letters_total = dead
        r.at_ms = int(time.time() * 1000)

    def _end(self, topic: str, partitions: int) -> int:
        return sum(self._consumer.watermarks(topic, p, timeout=2.0)[1] for p in range(partitions))
