"""The API's `read` and the board's `render` spans (issue 39): a stored answer keeps its
prediction record's `traceparent`, a read of a sampled answer continues its trace (a child of
the worker's batch span, linked to it) and names itself in `traceresponse`, the traced-read
histogram carries the trace ID as its exemplar, a beacon that echoes the read makes a `render`
span beneath it, and with tracing off nothing of it runs."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import REGISTRY
from starlette.testclient import TestClient

from consumer_api.beacons.beacon import Beacon
from consumer_api.beacons.render_spans import RenderSpans
from consumer_api.materialize.materializer import Materializer
from consumer_api.read.fastpath import FastPath
from consumer_api.read.service import Service
from precast.serving import MemoryStore, decode, encode, prediction_item
from precast.serving.leases import Lease, extend
from precast.settings import KafkaSettings, TracingSettings
from precast.telemetry.endpoints import exposition
from precast.telemetry.tracing import Tracing, parse_traceparent, start_tracing
from tests.api_fixtures import make_app, now_ms

SAMPLED = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED = b"00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-00"
ONE = "/v1/devices/{d}/prediction"


def _record(device: str, computed: int, horizon_ms: int = 60_000) -> bytes:
    return orjson.dumps(
        {
            "schema_version": 1,
            "device_id": device,
            "candidates": [{"strategy": "remote_restart", "score": 0.7}],
            "model_version": "1.0.0",
            "computed_at_ms": computed,
            "valid_until_ms": computed + horizon_ms,
            "produced_at_ms": computed + 20,
            "trigger": "heartbeat",
            "lineage": [],
        }
    )


def _entry(device: str, trace: bytes | None, computed: int | None = None, horizon_ms=60_000):
    computed = now_ms() - 100 if computed is None else computed
    return prediction_item(_record(device, computed, horizon_ms), computed + 30, None, trace)[1]


def _service(tracing: Tracing | None = None, **options: Any) -> Service:
    from consumer_api.settings import ApiOptions
    from consumer_api.speculation.precompute_budget import LocalBudget
    from consumer_api.speculation.precompute_requests import PrecomputeAsker

    opts = ApiOptions(**options)
    asker = PrecomputeAsker(None, "unused", 1000, budget=LocalBudget(10, 10))
    view = MemoryStore(int(opts.grace_s * 1000))
    return Service(opts, view, None, asker, tracing=tracing or Tracing.off())


def _spans(exporter: InMemorySpanExporter) -> tuple[Any, ...]:
    return tuple(exporter.get_finished_spans())


def _traced() -> tuple[Service, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return _service(start_tracing(TracingSettings(), "precast-api", exporter)), exporter


# -- the stored entry keeps its trace context ----------------------------------------------------
def test_an_entry_keeps_a_well_formed_traceparent_and_drops_anything_else():
    assert _entry("d1", SAMPLED).trace == SAMPLED
    assert _entry("d1", None).trace is None
    for bad in (
        SAMPLED.upper(),
        b"00-" + b"0" * 32 + SAMPLED[35:],  # an all-zero trace ID
        SAMPLED[:36] + b"0" * 16 + SAMPLED[52:],  # an all-zero span ID
        SAMPLED + b"-x",
        SAMPLED.replace(b"00-", b"01-", 1),
        b"garbage",
    ):
        assert _entry("d1", bad).trace is None, bad


def test_redis_values_with_and_without_the_trace_line_read_back():
    with_trace, without = _entry("d1", SAMPLED), _entry("d1", None)
    assert decode(encode(with_trace)) == with_trace
    assert decode(encode(without)) == without
    # the trace is a line of its own, and only when there is one: a value written before the
    # field existed is the same bytes as one written without a trace today
    assert encode(with_trace).split(b"\n")[1] == SAMPLED
    assert encode(without).count(b"\n") == 1
    head, body = encode(without).split(b"\n")
    for bad in (b"garbage", SAMPLED.upper(), SAMPLED + b"0", b"00-" + b"0" * 52):
        with pytest.raises(ValueError):
            decode(head + b"\n" + bad + b"\n" + body)
    with pytest.raises(ValueError):
        decode(head + b"\n" + SAMPLED + b"\n" + b"not a body")


def test_an_answer_extended_by_a_lease_keeps_its_trace():
    e = _entry("d1", SAMPLED)
    lease = Lease(0, 1, e.computed_at_ms, e.valid_until_ms + 60_000, e.computed_at_ms, 0, 5)
    assert extend(e, lease, e.valid_until_ms + 60_000).trace == SAMPLED


class _Msg:
    def __init__(self, value: bytes, headers: list | None, offset: int) -> None:
        self._v, self._h, self._o = value, headers, offset

    def value(self):
        return self._v

    def key(self):
        return None

    def headers(self):
        return self._h

    def partition(self):
        return 0

    def offset(self):
        return self._o


class _Consumer:
    def __init__(self, msgs):
        self.msgs = msgs

    def consume_available(self, n, timeout):
        out, self.msgs = self.msgs, []
        return out

    def watermarks(self, topic, partition):
        return 0, 0

    def close(self):
        pass


@pytest.mark.parametrize("on", [True, False])
def test_the_materializer_stores_the_records_traceparent_only_with_tracing_on(on: bool):
    tracing = (
        start_tracing(TracingSettings(), "precast-api", InMemorySpanExporter()) if on else None
    )
    view = MemoryStore()
    mat = Materializer(
        KafkaSettings(bootstrap_servers="127.0.0.1:1"), "p", 1, view=view, tracing=tracing
    )
    mat._source._c.close()
    now = now_ms()
    mat._source._c = _Consumer(  # type: ignore[assignment]
        [
            _Msg(_record("d1", now - 50), [("traceparent", SAMPLED)], 0),
            _Msg(_record("d2", now - 50), [("traceparent", b"garbage")], 1),
            _Msg(_record("d3", now - 50), None, 2),
            _Msg(_record("d4", now - 50), [("traceparent", UNSAMPLED)], 3),
            _Msg(_record("d5", now - 50), [("traceparent", SAMPLED[:9] + SAMPLED[9:])], 4),
        ]
    )
    assert mat.run_once(0) == 5
    traces = {d: view.peek(d).trace for d in ("d1", "d2", "d3", "d4", "d5")}  # type: ignore[union-attr]
    kept = SAMPLED if on else None
    # an unsampled answer's reads make no span: nothing to keep for them
    assert traces == {"d1": kept, "d2": None, "d3": None, "d4": None, "d5": kept}
    if on:  # the answers of one batch share one object in the view
        assert traces["d1"] is traces["d5"]


# -- the read span -------------------------------------------------------------------------------
def test_a_read_of_a_sampled_answer_continues_its_trace_and_names_itself():
    svc, exporter = _traced()
    svc.view.put_if_newer("d1", _entry("d1", SAMPLED))  # type: ignore[union-attr]
    before = time.time_ns()
    r = TestClient(make_app(svc)).get(ONE.format(d="d1"))
    assert r.status_code == 200
    (span,) = _spans(exporter)
    batch = parse_traceparent(SAMPLED)
    assert batch is not None
    assert span.name == "read" and span.kind == SpanKind.SERVER
    assert span.context.trace_id == batch.trace_id  # in the answer's trace ...
    assert span.parent.span_id == batch.span_id  # ... beneath the worker's batch
    assert [(lk.context.trace_id, lk.context.span_id) for lk in span.links] == [
        (batch.trace_id, batch.span_id)
    ]
    assert span.resource.attributes["service.name"] == "precast-api"
    assert dict(span.attributes) == {
        "precast.device_id": "d1",
        "precast.source": "precomputed",
        "precast.model_version": "1.0.0",
    }
    assert before - 10**9 < span.start_time <= span.end_time <= time.time_ns()
    named = parse_traceparent(r.headers["traceresponse"])
    assert named is not None and named.span_id == span.context.span_id and named.sampled
    assert named.trace_id == batch.trace_id


def test_the_traced_read_histogram_carries_the_read_spans_trace_id_as_exemplar():
    svc, _ = _traced()
    svc.view.put_if_newer("d1", _entry("d1", SAMPLED))  # type: ignore[union-attr]
    client = TestClient(make_app(svc))
    labels = {"le": "+Inf"}
    before = REGISTRY.get_sample_value("precast_api_traced_read_seconds_bucket", labels) or 0
    client.get(ONE.format(d="d1"))
    after = REGISTRY.get_sample_value("precast_api_traced_read_seconds_bucket", labels)
    assert after == before + 1
    body, _ = exposition(REGISTRY, "application/openmetrics-text; version=1.0.0")
    lines = [
        ln
        for ln in body.decode().splitlines()
        if ln.startswith("precast_api_traced_read_seconds_bucket") and "# {" in ln
    ]
    assert any('trace_id="4bf92f3577b34da6a3ce929d0e0e4736"' in ln for ln in lines), lines


def test_reads_of_an_unsampled_or_untraced_answer_make_no_span_and_no_header():
    svc, exporter = _traced()
    svc.view.put_if_newer("d1", _entry("d1", UNSAMPLED))  # type: ignore[union-attr]
    svc.view.put_if_newer("d2", _entry("d2", None))  # type: ignore[union-attr]
    client = TestClient(make_app(svc))
    for d in ("d1", "d2", "never-stored"):
        assert "traceresponse" not in client.get(ONE.format(d=d)).headers
    assert _spans(exporter) == ()


def test_a_stale_answer_read_through_the_service_is_traced_with_its_source():
    exporter = InMemorySpanExporter()
    svc = _service(
        start_tracing(TracingSettings(), "precast-api", exporter), expired="stale", grace_s=60
    )
    old = now_ms() - 10_000
    svc.view.put_if_newer("d1", _entry("d1", SAMPLED, old, horizon_ms=5_000))  # type: ignore[union-attr]
    r = TestClient(make_app(svc)).get(ONE.format(d="d1"))
    assert r.json()["source"] == "stale" and "traceresponse" in r.headers
    (span,) = _spans(exporter)
    assert span.attributes["precast.source"] == "stale"


class _Untouchable(Tracing):
    """Tracing off that fails a test if anything on the read path calls it."""

    def __getattribute__(self, name: str) -> Any:
        if name == "enabled":
            return False
        raise AssertionError(f"tracing off was asked for {name}")


def test_tracing_off_costs_a_read_no_span_no_header_and_no_call():
    svc = _service(_Untouchable())
    assert svc.read_spans is None and svc.render_spans is None
    svc.view.put_if_newer("d1", _entry("d1", SAMPLED))  # type: ignore[union-attr]
    app = make_app(svc)
    fast = app
    while not isinstance(fast, FastPath):  # the app's outermost layers wrap the fast path
        fast = fast.app
    assert fast._spans is None  # the read path's one check
    client = TestClient(app)
    for d in ("d1", "unknown"):
        assert "traceresponse" not in client.get(ONE.format(d=d)).headers
    beacon = {
        "timings": [
            {
                "input_to_shown_ms": 50,
                "network_ms": 10,
                "traceparent": SAMPLED.decode(),
                "shown_at_ms": now_ms(),
            }
        ]
    }
    assert client.post("/v1/beacon", json=beacon).status_code == 204


# -- the render span -----------------------------------------------------------------------------
def _dropped(reason: str) -> float:
    return REGISTRY.get_sample_value("precast_render_spans_dropped_total", {"reason": reason}) or 0


def test_a_beacon_that_echoes_the_read_makes_a_render_span_beneath_it():
    svc, exporter = _traced()
    svc.view.put_if_newer("d1", _entry("d1", SAMPLED))  # type: ignore[union-attr]
    client = TestClient(make_app(svc))
    traceresponse = client.get(ONE.format(d="d1")).headers["traceresponse"]
    shown = now_ms()
    timing = {
        "input_to_shown_ms": 120,
        "network_ms": 30,
        "wait": {"read": 0.1, "db_lock": 0.01, "model": 0},
        "traceparent": traceresponse,
        "shown_at_ms": shown,
    }
    assert client.post("/v1/beacon", json={"timings": [timing]}).status_code == 204
    read, render = _spans(exporter)
    assert render.name == "render" and render.kind == SpanKind.CLIENT
    assert render.context.trace_id == read.context.trace_id
    assert render.parent.span_id == read.context.span_id
    assert render.end_time == shown * 1_000_000
    assert render.end_time - render.start_time == 90 * 1_000_000  # the page's own part
    assert render.attributes["precast.client_reported"] is True
    assert render.attributes["precast.input_to_shown_ms"] == 120


@pytest.mark.parametrize(
    "traceparent",
    [
        SAMPLED.upper().decode(),
        "00-" + "0" * 32 + SAMPLED[35:].decode(),
        SAMPLED[:36].decode() + "0" * 16 + SAMPLED[52:].decode(),
        "01" + SAMPLED[2:].decode(),
        "ff" + SAMPLED[2:].decode(),
        "not a trace context",
        "",
    ],
)
def test_a_malformed_traceparent_in_a_beacon_is_ignored_and_counted(traceparent: str):
    svc, exporter = _traced()
    client = TestClient(make_app(svc))
    before = _dropped("traceparent")
    timing = {
        "input_to_shown_ms": 50,
        "network_ms": 10,
        "traceparent": traceparent,
        "shown_at_ms": now_ms(),
    }
    assert client.post("/v1/beacon", json={"timings": [timing]}).status_code == 204
    assert _dropped("traceparent") == before + 1
    assert _spans(exporter) == ()


@pytest.mark.parametrize("shift_ms", [None, -16 * 60_000, 2 * 60_000])
def test_a_render_time_missing_or_outside_the_window_is_ignored_and_counted(shift_ms):
    spans = RenderSpans(start_tracing(TracingSettings(), "t", InMemorySpanExporter()))
    now = now_ms()
    timing: dict[str, Any] = {
        "input_to_shown_ms": 50,
        "network_ms": 10,
        "traceparent": SAMPLED.decode(),
    }
    if shift_ms is not None:
        timing["shown_at_ms"] = now + shift_ms
    before = _dropped("shown_at")
    assert spans.record(Beacon.model_validate({"timings": [timing]}), now) == 0
    assert _dropped("shown_at") == before + 1


def test_render_spans_only_for_sampled_contexts_and_clipped_in_length():
    exporter = InMemorySpanExporter()
    spans = RenderSpans(start_tracing(TracingSettings(), "t", exporter), ceiling_ms=1_000)
    now = now_ms()
    timings = [
        {
            "input_to_shown_ms": 3_000_000,
            "network_ms": 0,
            "traceparent": tp.decode(),
            "shown_at_ms": now,
        }
        for tp in (SAMPLED, UNSAMPLED)
    ]
    assert spans.record(Beacon.model_validate({"timings": timings}), now) == 1
    (render,) = _spans(exporter)
    assert render.end_time - render.start_time == 1_000 * 1_000_000


@pytest.mark.parametrize(
    "field, value",
    [
        ("traceparent", "0" * 65),  # longer than any trace context
        ("traceparent", 12),
        ("shown_at_ms", "now"),
        ("shown_at_ms", -1),
        ("shown_at_ms", 1e14),
    ],
)
def test_garbage_render_fields_are_a_4xx_never_a_500(field: str, value: Any):
    svc, _ = _traced()
    client = TestClient(make_app(svc))
    timing = {"input_to_shown_ms": 50, "network_ms": 10, field: value}
    r = client.post("/v1/beacon", json={"timings": [timing]})
    assert 400 <= r.status_code < 500, r.text
