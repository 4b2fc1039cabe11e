"""A reusable consume loop for event topics: batch -> validate -> dead-letter rejects ->
handle the accepted -> flush -> commit.

It is the reference shape of "a bad record never crashes a consumer and is never lost": every
record either reaches the handler as a validated model or lands on the dead-letter topic with
its reason, and offsets are committed only after both the handler's outputs and the dead
letters were acknowledged. Components with their own hot loop (the workers) follow the same
order with `schemas.validation.validate_event` behind a faster decode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prometheus_client import Counter

from precast.deadletter import DeadLetters
from precast.kafka import Consumer, KafkaMessage, Producer, TopicPartitionOffset
from schemas.validation import Accepted, validate_event

ACCEPTED = Counter(
    "precast_events_accepted_total",
    "records that passed validation, by wire variant",
    ["component", "role", "variant"],
)

Handler = Callable[[list[tuple[KafkaMessage, Accepted]]], None]


@dataclass(frozen=True, slots=True)
class BatchResult:
    consumed: int
    accepted: int
    rejected: int


def next_offsets(msgs: list[KafkaMessage]) -> list[TopicPartitionOffset]:
    """Offsets to commit after `msgs`: the last offset + 1 per partition."""
    last: dict[tuple[str, int], int] = {}
    for m in msgs:
        key = (m.topic() or "", m.partition() or 0)
        off = m.offset()
        if off is not None and off + 1 > last.get(key, -1):
            last[key] = off + 1
    return [TopicPartitionOffset(t, p, o) for (t, p), o in last.items()]


class ValidatingConsumer:
    """`roles` maps each subscribed topic name to its role in `schemas.topics` (the contract).
    `producer` carries the dead letters and whatever the handler produces; it is flushed
    before every commit."""

    def __init__(
        self,
        consumer: Consumer,
        producer: Producer,
        roles: Mapping[str, str],
        dead_letters: DeadLetters,
        *,
        batch_max: int = 1000,
        poll_timeout_s: float = 0.5,
    ) -> None:
        self.consumer, self.producer, self.roles = consumer, producer, dict(roles)
        self.dead_letters = dead_letters
        self.batch_max, self.poll_timeout_s = batch_max, poll_timeout_s

    def subscribe(self) -> None:
        self.consumer.subscribe(list(self.roles))

    def run_once(self, handle: Handler) -> BatchResult:
        msgs = self.consumer.consume(self.batch_max, self.poll_timeout_s)
        if not msgs:
            return BatchResult(0, 0, 0)
        good: list[tuple[KafkaMessage, Accepted]] = []
        rejected = 0
        component = self.dead_letters.component
        for m in msgs:
            role = self.roles.get(m.topic() or "", "")
            verdict = validate_event(role, m.key(), m.value(), m.headers())
            if isinstance(verdict, Accepted):
                good.append((m, verdict))
                ACCEPTED.labels(component, role, verdict.variant.label).inc()
            else:
                self.dead_letters.send_rejected(m, verdict)
                rejected += 1
        if good:
            handle(good)
        # At-least-once: outputs and dead letters are acknowledged before the offsets move.
        self.producer.flush()
        self.consumer.commit(next_offsets(msgs))
        return BatchResult(len(msgs), len(good), rejected)
