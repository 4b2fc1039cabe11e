"""`Consumer.consume_available`: takes what is there without waiting for a full batch."""

from __future__ import annotations

from precast.kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartitionOffset


def test_consume_available_returns_what_is_fetched_in_order_and_nothing_when_empty(
    kafka_settings, topic_factory, unique
):
    topic = topic_factory("avail", partitions=1)
    c = Consumer(kafka_settings, unique("g"))
    c.assign([TopicPartitionOffset(topic, 0, OFFSET_BEGINNING)])
    assert c.consume_available(1000, 0.5) == []
    p = Producer(kafka_settings)
    for i in range(50):
        p.produce(topic, b"k", b"%d" % i)
    p.flush()
    got: list[bytes] = []
    # A full-batch consume of 1000 would sit out its whole 200 s timeout here (50 < 1000), past the
    # suite's 180 s per-test timeout: the test fails.
    while len(got) < 50:
        got += [m.value() for m in c.consume_available(1000, 200.0)]
    assert got == [b"%d" % i for i in range(50)]
    c.close()
