"""A consumer that falls behind holds only a bounded number of prefetched records when built with
`bounded_prefetch` (the read API's materializer, board feed and lineage reader), against the
library's defaults on the same backlog. The API replicas of the soak grew by 20-29 % in RSS on
a slower machine; a lagging consumer with the defaults held 100-300 MiB (issue 27)."""

from __future__ import annotations

import random
import time

import orjson

from precast.kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartitionOffset
from precast.kafka.config import BOUNDED_PREFETCH

PARTITIONS = 3
BACKLOG = 60_000


def _backlog(kafka_settings, topic: str) -> None:
    """Prediction-like records (lz4 by the producer's defaults: a fetch of 1 MiB of them
    decompresses to tens of thousands)."""
    p, rnd = Producer(kafka_settings), random.Random(3)
    for i in range(BACKLOG):
        d = f"dev-{i % 3000:06d}"
        value = orjson.dumps(
            {
                "device_id": d,
                "computed_at_ms": 1_764_000_000_000 + i,
                "candidates": [{"strategy": f"s{k}", "score": rnd.random()} for k in range(3)],
                "lineage": [{"topic": "hb", "partition": i % 6, "offset": i}],
            }
        )
        p.produce(topic, d.encode(), value)
        if i % 5_000 == 0:
            p.poll(0)
    p.flush()


def _held(kafka_settings, topic: str, group: str, bounded: bool) -> int:
    """Records waiting in the queue of a consumer that took one and then nothing for 3 s:
    what one consume with no wait gets (the queue as it was; nothing more is fetched meanwhile)."""
    c = Consumer(kafka_settings, group, bounded_prefetch=bounded)
    try:
        c.assign([TopicPartitionOffset(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        assert c.consume(1, 30)  # the first fetches arrived
        time.sleep(3)  # the fetcher fills the queue up to its threshold meanwhile
        return len(c.consume(BACKLOG, 0))
    finally:
        c.close()


def test_a_lagging_consumer_holds_a_bounded_prefetch(kafka_settings, topic_factory, unique):
    topic = topic_factory("prefetch", PARTITIONS)
    _backlog(kafka_settings, topic)
    bounded = _held(kafka_settings, topic, unique("bounded"), bounded=True)
    # the threshold, plus what one fetch (64 KiB of lz4 per partition) brings past it
    limit = BOUNDED_PREFETCH["queued.min.messages"] + PARTITIONS * 3_000
    assert 0 < bounded <= limit, bounded
    default = _held(kafka_settings, topic, unique("default"), bounded=False)
    assert default > limit, default  # what the bound is for: the defaults take all 60,000
    print(f"\nrecords held by a consumer that lags: {bounded:,} vs {default:,} with the defaults")
