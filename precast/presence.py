"""Presence records: readers that assign partitions instead of joining a consumer group (the
read API's materializer, board feed and lineage reads; the auditor) are invisible to the
broker's group listing, so the live-target guard of the operator tools could not see them.
Each such process publishes, every `INTERVAL_S`, one small record to the compacted presence
topic (key = its instance) naming the topics it reads; on a clean stop it writes a tombstone.
A record older than `ttl_ms` is a process that died without one.

Value: JSON `{"component", "instance", "reads": [topics], "at_ms", "ttl_ms"}`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from precast.guard import Guard, Unusable
from precast.hygiene import printable
from precast.kafka import KafkaFailure, Producer
from precast.settings import KafkaSettings
from precast.supervise import Supervised
from schemas.deadletters import Reason

log = logging.getLogger("precast.presence")

INTERVAL_S = 5.0


@dataclass(frozen=True)
class Reader:
    component: str
    instance: str
    reads: tuple[str, ...]
    at_ms: int
    ttl_ms: int

    def alive(self, now_ms: int) -> bool:
        return now_ms - self.at_ms <= self.ttl_ms


# Malformed presence records are counted and logged (bounded) here; the topic has no dead
# letters: a reader that wrote one publishes a fresh record every few seconds anyway.
GUARD = Guard("presence", log)


def decode(value: bytes | None) -> Reader | None:
    """A presence record, or None for a tombstone or anything malformed (never trusted further
    than its shape: the guard only compares topic names)."""
    if not value:
        return None
    try:
        return _reader(value)
    except Exception as exc:  # noqa: BLE001 - the boundary: anything a record can hold
        GUARD.reject(exc)
        return None


def _reader(value: bytes) -> Reader:
    doc = orjson.loads(value)
    if not isinstance(doc, dict):
        raise Unusable(Reason.INVALID, "a presence record is a JSON object")
    reads, at, ttl = doc.get("reads"), doc.get("at_ms"), doc.get("ttl_ms")
    if not (isinstance(reads, list) and all(isinstance(t, str) for t in reads)):
        raise Unusable(Reason.INVALID, "presence: reads is not a list of topic names")
    if type(at) is not int or type(ttl) is not int:
        raise Unusable(Reason.INVALID, "presence: at_ms and ttl_ms are integers")
    return Reader(
        printable(doc.get("component"), 64),
        printable(doc.get("instance"), 200),
        tuple(reads),
        at,
        ttl,
    )


def live(values: Iterable[tuple[bytes | None, bytes | None]], now_ms: int) -> list[Reader]:
    """The readers alive now from (key, value) records in log order (newest per key wins)."""
    last: dict[bytes, Reader | None] = {}
    for key, value in values:
        if key:
            last[key] = decode(value)
    return [r for r in last.values() if r is not None and r.alive(now_ms)]


class Presence:
    """Publishes this process's presence on its own thread until `stop()`."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        component: str,
        reads: Iterable[str],
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.topic, self.component, self.reads = topic, component, sorted(set(reads))
        self.interval_s = interval_s
        self.instance = f"{component}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._producer = Producer(kafka)
        self._stop = threading.Event()
        self._warned = False
        # restarted when it raises, counted (precast.supervise); readiness may check `.healthy`
        self.supervised = Supervised("presence")
        self._thread = self.supervised.thread(self._run, self._stop)

    def _value(self) -> bytes:
        return orjson.dumps(
            {
                "component": self.component,
                "instance": self.instance,
                "reads": self.reads,
                "at_ms": int(time.time() * 1000),
                "ttl_ms": int(self.interval_s * 3 * 1000),
            }
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._producer.produce(self.topic, self.instance.encode(), self._value())
                self._producer.poll(0)
            except KafkaFailure as exc:  # the guard then sees it as gone; the reader goes on
                if not self._warned:  # once: the reader's own work is not affected
                    log.warning("presence records not sent (the guard cannot see us): %s", exc)
                    self._warned = True
            self._stop.wait(self.interval_s)

    def start(self) -> Presence:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self._producer.produce(self.topic, self.instance.encode(), None)  # gone now
            self._producer.flush(5)
        except KafkaFailure as exc:
            log.warning("presence tombstone not sent: %s", exc)
