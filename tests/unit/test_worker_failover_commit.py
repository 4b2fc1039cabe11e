"""A periodic at-least-once commit stops the worker loop for at most SETTLE_S while outputs wait
for a partition without a leader (a killed broker), then the loop goes on without blocking for
DEFER_S: a flush that waited for them stopped every partition's answers for 5-8 s after each
broker kill (issue 36). Nothing is committed before its outputs are acknowledged."""

from __future__ import annotations

from precast.kafka import TopicPartitionOffset
from workers.precompute import outputs
from workers.precompute.config import LoopConfig
from workers.precompute.publish.delivery import AtLeastOnce


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _StuckSink(AtLeastOnce):
    """Outputs that never get acknowledged (their partition has no leader) until `ack` is set."""

    def __init__(self) -> None:  # no producer: nothing here talks to a broker
        self.settles: list[tuple[bool, float | None]] = []
        self.commits: list[list[TopicPartitionOffset]] = []
        self.ack = False

    def acknowledged(self) -> bool:
        return self.ack

    def settle(self, sync: bool, timeout: float | None = None) -> bool:
        self.settles.append((sync, timeout))
        return self.ack

    def commit(self, consumer, offsets, *, sync=False, flush=True) -> bool:  # type: ignore[no-untyped-def, override]
        assert not flush, "the loop settles before it commits"
        self.commits.append(list(offsets))
        return True


class _Pipeline:
    def commit_offsets(self) -> list[TopicPartitionOffset]:
        return [TopicPartitionOffset("heartbeats", 0, 42)]


def _worker(sink: _StuckSink) -> outputs.PredictionOutput:
    # the commit logic alone: no consumer, model or registry
    w = outputs.PredictionOutput(
        _Pipeline(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        sink,
        None,  # type: ignore[arg-type]
        "predictions",
        "state",
        LoopConfig(),
        lambda: 0,
        rewind=lambda: None,
    )
    w.next_commit = 1000.0  # falls due at the clock's start
    return w


def _due(w: outputs.PredictionOutput, clock: _Clock, after: float) -> None:
    clock.now += after
    w.commit()


def test_a_stuck_commit_blocks_once_for_settle_s_then_lets_the_loop_run(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(outputs.time, "monotonic", clock)
    sink = _StuckSink()
    w = _worker(sink)
    interval = w.cfg.commit_interval_s
    _due(w, clock, 0.0)  # falls due: waits without blocking first
    assert sink.settles == []
    _due(w, clock, interval)  # a whole interval unacknowledged: blocks, bounded
    assert sink.settles == [(False, outputs.SETTLE_S)]
    assert sink.commits == []  # nothing committed before its outputs are acknowledged
    # For DEFER_S the loop does not block again, however many commits fall due meanwhile.
    steps = int(outputs.DEFER_S / interval) - 2
    for _ in range(steps):
        _due(w, clock, interval)
    assert len(sink.settles) == 1
    _due(w, clock, 3 * interval)  # past DEFER_S: one bounded wait again
    assert sink.settles[1:] == [(False, outputs.SETTLE_S)]
    sink.ack = True  # the new leader took them: the next due commit goes through at once
    _due(w, clock, interval)
    assert sink.commits == [[TopicPartitionOffset("heartbeats", 0, 42)]]


def test_a_final_commit_still_waits_with_the_sinks_own_bound(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(outputs.time, "monotonic", clock)
    sink = _StuckSink()
    sink.ack = True
    w = _worker(sink)
    w.commit(sync=True)
    assert sink.settles == [(True, None), (True, None)]  # predictions, then their state
    assert sink.commits == [[TopicPartitionOffset("heartbeats", 0, 42)]]
