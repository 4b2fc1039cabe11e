"""The spans each process makes (issue 39), caught with an in-memory exporter: the producer's
publish (its context is the record's header), the worker's batch (linked to every input, the
first sampled one its parent) with inference and produce children, the context aggregator's
fold (a child of the event's publish), the auditor's append; and a malformed `traceparent` on an
input is counted and its record still answered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import REGISTRY

from auditor.appender import Appender
from precast.audit.checkpoint import load_or_create_signer
from precast.audit.store import LogStore
from precast.kafka import Record
from precast.settings import TracingSettings
from precast.telemetry.trace_links import LINKS_MAX, record_contexts
from precast.telemetry.tracing import TraceParent, Tracing, parse_traceparent, start_tracing
from producers.publisher import EventPublisher
from schemas.topics import catalog
from tests.worker_events import T0, heartbeat
from workers.context.aggregator import fold_span
from workers.precompute.config import LoopConfig, PipelineConfig, PolicyConfig
from workers.precompute.outputs import PredictionOutput
from workers.precompute.pipeline import build_pipeline

TOPICS = catalog("u.", 3)
HB = TOPICS.heartbeats.name
SAMPLED = b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"
UNSAMPLED = b"00-" + b"3" * 32 + b"-" + b"4" * 16 + b"-00"
MALFORMED = b"00-not-a-trace-context"


def _tracing() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return start_tracing(TracingSettings(), "test", exporter), exporter


def _finished(exporter: InMemorySpanExporter) -> list[Any]:
    return list(exporter.get_finished_spans())


def _malformed(reader: str) -> float:
    labels = {"reader": reader}
    return REGISTRY.get_sample_value("precast_traceparent_malformed_total", labels) or 0.0


def _ctx(span: Any) -> TraceParent:
    c = span.get_span_context()
    return TraceParent(c.trace_id, c.span_id, int(c.trace_flags))


# -- producer ---------------------------------------------------------------------------------------
class FakeProducer:
    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes, list[tuple[str, bytes]]]] = []

    def produce(self, topic, key, value, headers=None, **_: Any) -> None:
        self.records.append((topic, key, value, headers))

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def flush(self, timeout: float = 30.0) -> None:
        return None


def _header(headers: list[tuple[str, bytes]]) -> bytes:
    return dict(headers)["traceparent"]


def test_the_publisher_publishes_each_event_in_a_span_whose_context_is_the_header():
    tracing, exporter = _tracing()
    producer = FakeProducer()
    publisher = EventPublisher(producer, TOPICS, tracing=tracing)  # type: ignore[arg-type]
    publisher.publish(heartbeat("d1", T0))
    publisher.publish(heartbeat("d2", T0), traceparent=SAMPLED)  # continues a caller's trace
    (first, second) = _finished(exporter)
    assert first.name == second.name == "publish" and first.kind is SpanKind.PRODUCER
    header = parse_traceparent(_header(producer.records[0][3]))
    assert header == _ctx(first) and len(header.trace_hex) == 32
    assert first.attributes["messaging.destination.name"] == HB
    assert first.parent is None
    assert second.parent is not None and second.parent.trace_id == int(b"1" * 32, 16)
    assert parse_traceparent(_header(producer.records[1][3])) == _ctx(second)


def test_the_publisher_with_tracing_off_writes_a_random_context_as_before():
    producer = FakeProducer()
    seeded = EventPublisher(producer, TOPICS, trace_seed=7)  # type: ignore[arg-type]
    seeded.publish(heartbeat("d1", T0))
    again = FakeProducer()
    EventPublisher(again, TOPICS, trace_seed=7).publish(heartbeat("d1", T0))  # type: ignore[arg-type]
    header = _header(producer.records[0][3])
    assert header == _header(again.records[0][3])  # the seeded PRNG's, unchanged
    assert parse_traceparent(header) is not None and header.endswith(b"-01")


# -- worker -----------------------------------------------------------------------------------------
class Model:
    version, labels = "9.9.9", ("a", "b", "c", "d")

    def predict(self, x):
        import numpy as np

        return np.tile(np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32), (len(x), 1))


class Registry:
    current = Model()

    def poll(self):
        return None


class Sink:
    exactly_once = False

    def __init__(self) -> None:
        self.produced: list[tuple] = []

    def produce(self, topic, keys, values, *traceparent: bytes) -> None:
        self.produced.append(
            (topic, len(keys), *traceparent) if traceparent else (topic, len(keys))
        )

    def dead_letter(self, msg, reason, detail):
        raise AssertionError(f"dead-lettered: {reason} {detail}")


def _hb(device: str, offset: int, traceparent: bytes | None) -> Record:
    headers = [] if traceparent is None else [("traceparent", traceparent)]
    return Record(HB, 0, offset, device.encode(), orjson.dumps(heartbeat(device, T0)), headers)


def _output(tracing: Tracing) -> tuple[PredictionOutput, Any, Sink]:
    cfg = PipelineConfig(policy=PolicyConfig(throttle_ms=0))
    pipe = build_pipeline(TOPICS, cfg, lambda *a: None)
    sink = Sink()
    out = PredictionOutput(
        pipe,
        Registry(),  # type: ignore[arg-type]
        sink,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        "preds",
        "state",
        LoopConfig(),
        lambda: T0,
        rewind=lambda: None,
        tracing=tracing,
    )
    return out, pipe, sink


def _one_batch(pipe: Any, records: list[Record]) -> list:
    pipe.ingest(records, T0, 0.0)
    items, _ = pipe.next_batch(0.0, force=True)
    return items


def test_a_worker_batch_links_every_input_and_parents_inference_and_produce():
    tracing, exporter = _tracing()
    out, pipe, sink = _output(tracing)
    before = _malformed("worker")
    records = [_hb("d1", 0, UNSAMPLED), _hb("d2", 1, SAMPLED), _hb("d3", 2, MALFORMED)]
    items = _one_batch(pipe, records)
    assert len(items) == 3
    assert out.run_batch(items, 0.0) is True
    spans = {s.name: s for s in _finished(exporter)}
    batch = spans["batch"]
    # the first sampled input is its parent; both valid inputs are links, sampled first
    assert batch.parent is not None and batch.parent.trace_id == int(b"1" * 32, 16)
    linked = [(link.context.trace_id, link.context.span_id) for link in batch.links]
    assert linked == [
        (int(b"1" * 32, 16), int(b"2" * 16, 16)),
        (int(b"3" * 32, 16), int(b"4" * 16, 16)),
    ]
    assert (
        batch.attributes["precast.batch.inputs"] == 2
        and batch.attributes["precast.batch.links"] == 2
    )
    for child in ("inference", "produce"):
        assert spans[child].parent.span_id == batch.context.span_id
        assert spans[child].context.trace_id == batch.context.trace_id
    # every prediction carries the batch span's context; the malformed input is still answered
    assert sink.produced == [("preds", 3, _ctx(batch).header())]
    assert _malformed("worker") == before + 1


def test_a_worker_batch_with_tracing_off_makes_no_span_and_no_header():
    out, pipe, sink = _output(Tracing.off())
    items = _one_batch(pipe, [_hb("d1", 0, SAMPLED)])
    assert out.run_batch(items, 0.0) is True
    assert sink.produced == [("preds", 1)]  # produced as before: the batch form, no header


def test_the_links_of_a_span_are_capped_and_counted():
    records = [
        _hb(f"d{i}", i, b"00-%032x-%016x-%02x" % (i + 1, i + 1, i % 2))
        for i in range(LINKS_MAX + 20)
    ]
    ctx = record_contexts(records, "t")
    assert ctx.valid == LINKS_MAX + 20 and len(ctx.links) == LINKS_MAX
    assert ctx.parent == TraceParent(2, 2, 1)
    assert all(p.sampled for p in ctx.links[: (LINKS_MAX + 20) // 2])  # sampled ones first


# -- context aggregator -----------------------------------------------------------------------------
def _event(headers: list[tuple[str, bytes]] | None) -> Any:
    return SimpleNamespace(message=SimpleNamespace(headers=headers, topic="u.work-orders"))


def test_the_aggregator_folds_each_event_in_a_child_span_of_its_publish():
    tracing, exporter = _tracing()
    folded: list[Any] = []

    async def fold(event: Any) -> None:
        folded.append(event)

    traced = fold_span(tracing, fold)
    before = _malformed("context")
    asyncio.run(traced(_event([("traceparent", SAMPLED)])))
    asyncio.run(traced(_event([("traceparent", MALFORMED)])))
    asyncio.run(traced(_event(None)))
    assert len(folded) == 3  # a malformed or missing header folds all the same
    first, second, third = _finished(exporter)
    assert first.name == "fold" and first.kind is SpanKind.CONSUMER
    assert first.parent.trace_id == int(b"1" * 32, 16) and first.parent.span_id == int(
        b"2" * 16, 16
    )
    assert second.parent is None and third.parent is None  # traced afresh
    assert _malformed("context") == before + 1


def test_the_aggregator_with_tracing_off_folds_the_event_itself():
    async def fold(event: Any) -> None:
        return None

    assert fold_span(Tracing.off(), fold) is fold


# -- auditor ----------------------------------------------------------------------------------------
def test_the_auditor_appends_a_leaf_batch_in_one_span_linked_to_its_records(tmp_path: Path):
    tracing, exporter = _tracing()
    app = Appender(
        LogStore(tmp_path / "log.db"),
        load_or_create_signer(tmp_path / "key", "test.example/log"),
        None,  # type: ignore[arg-type]
        None,
        topic="u.predictions",
        checkpoint_topic=None,
        partitions=1,
        tracing=tracing,
    )
    before = _malformed("auditor")
    msgs = [
        Record("u.predictions", 0, i, b"d%d" % i, b"{}", [("traceparent", h)])
        for i, h in enumerate((UNSAMPLED, SAMPLED, MALFORMED))
    ]
    app.append(msgs)  # type: ignore[arg-type]
    assert app.tree.size == 3  # every record gets its leaf
    (span,) = _finished(exporter)
    assert span.name == "append" and len(span.links) == 2
    assert span.parent.trace_id == int(b"1" * 32, 16)
    assert _malformed("auditor") == before + 1
    app.store.close()


@pytest.mark.parametrize("header", [SAMPLED, UNSAMPLED])
def test_a_well_formed_input_is_not_counted_as_malformed(header: bytes):
    before = _malformed("t2")
    record_contexts([_hb("d1", 0, header)], "t2")
    assert _malformed("t2") == before


def test_a_later_version_is_linked_and_a_malformed_55_byte_value_is_counted():
    later = b"01-" + b"5" * 32 + b"-" + b"6" * 16 + b"-01-future"
    upper = b"00-" + b"AB" * 16 + b"-" + b"c" * 16 + b"-01"  # 55 bytes, upper case: malformed
    zero = b"00-" + b"0" * 32 + b"-" + b"6" * 16 + b"-01"
    before = _malformed("t3")
    ctx = record_contexts(
        [_hb("d1", 0, upper), _hb("d2", 1, zero), _hb("d3", 2, later), _hb("d4", 3, None)], "t3"
    )
    assert ctx.valid == 1 and ctx.parent == TraceParent(int(b"5" * 32, 16), int(b"6" * 16, 16), 1)
    assert _malformed("t3") == before + 2
