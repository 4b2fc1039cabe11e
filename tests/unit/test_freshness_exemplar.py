"""The worker's freshness histogram links its slow buckets to traces: the batch's slowest
answer is the exemplar of its bucket, with the batch's trace ID (issue 39)."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, Histogram

from precast.telemetry.endpoints import exposition
from workers.precompute.metrics import observe_many

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _hist() -> tuple[CollectorRegistry, Histogram]:
    reg = CollectorRegistry()
    return reg, Histogram("f_seconds", "f", registry=reg, buckets=(0.1, 1.0, 5.0))


def test_the_slowest_value_of_a_batch_carries_the_trace_id():
    reg, h = _hist()
    observe_many(h, np.array([0.05, 2.5, 0.3]), TRACE)
    text = exposition(reg, "application/openmetrics-text; version=1.0.0")[0].decode()
    line = next(x for x in text.splitlines() if x.startswith('f_seconds_bucket{le="5.0"}'))
    assert line.endswith(f'# {{trace_id="{TRACE}"}} 2.5 ' + line.rsplit(" ", 1)[1])
    assert text.count("trace_id") == 1
    assert reg.get_sample_value("f_seconds_count") == 3


def test_without_a_trace_no_exemplar_and_the_same_counts():
    reg, h = _hist()
    observe_many(h, np.array([0.05, 2.5, 0.3]))
    text = exposition(reg, "application/openmetrics-text; version=1.0.0")[0].decode()
    assert "trace_id" not in text
    assert reg.get_sample_value("f_seconds_bucket", {"le": "1.0"}) == 2
