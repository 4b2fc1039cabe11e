"""The event producer library: device events onto their topics, keyed by device ID."""

from __future__ import annotations

import os
from typing import Any

import orjson

from precast.kafka import Producer
from schemas.topics import Topics


def traceparent() -> bytes:
    """A new W3C trace context (version 00, sampled) for one event."""
    return b"00-" + os.urandom(16).hex().encode() + b"-" + os.urandom(8).hex().encode() + b"-01"


class EventPublisher:
    """Publishes event dicts that follow `schemas.events`. Every record carries its `event_id`
    and a `traceparent` header; the key is the device ID, so murmur2 places all of a device's
    events on one partition index across topics."""

    def __init__(self, producer: Producer, topics: Topics) -> None:
        self._producer = producer
        self._topic_of = {"heartbeat": topics.heartbeats.name, "work_order": topics.work_orders.name,
                          "alarm": topics.alarms.name}

    def publish(self, event: dict[str, Any]) -> None:
        headers = [("event_id", event["event_id"].encode()), ("traceparent", traceparent())]
        self._producer.produce(self._topic_of[event["kind"]], event["device_id"].encode(),
                               orjson.dumps(event), headers)
        self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> None:
        self._producer.flush(timeout)
