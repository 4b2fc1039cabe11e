"""A periodic at-least-once commit whose outputs are still in flight (a stalled or unreachable
broker) is put off, not fatal; a final commit (sync) still refuses to pass them by. Real
librdkafka against a port nothing listens on: records stay queued, none fails in the time."""

import pytest

from precast.kafka import DeliveryFailed
from precast.settings import KafkaSettings
from workers.precompute import metrics as M
from workers.precompute.delivery import AtLeastOnce


def test_outputs_in_flight_defer_a_periodic_commit_and_fail_a_final_one():
    sink = AtLeastOnce(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "dlq")
    sink.produce("predictions", [b"d1"], [b"{}"])
    before = M.COMMITS_DEFERRED._value.get()
    assert sink.settle(sync=False, timeout=0.3) is False
    assert M.COMMITS_DEFERRED._value.get() == before + 1
    with pytest.raises(DeliveryFailed, match="still in flight"):
        sink.settle(sync=True, timeout=0.3)


def test_nothing_in_flight_settles_at_once():
    sink = AtLeastOnce(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "dlq")
    assert sink.settle(sync=False, timeout=0.3) is True
