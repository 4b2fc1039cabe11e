"""Issue 36: whatever a record on any topic the worker reads holds, it ends as a counted
rejection (a dead letter with its reason) and the loop goes on; valid records beside it are
predicted. Property tests generate the records (tests/hostile_records.py)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precast.guard import REJECTED
from precast.kafka import Record
from schemas.deadletters import Reason
from schemas.topics import catalog
from tests.hostile_records import deep_object, nested, records
from tests.worker_events import T0, alarm, flush, heartbeat, record, request, work_order
from workers.model.inference import ModelSession
from workers.precompute.pipeline import PipelineConfig, build_pipeline
from workers.settings import DEFAULT_MODEL_DIR

TOPICS = catalog("h.", 3)
HB = TOPICS.heartbeats.name
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


@pytest.fixture(scope="module")
def model():
    return ModelSession(DEFAULT_MODEL_DIR, provider="cpu")


def make():
    rejected: list[tuple[int, Reason, str]] = []
    p = build_pipeline(
        TOPICS, PipelineConfig(), lambda m, r, d: rejected.append((m.offset(), r, d))
    )
    return p, rejected


def _with_nested_ignored_field(e: dict) -> bytes:
    return orjson.dumps(e)[:-1] + b',"zz":' + nested() + b"}"


def _with_nested_meta(e: dict) -> bytes:
    e = {**e, "meta": {}}
    return orjson.dumps(e).replace(b'"meta":{}', b'"meta":{"q":' + nested() + b"}")


@pytest.mark.parametrize(
    "poison", [deep_object(), _with_nested_ignored_field, _with_nested_meta], ids=str
)
def test_a_heartbeat_nested_5000_deep_is_dead_lettered_and_the_rest_predicted(model, poison):
    p, rejected = make()
    bad = poison(heartbeat("d1")) if callable(poison) else poison
    recs = [
        record(HB, heartbeat("d0"), 0),
        record(HB, heartbeat("d1"), 1, value=bad),
        record(HB, heartbeat("d2"), 2),
    ]
    p.ingest(recs, T0, 0.0)
    assert [(o, r) for o, r, _ in rejected] == [(1, Reason.NOT_JSON)]
    assert {x.device_id for x in flush(p, model)} == {"d0", "d2"}


def test_a_record_the_batch_decoder_raises_on_is_judged_alone_and_rejected_once(monkeypatch):
    """The guard's fallback: the batch again record by record; rejections of the failed batch
    attempt are not sent twice."""
    p, rejected = make()
    real = p.decoder.heartbeats

    def flaky(msgs, reject):
        if any(m.offset() == 2 for m in msgs):
            if len(msgs) == 1:
                raise OverflowError("a value no decoder expected")
            real(msgs, reject)  # rejections of this attempt are held, then dropped
            raise OverflowError("the whole batch")
        return real(msgs, reject)

    monkeypatch.setattr(p.decoder, "heartbeats", flaky)
    before = REJECTED.labels("worker", "invalid")._value.get()
    recs = [
        record(HB, heartbeat("d0"), 0),
        record(HB, heartbeat("d1"), 1, value=b"{nope"),
        record(HB, heartbeat("d2"), 2),
        record(HB, heartbeat("d3"), 3),
    ]
    p.ingest(recs, T0, 0.0)
    assert sorted((o, r) for o, r, _ in rejected) == [(1, Reason.NOT_JSON), (2, Reason.INVALID)]
    assert "OverflowError" in [d for o, _, d in rejected if o == 2][0]
    assert REJECTED.labels("worker", "invalid")._value.get() == before + 1
    assert set(p.table.slot) == {"d0", "d3"}


_VALID = {
    "heartbeats": heartbeat("v1"),
    "work_orders": work_order("v1"),
    "alarms": alarm("v1"),
    "precompute_requests": request("v1"),
    "read_hints": {"device_id": "v1", "hot_until_ms": T0},
    "device_context": {"as_of_ms": T0},
}


def _hostile(role: str) -> st.SearchStrategy[Record]:
    return records(getattr(TOPICS, role).name, _VALID[role], key=b"v1")


@settings(max_examples=60, suppress_health_check=_SUPPRESS)
@given(
    st.lists(
        st.one_of(*(_hostile(role) for role in _VALID)),
        min_size=1,
        max_size=6,
    )
)
def test_any_burst_of_hostile_records_on_any_input_ends_as_rejections(model, burst):
    p, rejected = make()
    valid = record(HB, heartbeat("after"), 10**9)
    p.ingest([*burst, valid], T0, 0.0)  # never raises
    out = flush(p, model)  # nor does computing what was accepted
    assert "after" in {x.device_id for x in out}
    assert all(isinstance(r, Reason) and len(d) <= 1000 for _, r, d in rejected)
    # nothing lost: a record not rejected was valid (so keyed by its device), or context
    # state (a tombstone, a snapshot of another spec)
    rejected_at = {o for o, _, _ in rejected}
    for m in burst:
        if m.offset() not in rejected_at and m.topic() != TOPICS.device_context.name:
            assert m.key() == b"v1", m
