"""Records into the pipeline (`Ingest`): each consumed batch split by its topic's role
(`TopicSpec.role`), context first, then work orders and alarms, heartbeats (`HeartbeatIngest`),
precompute requests and read hints; every low-rate trigger decided on its own and routed into
the work queue. What no decoder expects is rejected through the guard (precast.guard)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from operator import methodcaller

from precast.fleet import snapshot
from precast.guard import Guard
from precast.kafka import KafkaMessage
from schemas import deadletters
from schemas.topics import Topics
from workers.precompute import metrics
from workers.precompute.decide import policy
from workers.precompute.decide.routing import WorkQueue
from workers.precompute.ingest.decode import Decoder, Reject
from workers.precompute.ingest.heartbeats import HeartbeatIngest, reject_future
from workers.precompute.ingest.lowrate import decode_hints, decode_requests
from workers.precompute.items import REQUEST_REASON, Pending, Reason
from workers.precompute.state.shared import PipelineState

# The roles (schemas.topics.TopicSpec.role) of the topics a worker reads: its subscription.
INPUT_ROLES = (
    "heartbeats",
    "work_orders",
    "alarms",
    "precompute_requests",
    "device_context",
    "read_hints",
)


def input_topics(topics: Topics) -> dict[str, str]:
    """{topic name: role} of every topic a worker reads, in subscription order."""
    return {getattr(topics, role).name: role for role in INPUT_ROLES}


_TOPIC, _PARTITION, _OFFSET = (
    methodcaller("topic"),
    methodcaller("partition"),
    methodcaller("offset"),
)


class Ingest:
    def __init__(
        self,
        state: PipelineState,
        queue: WorkQueue,
        heartbeats: HeartbeatIngest,
        decoder: Decoder,
        guard: Guard,
        reject: Reject,
        roles: dict[str, str],
    ) -> None:
        self.state, self.queue, self.heartbeats = state, queue, heartbeats
        self.decoder, self.guard, self.reject, self.roles = decoder, guard, reject, roles
        spec = state.fleet.spec
        # what an event of each context stream asks for: "any", "counted" or "none"
        self.trigger_rule: dict[str, str] = {s.topic: s.trigger for s in spec.streams.values()}
        self.stream_of: dict[str, str] = {s.topic: name for name, s in spec.streams.items()}
        self.lateness_ms = round(spec.time.max_lateness_s * 1000)

    def ingest(self, msgs: Sequence[KafkaMessage], now_ms: int, mono: float) -> None:
        topics = list(map(_TOPIC, msgs))
        one_topic = len(set(topics)) == 1  # the common case: no per-record grouping
        # Offsets only grow within a partition of one consume() call: the last one is the max.
        parts, offsets = map(_PARTITION, msgs), map(_OFFSET, msgs)
        last = (
            dict(zip(zip(topics, parts, strict=True), offsets, strict=True))
            if not one_topic
            else {(topics[0], p): o for p, o in dict(zip(parts, offsets, strict=True)).items()}
        )
        pos = self.state.positions
        for tp, o in last.items():
            if o + 1 > pos.get(tp, -1):
                pos[tp] = o + 1
        by_role: dict[str, list[KafkaMessage]] = defaultdict(list)
        if one_topic:
            by_role[self.roles.get(topics[0], "unknown")] = list(msgs)
        else:
            for t, m in zip(topics, msgs, strict=True):
                by_role[self.roles.get(t, "unknown")].append(m)
        for batch in by_role.values():
            metrics.EVENTS_IN.labels(batch[0].topic()).inc(len(batch))
        # Context first, so triggers of the same poll already see it.
        if "device_context" in by_role:
            self._ingest_context(by_role["device_context"], now_ms)
        for role in ("work_orders", "alarms"):
            if role in by_role:
                self._ingest_context_events(role, by_role[role], now_ms, mono)
        if "heartbeats" in by_role:
            self.heartbeats.ingest(by_role["heartbeats"], now_ms, mono)
        self._ingest_rest(by_role, now_ms, mono)
        awaiting = self.queue.awaiting
        if awaiting:
            table = self.state.table
            for item in awaiting.ready(table.has_data):
                table.slots([item.device], [item.partition])
                self._trigger(item, now_ms, mono)
            metrics.AWAITING.set(len(awaiting))

    def _ingest_rest(
        self, by_role: dict[str, list[KafkaMessage]], now_ms: int, mono: float
    ) -> None:
        if "precompute_requests" in by_role:
            self._ingest_requests(by_role["precompute_requests"], now_ms, mono)
        if "read_hints" in by_role:
            self._ingest_hints(by_role["read_hints"])
        for m in by_role.get("unknown", ()):
            self.reject(m, deadletters.Reason.UNKNOWN, f"worker does not read topic {m.topic()!r}")

    def _ingest_context(self, msgs: list[KafkaMessage], now_ms: int) -> None:
        for m in msgs:
            try:
                self._context_one(m, now_ms)
            except Exception as exc:  # noqa: BLE001 - the boundary (precast.guard)
                self.guard.reject(exc, m)

    def _context_one(self, m: KafkaMessage, now_ms: int) -> None:
        state = self.state
        model, table = state.fleet.context, state.table
        key, value = m.key(), m.value()
        if not key:
            self.reject(m, deadletters.Reason.MISSING_KEY, "device-context record without a key")
            return
        device = key.decode(errors="replace")
        if value is None:  # tombstone: the device's context was purged
            table.contexts.pop(device, None)
            return
        try:
            snap = snapshot.from_json(model, value)
        except snapshot.ForeignSnapshot:
            # written under another spec: the aggregator of this one rebuilds it
            metrics.CONTEXT_FOREIGN.inc()
            return
        if snap.as_of_ms > now_ms + state.cfg.max_ahead_ms:
            reject_future(self.reject, m, snap.as_of_ms, now_ms, state.cfg.max_ahead_ms)
            return
        table.slots([device], [m.partition()])
        model.merge_snapshot(table.context(device), snap)

    def _ingest_context_events(
        self, role: str, msgs: list[KafkaMessage], now_ms: int, mono: float
    ) -> None:
        state = self.state
        model, table, max_ahead = state.fleet.context, state.table, state.cfg.max_ahead_ms
        stream, rule = self.stream_of[role], self.trigger_rule[role]
        event_reason = Reason.WORK_ORDER if role == "work_orders" else Reason.ALARM
        for m, e in self.decoder.events(role, msgs, self.reject):
            try:
                t = e["event_time_ms"]
                if t > now_ms + max_ahead:
                    reject_future(self.reject, m, t, now_ms, max_ahead)
                    continue
                device = e["device_id"]
                table.slots([device], [m.partition()])
                ctx = table.context(device)
                if ctx.as_of_ms - t > self.lateness_ms:
                    metrics.LATE.labels(stream).inc()  # folded in all the same; windows ignore it
                model.apply(ctx, stream, e)
                # A redelivered event (already folded in) still triggers: its prediction may
                # never have been made by the worker that saw it first.
                fires = rule == "any" or (rule == "counted" and model.counts(stream, e))
                reason = event_reason if fires else Reason.CONTEXT_ONLY
                item = Pending(device, m.partition(), reason, [(m, e["event_id"])])
            except Exception as exc:  # noqa: BLE001 - the boundary (precast.guard)
                self.guard.reject(exc, m)
                continue
            self._trigger(item, now_ms, mono)

    def _ingest_requests(self, msgs: list[KafkaMessage], now_ms: int, mono: float) -> None:
        table = self.state.table
        for m, r in decode_requests(msgs, self.reject, self.guard):
            item = Pending(
                r.device_id,
                m.partition(),
                REQUEST_REASON[r.reason],
                [(m, r.request_id)],
                requested_at_ms=r.requested_at_ms,
            )
            if not table.has_data(r.device_id):
                # Nothing from the device itself: a prediction now would be the default
                # features' answer stamped with no real time. It waits for the device's data
                # (a failover's backlog, another topic's lag), within bounds.
                metrics.NO_DATA.inc(self.queue.awaiting.hold(item, mono))
                continue
            table.slots([r.device_id], [m.partition()])
            self._trigger(item, now_ms, mono)

    def _ingest_hints(self, msgs: list[KafkaMessage]) -> None:
        """Read hints (schemas.hints): advice, never a trigger; a bad one is dead-lettered."""
        for _, device, until in decode_hints(msgs, self.reject, self.guard):
            self.mark_hot([device], until)

    def _trigger(self, item: Pending, now_ms: int, mono: float) -> None:
        """One decision for a low-rate trigger (work order, alarm, request)."""
        state = self.state
        table = state.table
        s = table.slot[item.device]
        reason = item.reason
        if reason.predicts:
            reason = policy.throttle_one(
                state.cfg.policy, reason, int(table.predicted_at[s]), now_ms
            )
        state.decisions(reason, 1)
        self.queue.route(item, reason, int(table.predicted_at[s]), mono)

    def mark_hot(self, devices: Sequence[str], until_ms: int) -> int:
        """Devices somebody reads or watches, until `until_ms` (read hints from the API); only
        those this worker holds state for. Returns how many were marked."""
        tab, n = self.state.table, 0
        for d in devices:
            s = tab.slot.get(d)
            if s is not None:
                if until_ms > tab.hot_until[s]:
                    tab.hot_until[s] = until_ms
                n += 1
        return n
