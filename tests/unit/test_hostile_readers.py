"""Issue 36: the worker-side readers beside the worker's inputs (state restore, device-context
snapshots, presence records, the context aggregator's decode, dead-letter headers) on hostile
records: each record decodes or ends as a counted rejection; no exception escapes."""

from __future__ import annotations

import logging

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precast import presence
from precast.deadletter import dead_letter_info, dead_letter_record, original_key
from precast.fleet import load_fleet, snapshot
from precast.guard import REJECTED, Guard
from precast.kafka import Record
from schemas import deadletters as dl
from schemas.topics import catalog
from schemas.validation import Rejected
from tests.hostile_records import headers, hostile_values, keys, records
from tests.worker_events import T0, alarm, flush, heartbeat, record, work_order
from workers.context.aggregator import decode as context_decode
from workers.model.inference import ModelSession
from workers.precompute.pipeline import PipelineConfig, build_pipeline
from workers.precompute.state import changelog
from workers.precompute.state.restore import StateRestorer
from workers.settings import DEFAULT_MODEL_DIR

FLEET = load_fleet()
TOPICS = catalog("r.", 3)
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


def _count(reader: str) -> float:
    return sum(
        REJECTED.labels(reader, r.value)._value.get()
        for r in (dl.Reason.INVALID, dl.Reason.NOT_JSON, dl.Reason.OVERSIZED)
    )


# -- worker state restore --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    return ModelSession(DEFAULT_MODEL_DIR, provider="cpu")


def _restorer() -> StateRestorer:
    r = object.__new__(StateRestorer)  # no Kafka client: `_apply` is the decode boundary
    r.guard = Guard("worker-restore", logging.getLogger("t"))
    return r


LAYOUT = changelog.Layout(FLEET.features)


@st.composite
def forged_state(draw: st.DrawFn) -> bytes:
    """A record of the right size, version and spec tag whose fields hold anything."""
    body = draw(st.binary(min_size=LAYOUT.size - 9, max_size=LAYOUT.size - 9))
    return bytes([changelog.VERSION]) + LAYOUT.tag + body


