"""The event producer library: device events onto their topics, keyed by device ID.

What it guarantees comes from `precast.kafka.Producer` and its config (docs/events.md):
idempotent (`enable.idempotence`, `acks=all`), murmur2 partitioning, bounded local queue with
backpressure (a full queue makes `publish` wait; nothing is dropped), failed deliveries counted
in a metric and raised by `flush()`. This layer adds the per-event parts: JSON encoding, the
`event_id` and W3C `traceparent` headers, topic choice by event kind, and flush on close.

With tracing on (`precast.telemetry.tracing`), each event is published inside a `publish` span
and the record's `traceparent` is that span's context, so the worker's batch, the context
aggregator's fold and everything after them continue the event's trace; off, the header is a
fresh random context as it always was.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

from precast.kafka import Producer
from precast.telemetry.tracing import Tracing, checked
from schemas.topics import Topics

H_EVENT_ID = "event_id"
H_TRACEPARENT = "traceparent"

ROLE_BY_EVENT_KIND = {"heartbeat": "heartbeats", "work_order": "work_orders", "alarm": "alarms"}


class TraceIds:
    """W3C trace contexts (`00-<trace-id>-<parent-id>-01`). Not for security, so a seeded PRNG
    is fine and ~10x cheaper per event than os.urandom."""

    def __init__(self, seed: int | None = None) -> None:
        self._bits = random.Random(seed).getrandbits

    def new(self) -> bytes:
        # An all-zero id is invalid in W3C trace context; `or 1` keeps it out.
        return b"00-%032x-%016x-01" % (self._bits(128) or 1, self._bits(64) or 1)


class EventPublisher:
    """Publishes event documents of the fleet spec's streams (canonical or a tolerated wire
    variant). Use as a context manager, or call `close()`: both flush before returning."""

    def __init__(
        self,
        producer: Producer,
        topics: Topics,
        *,
        trace_seed: int | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.producer = producer
        self.tracing = tracing or Tracing.off()
        self._roles = {role: getattr(topics, role).name for role in ROLE_BY_EVENT_KIND.values()}
        self._topic_of = {kind: self._roles[role] for kind, role in ROLE_BY_EVENT_KIND.items()}
        self._trace = TraceIds(trace_seed).new
        self.published = 0

    def publish(self, event: dict[str, Any], *, traceparent: bytes | None = None) -> None:
        """Encode and enqueue one event; `traceparent` continues a caller's trace. A simulator
        `WireEvent` names its topic role and key; a plain dict of the built-in fleet's
        canonical form is routed by its `kind`."""
        role = getattr(event, "role", None)
        topic = self._roles[role] if role is not None else self._topic_of[event["kind"]]
        device = getattr(event, "device_id", None) or event["device_id"]
        event_id = getattr(event, "event_id", None) or event.get("event_id")
        if self.tracing.enabled:
            parent = checked(traceparent, "producer") if traceparent is not None else None
            attributes = {"messaging.destination.name": topic, "precast.device": device}
            with self.tracing.span(
                "publish", parent=parent, kind="producer", attributes=attributes
            ):
                # a sampled-out span still has a valid context: the header is never left empty
                header = self.tracing.header() or traceparent or self._trace()
                self._send(topic, device, event, event_id, header)
        else:
            self._send(topic, device, event, event_id, traceparent or self._trace())

    def _send(
        self, topic: str, device: str, event: dict[str, Any], event_id: Any, traceparent: bytes
    ) -> None:
        headers = [(H_TRACEPARENT, traceparent)]
        if event_id is not None:
            headers.insert(0, (H_EVENT_ID, str(event_id).encode()))
        self.producer.produce(topic, device.encode(), orjson.dumps(event), headers)
        self.published += 1
        self.producer.poll(0)

    def publish_raw(
        self,
        role: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Enqueue pre-encoded bytes as they are, empty key included: for injecting bad records
        and for redrives. Normal events go through `publish`."""
        self.producer.produce(
            self._roles[role],
            key,
            value,
            [*(headers or []), (H_TRACEPARENT, self._trace())],
            allow_empty_key=True,
        )
        self.published += 1
        self.producer.poll(0)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every published record is acknowledged; raises `DeliveryFailed` if any
        was not (or some are still in flight after `timeout`)."""
        self.producer.flush(timeout)

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)

    def __enter__(self) -> EventPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def topic_role(kind: str) -> str:
    """The topic role (schemas.topics) an event kind is published to."""
    return ROLE_BY_EVENT_KIND[kind]
