"""The read API's letters producer on the real broker: delivered letters cost no report on the
materializer's thread, a letter the broker refuses still reaches UndeliveredLetters and the
failure counter (consumer_api/materialize/letters.py)."""

from __future__ import annotations

import logging
import os
import time

from prometheus_client import REGISTRY

from consumer_api.materialize import letters
from precast.kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartitionOffset


def _failures(topic: str) -> float:
    """precast_producer_delivery_failures_total of `topic`, whatever the code."""
    return sum(
        s.value
        for metric in REGISTRY.collect()
        if metric.name == "precast_producer_delivery_failures"
        for s in metric.samples
        if s.name.endswith("_total") and s.labels.get("topic") == topic
    )


def test_only_a_refused_letter_is_reported(
    kafka_settings, topic_factory, unique, monkeypatch, caplog
):
    fine = topic_factory("letters", 1)
    tiny = topic_factory("tiny", 1, {"max.message.bytes": "1024"})  # refuses what follows
    reports: list[object] = []
    served = Producer._on_delivery

    def counted(self, err, msg):  # type: ignore[no-untyped-def]
        reports.append(err)
        served(self, err, msg)

    monkeypatch.setattr(Producer, "_on_delivery", counted)
    before = _failures(tiny)
    p = letters.letters_producer(kafka_settings)
    with caplog.at_level(logging.WARNING, logger="precast.api.materializer"):
        for i in range(3):
            p.produce(fine, f"k{i}".encode(), os.urandom(200))
        p.produce(tiny, b"big", os.urandom(8192))  # random bytes: lz4 cannot shrink them
        deadline = time.monotonic() + 30
        while p.pending() and time.monotonic() < deadline:
            p.poll(0.1)
    assert p.pending() == 0
    assert len(reports) == 1 and reports[0] is not None  # the refusal, and no success
    assert _failures(tiny) == before + 1
    lines = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("1 dead letter(s) not delivered"), lines

    c = Consumer(kafka_settings, unique("g"))
    try:
        c.assign([TopicPartitionOffset(fine, 0, OFFSET_BEGINNING)])
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got += c.consume(10, 0.5)
        assert sorted(m.key() for m in got) == [b"k0", b"k1", b"k2"]  # delivered all the same
    finally:
        c.close()
