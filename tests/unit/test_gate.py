"""The read API's gate (consumer_api.materialize.gate) without a broker: whatever a record
holds, the gate passes it on or rejects it, exactly once, and what it passes on the replica's
materializer stores without a rejection of its own; the frames, the counter relay, the epochs
of assignments, and the gate's scheduling group."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from prometheus_client import CollectorRegistry, Counter

from consumer_api.materialize.gate import Gate, GateConfig
from consumer_api.materialize.gated import GateSource
from consumer_api.materialize.materializer import APPLIED, Materializer
from consumer_api.materialize.source import Taken
from consumer_api.materialize.wire import GateClosed, Pipe
from precast.kafka import Record
from precast.serving import MemoryStore
from precast.telemetry.relay import CounterRelay
from tests.sources import StillSource, built_materializer
from tests.unit.test_readers_survive_records import (
    NOWHERE,
    TOPIC,
    predictions_records,
    rejected,
)


class _Frames:
    """Stands in for the pipe to the parent: keeps what the gate sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, frame: tuple[Any, ...]) -> None:
        self.sent.append(frame)


def _gate() -> tuple[Gate, _Frames]:
    frames = _Frames()
    conf = GateConfig(NOWHERE, TOPIC, "g", None, 100, 0.0)
    gate = Gate(conf, frames, consumer=None, producer=None)  # type: ignore[arg-type]
    gate._epoch = 1
    return gate, frames


class _Replayed(StillSource):
    """Hands out the frames a gate sent, as GateSource would."""

    def __init__(self, frames: list[tuple[Any, ...]]) -> None:
        super().__init__()
        self.frames = frames

    def take(self, *_: object) -> Taken:
        src = GateSource(GateConfig(NOWHERE, TOPIC, "g", None, 1, 0), 6)  # starts no process
        src._epoch = 1
        # the counts stay out: here the gate's counters and the replica's are the same ones
        src._queued.extend((*f[:4], {}) for f in self.frames)
        self.frames = []
        return src.take(0, 0)


def _tombstones() -> float:
    return APPLIED.labels("tombstone")._value.get()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(predictions_records())
def test_the_gate_passes_on_or_rejects_every_record_once(record: Record):
    gate, frames = _gate()
    counted, tombstones = rejected("api-materializer"), _tombstones()
    gate._sent_at = float("-inf")  # positions go out with this batch
    gate.pass_on([record])  # raises nothing, whatever the record holds
    assert len(frames.sent) == 1
    _, epoch, out, ends, _ = frames.sent[0]
    assert epoch == 1 and ends == {record.partition(): record.offset() + 1}
    if not record.value():
        assert out == [] and _tombstones() == tombstones + 1
        return
    assert len(out) + (gate.guard.rejected) == 1  # passed on or rejected, exactly once
    assert rejected("api-materializer") == counted + (0 if out else 1)
    if not out:
        return
    # What it passed on, the replica stores (or finds older) without a rejection of its own.
    view = MemoryStore()
    mat = Materializer(NOWHERE, TOPIC, 6, view=view, source=_Replayed(frames.sent))
    mat.run_once(0)
    assert mat.guard.rejected == 0
    assert mat._positions == {record.partition(): record.offset() + 1}


def test_positions_of_rejected_records_go_out_at_most_every_100_ms():
    gate, frames = _gate()
    bad = Record(TOPIC, 0, 7, b"dev-1", b"not json")
    gate.pass_on([bad])
    gate.pass_on([Record(TOPIC, 0, 8, b"dev-1", b"{]")])
    assert len(frames.sent) <= 1  # one frame, or none yet, for two rejections in a row
    gate._sent_at = float("-inf")
    gate.pass_on([])
    assert frames.sent[-1][3] == {0: 9}  # where partition 0 now stands, past both


def test_frames_cross_a_pipe_whole_and_the_end_is_seen():
    r1, w1 = os.pipe()
    big = os.urandom(3 << 20)  # more than a pipe holds: written and read in parts
    pid = os.fork()
    if pid == 0:  # the writer
        os.close(r1)
        Pipe(-1, w1).send(("batch", 1, [(0, 1, b"k", big, None)], {0: 2}, {}))
        os._exit(0)
    os.close(w1)
    pipe = Pipe(r1, -1)
    assert pipe.ready(10)
    frame = pipe.recv()
    assert frame[2][0][3] == big
    os.waitpid(pid, 0)
    assert pipe.ready(1)  # the end can be read now
    with pytest.raises(GateClosed):
        pipe.recv()
    os.close(r1)