@settings(max_examples=80, suppress_health_check=_SUPPRESS)
@given(
    st.lists(
        st.tuples(
            st.one_of(keys, st.just(b"d1")),
            st.one_of(hostile_values(), forged_state(), st.none()),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_restore_of_any_state_records_never_raises_and_the_device_still_predicts(model, recs):
    p = build_pipeline(TOPICS, PipelineConfig(), lambda m, r, d: None)
    p.prime(model)
    msgs = [Record("r.worker-state", 0, i, k, v) for i, (k, v) in enumerate(recs)]
    _restorer()._apply(msgs, p.table)
    # what was restored is safe to use: a heartbeat of a restored device predicts
    p.ingest([record(TOPICS.heartbeats.name, heartbeat("d1", T0 + 10**6), 0)], T0 + 10**6, 0.0)
    out = flush(p, model, T0 + 10**6)
    assert all(x.device_id == "d1" for x in out)
    assert all(c.strategy in model.labels for x in out for c in x.candidates)


def test_a_forged_state_record_with_class_indexes_past_the_labels_is_not_trusted(model):
    p = build_pipeline(TOPICS, PipelineConfig(), lambda m, r, d: None)
    p.prime(model)
    rec = np.zeros(1, dtype=LAYOUT.dtype)
    rec["version"], rec["spec"] = changelog.VERSION, np.void(LAYOUT.tag)
    rec["hb_time"], rec["valid_until"] = T0, T0 + 10**9
    rec["rank"] = 250  # no model has that many labels
    rec["margins"] = 5.0
    before = _count("worker-restore")
    _, bad = _restorer()._apply([Record("s", 0, 0, b"d1", rec.tobytes())], p.table)
    assert bad == 1 and _count("worker-restore") == before + 1
    s = p.table.slot["d1"]
    assert p.table.valid_until[s] == -1 and (p.table.rank_idx[s] == 0).all()


# -- device-context snapshots -----------------------------------------------------------------------
_SNAP = orjson.loads(snapshot.to_json(FLEET.context, FLEET.context.new("d1"), T0))


@settings(max_examples=150, suppress_health_check=_SUPPRESS)
@given(hostile_values(_SNAP).filter(lambda v: v is not None))
def test_a_snapshot_decodes_or_raises_value_error_only(value):
    try:
        ctx = snapshot.from_json(FLEET.context, value)
    except ValueError:
        return
    assert isinstance(ctx.as_of_ms, int)
    assert all(isinstance(t, int) for t in ctx.since.values())


# -- presence -----------------------------------------------------------------------------------------
_PRESENCE = {"component": "api", "instance": "a@h:1", "reads": ["t"], "at_ms": T0, "ttl_ms": 1}


@settings(max_examples=150, suppress_health_check=_SUPPRESS)
@given(hostile_values(_PRESENCE))
def test_a_presence_record_decodes_or_is_a_counted_rejection(value):
    before = sum(presence.GUARD.rejected for _ in [0])
    r = presence.decode(value)
    if r is None:
        assert not value or presence.GUARD.rejected == before + 1
    else:
        assert all(isinstance(t, str) for t in r.reads) and type(r.at_ms) is int
        assert r.component.isprintable() and r.component.isascii()


def test_live_readers_skip_malformed_records():
    good = orjson.dumps(_PRESENCE)
    readers = presence.live([(b"a", good), (b"b", b"[" * 5000), (b"c", b'{"reads":1}')], T0)
    assert [r.instance for r in readers] == ["a@h:1"]


# -- the context aggregator ---------------------------------------------------------------------------
_SOURCES = {"r.work-orders": "work_orders", "r.alarms": "alarms"}


@settings(max_examples=150, suppress_health_check=_SUPPRESS)
@given(
    st.one_of(
        records("r.work-orders", work_order("c1"), key=b"c1"),
        records("r.alarms", alarm("c1"), key=b"c1"),
        records("r.heartbeats"),
    )
)
def test_the_context_aggregator_decodes_or_rejects_with_a_reason(rec):
    got = context_decode(FLEET.validator, _SOURCES, rec)
    if isinstance(got, Rejected):
        assert isinstance(got.reason, dl.Reason) and len(got.detail) <= dl.MAX_DETAIL
        key, _, hdrs = dead_letter_record(rec, got.reason, got.detail, "context")
        assert key and dead_letter_info(hdrs)["reason"] == got.reason.value
    else:
        role, e = got
        assert role in _SOURCES.values() and rec.key() == e["device_id"].encode()


# -- dead-letter headers -------------------------------------------------------------------------------
@settings(max_examples=200)
@given(headers, keys)
def test_dead_letter_info_reads_any_headers(hdrs, key):
    info = dead_letter_info(hdrs)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in info.items())
    assert original_key(key, hdrs) in (key, b"", None)


def test_dead_letter_info_reads_a_header_of_none():
    info = dead_letter_info([("dlq.reason", None), ("dlq.detail", b"\xff\x1b[2J")])
    assert info == {"reason": "", "detail": "\ufffd\x1b[2J"}


# -- the drift monitor --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def drift():
    from workers.drift.monitor import DriftMonitor
    from workers.drift.reference import load_reference

    return DriftMonitor(
        load_reference(DEFAULT_MODEL_DIR, FLEET.features),
        window_s=20,
        step_s=5,
        min_rows=1,
        max_rows=1000,
        alpha=0.01,
        min_effect=0.05,
    )


@settings(max_examples=60, suppress_health_check=_SUPPRESS)
@given(st.lists(records("d.heartbeats", heartbeat("m1"), key=b"m1"), min_size=1, max_size=5))
def test_the_drift_monitor_counts_hostile_heartbeats_and_keeps_the_valid_ones(drift, burst):
    from workers.drift.monitor import GUARD, HEARTBEATS

    rejected = HEARTBEATS.labels("rejected")._value.get()
    logged = GUARD.rejected
    before = len(drift.window.rows())
    valid = record("d.heartbeats", heartbeat("m2"), 0)
    drift.add_records([*burst, valid], 0.0)
    n_rejected = HEARTBEATS.labels("rejected")._value.get() - rejected
    assert GUARD.rejected - logged == n_rejected  # each one through the guard
    assert len(drift.window.rows()) - before == len(burst) + 1 - n_rejected


# -- dataset build rows (precast.fleet.outcomes) -------------------------------------------------------
@settings(max_examples=60, suppress_health_check=_SUPPRESS)
@given(
    st.lists(
        st.one_of(
            records("o.work-orders", work_order("o1", T0 + 5), key=b"o1"),
            records("o.alarms", alarm("o1", T0 + 5), key=b"o1"),
            records("o.heartbeats", heartbeat("o1", T0 - 5), key=b"o1"),
        ),
        max_size=6,
    )
)
def test_dataset_rows_survive_hostile_records_and_keep_the_valid_label(burst):
    from precast.fleet.outcomes import Window
    from tests.outcome_support import Simulated, build

    topics = catalog("o.", 1)

    def rec(topic: str, event: dict, offset: int, **extra) -> Record:
        value = orjson.dumps({**event, **extra})
        return Record(topic, 0, offset, event["device_id"].encode(), value, [], 0)

    good = [
        rec(topics.heartbeats.name, heartbeat("g1", T0 - 1_000), 10**6),
        rec(topics.work_orders.name, work_order("g1", T0, "w1"), 10**6),
        rec(
            topics.work_orders.name,
            work_order("g1", T0 + 60_000, "w1", status="closed"),
            10**6 + 1,
            resolution="replace_part",
            resolved_by="tech-7",
        ),
    ]
    s = Simulated(FLEET, topics, [*burst, *good], T0 + 60_000)
    rows = build(s, Window(T0 - 60_000, T0 + 1, T0 + 120_000, 3_600_000, 3_600_000))
    cols = rows.rows()
    assert ("g1", "w1") in set(zip(cols["device_id"], cols["entity_id"], strict=True))
    assert all(isinstance(k, str) for k in rows.rejected)


# -- replay / redrive filters ---------------------------------------------------------------------------
@settings(max_examples=200, suppress_health_check=_SUPPRESS)
@given(records("x.heartbeats", heartbeat("f1")), st.sampled_from(["heartbeat", "alarm"]))
def test_the_replay_filter_judges_any_record_without_raising(rec, kind):
    from opsctl.toolkit.filters import RecordFilter

    flt = RecordFilter(event_types=frozenset([kind]), schema_versions=frozenset([1]))
    assert flt.matches(rec.key(), rec.value(), 0) in (True, False)


def test_the_replay_filter_does_not_match_an_unhashable_kind():
    from opsctl.toolkit.filters import RecordFilter

    flt = RecordFilter(event_types=frozenset(["heartbeat"]))
    assert not flt.matches(b"k", b'{"kind": ["heartbeat"]}', 0)
    assert not flt.matches(b"k", b'{"kind": {"a": 1}}', 0)
