"""What the board needs besides predictions, read from Kafka by one thread of the API process:

- device context (what the spec's `[context]` folds: open work orders, recent alarms, ...): the
  compacted device-context topic, read from the beginning, so every device's newest snapshot is
  known after one pass. A snapshot written under another spec's context definitions (or the
  old version-1 format) is counted (`result="foreign"`) and skipped, never misread: the
  aggregator of this spec rebuilds it; a malformed one is counted as invalid;
- the heartbeat fields the board shows (`BoardLayout.info_fields`: site, device type, ...):
  heartbeats read from `info_lookback_s` before the start (devices beat about once a second,
  so a few seconds name every live device); a heartbeat is validated (with the spec's own
  validator, so every declared wire variant works) only for a device not read yet or last
  read about `FleetIndex.info_refresh_s` ago (0.75-1.25 of it, drawn per read so that
  devices first seen together do not stay due together; its key is checked first), so the
  cost stays a dict lookup for almost every record;
- fleet throughput: every few seconds the end offsets of the event topics (events), the
  predictions topic (inferences published) and the dead-letter topic, turned into rates. No
  record of those topics is read for this.

Nothing here is on the read path. Whatever a record holds ends as a counted rejection
(`precast.guard`, reader `api-board-feed`: a metric and a bounded log line; the feed has no
dead-letter topic, the records are the workers' inputs), never a stopped feed; any other
failure restarts the loop under `precast.supervise` (counted), and one that keeps failing
turns `healthy` false and ends the process.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

from prometheus_client import Counter

from consumer_api.board.fleet_index import FleetIndex
from precast.fleet.snapshot import ForeignSnapshot, from_json
from precast.guard import Guard, Unusable
from precast.kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaFailure, TopicPartitionOffset
from precast.settings import KafkaSettings
from precast.supervise import Supervised
from schemas.topics import Topics

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

    def totals(self) -> dict[str, int]:
        """The totals the last update saw, by name."""
        return {name: total for name, (_, total) in self._last.items()}


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
        supervised: Supervised | None = None,  # its restart policy (tests pass their own)
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
        self.guard = Guard("api-board-feed", log)
        self.supervised = supervised or Supervised("api-board-feed")
        self._stop = threading.Event()
        self._thread = self.supervised.thread(self._run, self._stop)
        self._next_rates = 0.0
        self.foreign = 0  # snapshots of other context definitions skipped (also the metric)

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

    @property
    def healthy(self) -> bool:
        return self.supervised.healthy

    @property
    def error(self) -> BaseException | None:
        """Set once the loop failed too often and gave up."""
        return self.supervised.failure

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()

    def run_once(self, timeout: float = 0.2) -> int:
        msgs = self._consumer.consume(2_000, timeout)
        ctx_topic, hb_topic = self.topics.device_context.name, self.topics.heartbeats.name
        ctx_role, hb_role = self.topics.device_context.role, self.topics.heartbeats.role  # labels
        read: dict[tuple[str, str], int] = {}
        mono = time.monotonic()
        for m in msgs:
            topic = m.topic()
            try:
                if topic == ctx_topic:
                    value = m.value()
                    if not value:  # a tombstone: nothing to show
                        continue
                    got = (ctx_role, self._context(value))
                elif topic == hb_topic:
                    got = (hb_role, self._heartbeat(m.key(), m.value(), mono))
                else:
                    continue
            except Exception as exc:  # noqa: BLE001 - whatever a record causes
                self.guard.reject(exc, m, dead_letter=False)
                got = (ctx_role if topic == ctx_topic else hb_role, "rejected")
            read[got] = read.get(got, 0) + 1
        for (topic_label, result), n in read.items():
            FEED.labels(topic_label, result).inc(n)
        if mono >= self._next_rates:
            self._next_rates = mono + self._every
            self._update_rates(mono)
        return len(msgs)

    def _context(self, value: bytes) -> str:
        layout = self.index.layout
        try:
            ctx = from_json(layout.context, value)
            view = layout.view(ctx)  # reads every value: a malformed snapshot raises here
        except ForeignSnapshot as exc:
            if not self.foreign:
                log.warning("board feed: device-context snapshots skipped: %s", exc)
            self.foreign += 1
            return "foreign"
        except (ValueError, LookupError, TypeError) as exc:
            self.guard.reject(exc)
            return "invalid"
        self.index.set_context(ctx.device_id, view)
        return "context"

    def _heartbeat(self, key: bytes | None, value: bytes | None, mono: float) -> str:
        index = self.index
        if key is None or not index.wants_info(key.decode(errors="replace"), mono):
            return "skipped"
        got = index.layout.fleet.validator.validate(self.topics.heartbeats.role, key, value)
        if not got.ok:
            self.guard.reject(Unusable(got.reason, got.detail))
            return "invalid"
        index.set_info(got.event["device_id"], got.event, mono)
        return "heartbeat"

    def _update_rates(self, mono: float) -> None:
        try:
            ends = self.ends()
        except KafkaFailure as exc:  # a topic not created yet, a leader moving: try next time
            log.debug("board rates: %s", exc)
            return
        if ends is None:
            return
        r = self.rates
        r.events_per_s = r.update("events", ends["events"], mono)
        r.inferences_per_s = r.update("inferences", ends["inferences"], mono)
        r.dead_letters_per_s = r.update("dead", ends["dead"], mono)
        r.dead_letters_total = ends["dead"]
        r.at_ms = int(time.time() * 1000)

    def ends(self) -> dict[str, int] | None:
        """End offsets summed per rate ("events", "inferences", "dead"), or None when some
        partition could not be asked this time. Call it on the feed's thread (a call from
        another waits behind its consume()). One ListOffsets request per broker for every
        partition: asking each partition's watermarks was a round trip per partition, 30 of
        them every 2 s over a 6-partition catalog, each a request for the broker to serve."""
        t = self.topics
        rate_of = {s.name: "events" for s in (t.heartbeats, t.work_orders, t.alarms)}
        rate_of.update({t.predictions.name: "inferences", t.dead_letters.name: "dead"})
        specs = (t.heartbeats, t.work_orders, t.alarms, t.predictions, t.dead_letters)
        asked = [
            TopicPartitionOffset(s.name, p, OFFSET_END) for s in specs for p in range(s.partitions)
        ]
        out = dict.fromkeys(("events", "inferences", "dead"), 0)
        # (a timestamp of -1 asks for the latest offset, what a watermark's high end is)
        for f in self._consumer.offsets_for_times(asked, timeout=2.0):
            if f.offset < 0:
                return None
            out[rate_of[f.topic]] += f.offset
        return out
