"""precast.telemetry.tracing: W3C trace context checked at the door, spans with parents and
links, and nothing at all when tracing is off."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from precast.settings import TracingSettings
from precast.telemetry.tracing import (
    TraceParent,
    Tracing,
    checked,
    parse_traceparent,
    start_tracing,
)

GOOD = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_w3c_traceparent_parses():
    p = parse_traceparent(GOOD)
    assert p == TraceParent(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, 1)
    assert p.trace_hex == "4bf92f3577b34da6a3ce929d0e0e4736" and p.sampled
    assert p.header() == GOOD
    # a later version may append fields; version 00 may not
    assert parse_traceparent(GOOD.replace(b"00-", b"01-", 1) + b"-extra") is not None


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"garbage",
        GOOD[:-1],
        GOOD + b"-x",  # version 00 is exactly 55 characters
        GOOD.replace(b"00-", b"ff-", 1),
        GOOD.upper(),
        b"00-" + b"0" * 32 + b"-00f067aa0ba902b7-01",
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-" + b"0" * 16 + b"-01",
        b"\xff\x00",
    ],
)
def test_a_malformed_traceparent_is_none_and_counted(bad: bytes):
    before = REGISTRY.get_sample_value("precast_traceparent_malformed_total", {"reader": "t"}) or 0
    assert parse_traceparent(bad) is None
    assert checked(bad, "t") is None
    after = REGISTRY.get_sample_value("precast_traceparent_malformed_total", {"reader": "t"})
    assert after == before + 1


def test_an_absent_traceparent_is_not_counted():
    before = REGISTRY.get_sample_value("precast_traceparent_malformed_total", {"reader": "u"})
    assert checked(None, "u") is None
    assert (
        REGISTRY.get_sample_value("precast_traceparent_malformed_total", {"reader": "u"}) == before
    )


@given(st.binary(max_size=80))
def test_any_bytes_parse_or_are_none(raw: bytes):
    p = parse_traceparent(raw)
    assert p is None or (p.trace_id > 0 and p.span_id > 0)


def test_off_is_free_and_imports_nothing():
    t = start_tracing(TracingSettings(), "precast-test")
    assert not t.enabled and t.header() is None
    a, b = t.span("x"), t.span("y", parent=parse_traceparent(GOOD))
    assert a is b  # one shared do-nothing context manager
    with a as span:
        assert span is None


def _traced(ratio: float = 1.0) -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return start_tracing(TracingSettings(sample_ratio=ratio), "precast-test", exporter), exporter


def test_a_span_continues_the_record_s_trace_and_links_the_others():
    t, exporter = _traced()
    parent = parse_traceparent(GOOD)
    other = TraceParent(0xABC, 0xDEF, 1)
    with t.span("batch", parent=parent, links=[other], attributes={"n": 2}):
        header = t.header()
        with t.span("inference"):
            pass
    spans = {s.name: s for s in exporter.get_finished_spans()}
    batch, inference = spans["batch"], spans["inference"]
    assert batch.context.trace_id == parent.trace_id
    assert batch.parent.span_id == parent.span_id and batch.parent.is_remote
    assert [link.context.trace_id for link in batch.links] == [0xABC]
    assert inference.parent.span_id == batch.context.span_id
    assert batch.resource.attributes["service.name"] == "precast-test"
    # what a record produced inside the batch carries: the batch span's own context
    assert parse_traceparent(header) == TraceParent(parent.trace_id, batch.context.span_id, 1)


def test_a_new_trace_is_sampled_by_ratio_and_a_continued_one_follows_its_parent():
    t, exporter = _traced(ratio=0.0)
    with t.span("fresh"):
        pass
    with t.span("continued", parent=parse_traceparent(GOOD)):  # the parent sampled it
        pass
    assert [s.name for s in exporter.get_finished_spans()] == ["continued"]


def test_off_does_not_load_the_sdk_in_a_fresh_process():
    import subprocess

    code = (
        "import sys; from precast.settings import TracingSettings;"
        "from precast.telemetry.tracing import start_tracing;"
        "start_tracing(TracingSettings(), 'x').span('y');"
        "print(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
