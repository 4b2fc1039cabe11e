"""The materializer continues a prediction's trace: a `store` span per stored record whose
traceparent (the worker's batch) was sampled; an unsampled one makes none, and a malformed one
is counted and makes none (issue 39)."""

from __future__ import annotations

import time

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from consumer_api.materialize.materializer import Materializer
from precast.serving import MemoryStore
from precast.settings import KafkaSettings, TracingSettings
from precast.telemetry.tracing import parse_traceparent, start_tracing

SAMPLED = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED = b"00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-00"


class Msg:
    def __init__(self, headers, offset):
        self._h, self._o = headers, offset

    def headers(self):
        return self._h

    def partition(self):
        return 3

    def offset(self):
        return self._o


def test_each_sampled_prediction_gets_a_store_span_under_its_batch():
    exporter = InMemorySpanExporter()
    tracing = start_tracing(TracingSettings(), "precast-api", exporter)
    mat = Materializer(
        KafkaSettings(bootstrap_servers="127.0.0.1:1"), "p", 6, view=MemoryStore(), tracing=tracing
    )
    before = (
        REGISTRY.get_sample_value(
            "precast_traceparent_malformed_total", {"reader": "api-materializer"}
        )
        or 0
    )
    t0 = time.time_ns()
    msgs = [
        Msg([("traceparent", SAMPLED)], 10),
        Msg([("traceparent", UNSAMPLED)], 11),
        Msg([("traceparent", b"garbage")], 12),
        Msg(None, 13),
    ]
    mat._trace_stored(msgs, t0)
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["store"]
    parent = parse_traceparent(SAMPLED)
    assert spans[0].context.trace_id == parent.trace_id
    assert spans[0].parent.span_id == parent.span_id
    assert spans[0].attributes["precast.offset"] == 10
    assert spans[0].start_time == t0 and spans[0].end_time >= t0
    after = REGISTRY.get_sample_value(
        "precast_traceparent_malformed_total", {"reader": "api-materializer"}
    )
    assert after == before + 1


def test_off_the_materializer_reads_no_header():
    mat = Materializer(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "p", 6, view=MemoryStore())
    assert not mat.tracing.enabled
