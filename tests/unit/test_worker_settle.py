"""A periodic at-least-once commit whose outputs are still in flight (a stalled or unreachable
broker) is put off, not fatal; a final commit (sync) still refuses to pass them by. Real
librdkafka against a port nothing listens on: records stay queued, none fails in the time."""

import pytest
from prometheus_client import REGISTRY

from precast.kafka import DeliveryFailed
from precast.settings import KafkaSettings
from workers.precompute.publish.delivery import AtLeastOnce


def _deferred() -> float:
    return REGISTRY.get_sample_value("precast_worker_commits_deferred_total") or 0.0


def test_outputs_in_flight_defer_a_periodic_commit_and_fail_a_final_one():
    sink = AtLeastOnce(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "dlq")
    sink.produce("predictions", [b"d1"], [b"{}"])
    before = _deferred()
    assert sink.settle(sync=False, timeout=0.3) is False
    assert _deferred() == before + 1
    with pytest.raises(DeliveryFailed, match="still in flight"):
        sink.settle(sync=True, timeout=0.3)


def test_nothing_in_flight_settles_at_once():
    sink = AtLeastOnce(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "dlq")
    assert sink.settle(sync=False, timeout=0.3) is True


def test_a_commit_with_outputs_in_flight_commits_nothing_and_says_so():
    from precast.kafka import Consumer, TopicPartitionOffset

    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    sink, consumer = AtLeastOnce(settings, "dlq"), Consumer(settings, "g-settle")
    try:
        sink.produce("worker-state", [b"d1"], [b"{}"])
        offsets = [TopicPartitionOffset("heartbeats", 0, 7)]
        sink.producer.flush = lambda timeout=30.0, real=sink.producer.flush: real(0.3)
        assert sink.commit(consumer, offsets) is False
        with pytest.raises(DeliveryFailed, match="still in flight"):
            sink.commit(consumer, offsets, sync=True)
    finally:
        consumer.close()
