"""Kill the broker (kill -9) for 20 s in the middle of a producer run, start it again: every event
published is in the topic exactly once (idempotent producer, retries within delivery.timeout,
backpressure instead of drops). Runs on a PRIVATE stack: the shared one is never stopped."""

from __future__ import annotations

import threading
import time

import orjson
import pytest
from prometheus_client import REGISTRY

from opsctl.settings import StackSettings
from opsctl.stack import LocalStack
from opsctl.stack.process import free_port
from precast.kafka import Admin, Consumer, Producer
from precast.settings import KafkaSettings
from producers.pacing import RateLimiter
from producers.publisher import EventPublisher
from producers.simulator import Fleet
from schemas.topics import catalog

OUTAGE_S = 20.0
RATE = 2_000  # events/s; the 1,000-record queue fills ~0.5 s into the outage


def _waits() -> float:
    return REGISTRY.get_sample_value("precast_producer_backpressure_waits_total") or 0.0


# slow: a fault scenario of ~46 s; the default suite keeps near 10 minutes (`./dev test -m slow`)
@pytest.mark.slow
def test_no_loss_no_duplicates_across_broker_restart(tmp_path):
    stack = LocalStack(
        StackSettings(
            home=tmp_path,
            kafka_port=free_port(),
            controller_port=free_port(),
            redis_port=free_port(),
        )
    )
    try:
        stack.up(progress=lambda m: None)
        ks = KafkaSettings(bootstrap_servers=stack.bootstrap_servers)
        topics = catalog("restart.", partitions=3)
        Admin(ks).ensure_topics([topics.heartbeats])
        producer = Producer(ks, **{"queue.buffering.max.messages": 1_000})
        publisher = EventPublisher(producer, topics)
        fleet = Fleet(500, seed=5, run_id="restart")
        waits_before = _waits()
        timeline: dict[str, float] = {}

        def outage() -> None:
            time.sleep(3.0)
            timeline["stopped"] = time.monotonic()
            stack.kafka.stop(hard=True)  # kill -9: in-flight batches are left unacknowledged
            time.sleep(OUTAGE_S)
            stack.kafka.start()
            stack.kafka.wait_ready(90)
            timeline["restarted"] = time.monotonic()

        t = threading.Thread(target=outage, daemon=True)
        t.start()
        sent: list[str] = []
        produced_during_outage = 0
        pacer = RateLimiter(RATE)
        while t.is_alive() or (
            "restarted" in timeline and time.monotonic() < timeline["restarted"] + 3.0
        ):
            batch = fleet.heartbeats(100, int(time.time() * 1000))
            pacer.wait(len(batch))
            for e in batch:
                publisher.publish(e)
                sent.append(e["event_id"])
            if "stopped" in timeline and "restarted" not in timeline:
                produced_during_outage += len(batch)
        t.join()
        assert "restarted" in timeline, "the broker did not come back"
        publisher.flush(timeout=120)  # raises DeliveryFailed if any record was not acknowledged
        assert producer.failed_total == 0

        # the broker really was gone for 20 s, the producer waited (backpressure), then resumed
        assert timeline["restarted"] - timeline["stopped"] >= OUTAGE_S
        assert _waits() > waits_before
        assert produced_during_outage < 5_000  # bounded: it did not buffer the whole outage

        consumer = Consumer(ks, "verify")
        in_topic = sum(consumer.watermarks(topics.heartbeats.name, p)[1] for p in range(3))
        assert in_topic == len(sent)
        consumer.subscribe([topics.heartbeats.name])
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while len(seen) < len(sent) and time.monotonic() < deadline:
            seen += [orjson.loads(m.value())["event_id"] for m in consumer.consume(5_000, 0.5)]
        consumer.close()
        assert len(seen) == len(set(seen)) == len(sent)
        assert set(seen) == set(sent)
        print(
            f"broker restart: {len(sent):,} published, {in_topic:,} in topic, {len(set(seen)):,} distinct "
            f"event_ids, {produced_during_outage:,} accepted during the {OUTAGE_S:.0f} s outage"
        )
    finally:
        stack.down()