def test_a_relay_adds_only_what_grew_to_the_same_counters():
    child_reg, parent_reg = CollectorRegistry(), CollectorRegistry()
    child = Counter("x_rejected", "r", ["reader", "reason"], registry=child_reg)
    parent = Counter("x_rejected", "r", ["reader", "reason"], registry=parent_reg)
    sender, receiver = CounterRelay([child]), CounterRelay([parent])
    child.labels("gate", "invalid").inc(3)
    child.labels("gate", "not_json").inc()
    receiver.add(sender.deltas())
    assert sender.deltas() == {}  # nothing grew since
    child.labels("gate", "invalid").inc(2)
    receiver.add(sender.deltas())
    receiver.add({("not_relayed", ()): 5.0})  # a name it does not relay: ignored
    assert (
        parent_reg.get_sample_value("x_rejected_total", {"reader": "gate", "reason": "invalid"})
        == 5
    )
    assert (
        parent_reg.get_sample_value("x_rejected_total", {"reader": "gate", "reason": "not_json"})
        == 1
    )


def test_readings_of_a_replaced_assignment_are_dropped_and_their_counts_kept():
    reg = CollectorRegistry()
    c = Counter("y_rejected", "r", ["reader"], registry=reg)
    src = GateSource(GateConfig(NOWHERE, TOPIC, "g", None, 1, 0), 6)  # starts no process
    src._epoch, src.relay = 2, CounterRelay([c])
    src._queued.extend(
        [
            (
                "batch",
                1,
                [(0, 5, b"dev-1", b"{}", None)],
                {0: 6},
                {("y_rejected", (("reader", "a"),)): 2.0},
            ),
            ("batch", 2, [(0, 0, b"dev-1", b"{}", b"00-tp")], {0: 1}, {}),
        ]
    )
    assert src.take(0, 0) == Taken([])  # epoch 1: an assignment since replaced
    assert reg.get_sample_value("y_rejected_total", {"reader": "a"}) == 2
    taken = src.take(0, 0)
    assert taken.ends == {0: 1} and [m.offset() for m in taken.records] == [0]
    assert taken.records[0].headers() == [("traceparent", b"00-tp")]


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroup here")
def test_a_process_of_its_own_session_lowers_its_group_and_not_its_parents():
    before = Path("/proc/self/autogroup").read_text()
    code = (
        "from precast.priority import lower_session; print(lower_session(19)); "
        "print(open('/proc/self/autogroup').read())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, start_new_session=True
    ).stdout
    assert out.startswith("True") and out.rstrip().endswith("nice 19"), out
    assert Path("/proc/self/autogroup").read_text() == before


@pytest.mark.parametrize("gate", [True, False])
def test_a_replica_hands_over_to_a_gate_at_its_background_priority(gate: bool):
    from consumer_api.settings import ApiSettings
    from precast.settings import TopicSettings

    settings = ApiSettings(
        kafka=NOWHERE,
        topics=TopicSettings(prefix="gate."),
        api={"background_nice": 7, "gate": gate},
    )
    mat = built_materializer(settings)
    try:
        live = mat._live_source
        if not gate:
            assert live is None
            return
        assert isinstance(live, GateSource) and live.pid is None  # started with the replica
        assert live.conf.nice == 7 and live.conf.topic == "gate.predictions"
        assert live.conf.dead_letter_topic == "gate.dead-letters"
    finally:
        mat._source.close()


def test_a_stopped_gate_is_never_started_again():
    """A materializer thread still finishing its batch after `stop` (a Redis replay, the
    hand-over) must not leave a new gate process behind."""
    src = GateSource(GateConfig(NOWHERE, TOPIC, "g", None, 1, 0), 6)
    src.close()
    src.start()
    with pytest.raises(GateClosed):
        src.assign({0: 0}, {})
    with pytest.raises(GateClosed):
        src.high_watermarks()
    with pytest.raises(GateClosed):
        src.take(1, 0)
    assert src.pid is None
