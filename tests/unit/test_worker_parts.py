"""Each part of the worker built alone, with fakes for the parts around it: the rebalancer (fake
consumer, sink and restorer), the lease publisher (fake lease book and sink), the ingest (a fake
heartbeat part), the heartbeat ingest and the scorer over a shared state (fake model and lease
book), the worker's output (a failing model), and the loop with another output plugged into its
seam (as the shadow run does)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from precast.fleet import load_fleet
from precast.guard import Guard
from precast.kafka import TopicPartitionOffset
from schemas.deadletters import Reason as DeadLetterReason
from schemas.topics import catalog
from tests.worker_events import T0, heartbeat, record, work_order
from workers.precompute.config import LoopConfig, PipelineConfig, PolicyConfig
from workers.precompute.decide.routing import WorkQueue
from workers.precompute.ingest.decode import Decoder
from workers.precompute.ingest.heartbeats import HeartbeatIngest
from workers.precompute.ingest.router import INPUT_ROLES, Ingest, input_topics
from workers.precompute.items import Pending, Reason
from workers.precompute.loop import Worker
from workers.precompute.outputs import PredictionOutput
from workers.precompute.pipeline import build_pipeline
from workers.precompute.publish.lease_book import LeaseTick
from workers.precompute.publish.lease_publisher import LeasePublisher
from workers.precompute.rebalance import Membership, Rebalancer
from workers.precompute.state.device_table import DeviceTable
from workers.precompute.state.shared import PipelineState

TOPICS = catalog("u.", 3)
HB, CTX, WO = TOPICS.heartbeats.name, TOPICS.device_context.name, TOPICS.work_orders.name
FLEET = load_fleet()
CFG = PipelineConfig(policy=PolicyConfig(throttle_ms=0))


def _state(cfg: PipelineConfig = CFG) -> PipelineState:
    return PipelineState(cfg, FLEET, DeviceTable(top_k=cfg.top_k, fleet=FLEET))


class FakeConsumer:
    def __init__(self, watermarks: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.marks, self.calls = watermarks, []

    def assign(self, parts):
        self.calls.append(("assign", [(p.topic, p.partition, p.offset) for p in parts]))

    def pause(self, parts):
        self.calls.append(("pause", sorted((p.topic, p.partition) for p in parts)))

    def resume(self, parts):
        self.calls.append(("resume", sorted((p.topic, p.partition) for p in parts)))

    def watermarks(self, topic, partition, timeout=None):
        return self.marks.get((topic, partition), (0, 0))


class FakeSink:
    exactly_once = False

    def __init__(self) -> None:
        self.calls, self.produced = [], []

    def forget(self, parts):
        self.calls.append(("forget", sorted((p.topic, p.partition) for p in parts)))

    def abort(self):
        self.calls.append(("abort",))

    def begin(self):
        self.calls.append(("begin",))

    def produce_to(self, topic, partition, key, value):
        self.produced.append((topic, partition, key, value))


class FakeRestorer:
    def __init__(self) -> None:
        self.restored: list[list[int]] = []

    def restore(self, partitions, table):
        self.restored.append(list(partitions))
        return 0

    def close(self):
        pass


def _rebalancer(marks, restorer=None):
    consumer, sink, pipe = FakeConsumer(marks), FakeSink(), build_pipeline(TOPICS, CFG, _no)
    made = []

    def make():
        made.append(restorer)
        return restorer

    membership = Membership()
    r = Rebalancer(consumer, pipe, sink, CTX, membership, make if restorer else None)  # type: ignore[arg-type]
    return r, consumer, sink, pipe, membership, made


def _no(msg, reason, detail):
    raise AssertionError(f"unexpected rejection: {reason} {detail}")


def test_the_rebalancer_restores_state_then_holds_input_until_context_is_read_back():
    restorer = FakeRestorer()
    r, consumer, _, pipe, membership, made = _rebalancer({(CTX, 1): (0, 7)}, restorer)
    parts = [TopicPartitionOffset(HB, 1, 5), TopicPartitionOffset(CTX, 1, 3)]
    r.assigned(parts)
    assert restorer.restored == [[1]] and made == [restorer]
    # context is state: read from the start, whatever the group says
    assert consumer.calls[0] == ("assign", [(HB, 1, 5), (CTX, 1, -2)])
    assert consumer.calls[1] == ("pause", [(HB, 1)])
    assert membership.restoring == {1: 7} and [p.topic for p in membership.assigned] == [HB, CTX]
    assert 1 in pipe.leases  # a lease generation for the gained partition
    pipe.positions[(CTX, 1)] = 6
    r.check_restored()
    assert membership.restoring == {1: 7} and len(consumer.calls) == 2  # not there yet
    pipe.positions[(CTX, 1)] = 7
    r.check_restored()
    assert membership.restoring == {} and consumer.calls[-1] == ("resume", [(HB, 1)])
    r.assigned([TopicPartitionOffset(HB, 2, 0)])
    assert made == [restorer]  # made once, at the first assignment that needs it


def test_the_rebalancer_without_worker_state_restores_nothing_and_pauses_nothing():
    r, consumer, _, _, membership, made = _rebalancer({})
    r.assigned([TopicPartitionOffset(HB, 0, 0), TopicPartitionOffset(CTX, 0, 0)])
    assert made == [] and membership.restoring == {} and membership.paused == []
    assert [c[0] for c in consumer.calls] == ["assign"]


def test_a_revoke_forgets_the_partitions_even_when_settling_fails():
    r, _, sink, pipe, membership, _ = _rebalancer({})
    parts = [TopicPartitionOffset(HB, 0, 0), TopicPartitionOffset(HB, 1, 0)]
    r.assigned(parts)
    pipe.ingest([record(HB, heartbeat("d1", T0), 0, partition=0)], T0, 0.0)
    assert pipe.pending == 1

    def settle():
        raise RuntimeError("broker gone")

    with pytest.raises(RuntimeError):
        r.revoked(parts[:1], settle)
    assert pipe.pending == 0 and "d1" not in pipe.table
    assert sink.calls == [("forget", [(HB, 0)])]
    assert [(p.topic, p.partition) for p in membership.assigned] == [(HB, 1)]
    r.lost(parts[1:])
    assert sink.calls[1:] == [("abort",), ("begin",), ("forget", [(HB, 1)])]
    assert membership.assigned == []


class FakeLeaseBook:
    def __init__(self, tick: LeaseTick) -> None:
        self.tick = tick

    def lease_tick(self, now_ms):
        return self.tick


def test_the_lease_publisher_holds_leases_back_when_the_lapsed_answers_fail():
    lapsed = [Pending("d1", 0, Reason.LAPSED)]
    tick = LeaseTick(lapsed, [(0, b"k0", b"v0"), (2, b"k2", b"v2")])
    sink = FakeSink()
    publisher = LeasePublisher(FakeLeaseBook(tick), sink, "preds")  # type: ignore[arg-type]
    answered = []
    assert publisher.publish(T0, lambda items: answered.append(items) or False) == 0
    assert answered == [lapsed] and sink.produced == []
    assert publisher.publish(T0, lambda items: True) == 2
    assert sink.produced == [("preds", 0, b"k0", b"v0"), ("preds", 2, b"k2", b"v2")]


class FakeHeartbeats:
    def __init__(self) -> None:
        self.got: list[list] = []

    def ingest(self, msgs, now_ms, mono):
        self.got.append([m.offset() for m in msgs])


def test_ingest_splits_by_topic_role_and_rejects_what_it_does_not_read():
    state, rejected = _state(), []

    def reject(m, reason, detail):
        rejected.append((m.offset(), reason))

    hb = FakeHeartbeats()
    decoder = Decoder(FLEET, lambda field, n: None)
    guard = Guard("t", logging.getLogger("t"))
    ingest = Ingest(state, WorkQueue(state), hb, decoder, guard, reject, input_topics(TOPICS))  # type: ignore[arg-type]
    recs = [
        record(HB, heartbeat("d1", T0), 4),
        record("u.somewhere-else", heartbeat("d1", T0), 9),
        record(WO, work_order("d1", T0), 2, partition=1),
        record(HB, heartbeat("d2", T0), 5),
    ]
    ingest.ingest(recs, T0, 0.0)
    assert hb.got == [[4, 5]]
    assert rejected == [(9, DeadLetterReason.UNKNOWN)]
    assert state.positions == {(HB, 0): 6, ("u.somewhere-else", 0): 10, (WO, 1): 3}
    assert "d1" in state.table.contexts  # the work order folded into the device's context
    assert set(input_topics(TOPICS).values()) == set(INPUT_ROLES)


def test_heartbeat_ingest_decides_routes_and_counts_through_the_shared_state():
    state, decisions, rejected = _state(), [], []
    state.decisions = lambda reason, n: decisions.extend([reason] * n)
    queue = WorkQueue(state)
    guard = Guard("t", logging.getLogger("t"))
    hb = HeartbeatIngest(
        state,
        queue,
        Decoder(FLEET, lambda field, n: None),
        guard,
        lambda m, reason, detail: rejected.append((m.offset(), reason)),
    )
    ahead = T0 + CFG.max_ahead_ms + 1
    hb.ingest(
        [
            record(HB, heartbeat("d1", T0), 0),
            record(HB, heartbeat("d2", T0), 1),
            record(HB, heartbeat("d3", ahead), 2),
        ],
        T0,
        0.0,
    )
    assert rejected == [(2, DeadLetterReason.FUTURE_EVENT_TIME)]
    assert decisions == [Reason.FIRST_SEEN, Reason.FIRST_SEEN]
    items, _ = queue.next_batch(0.0, force=True)
    assert sorted(it.device for it in items) == ["d1", "d2"]


class FakeModel:
    version, labels = "9.9.9", ("a", "b", "c", "d")

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.rows = fail, 0

    def predict(self, x: np.ndarray) -> np.ndarray:
        if self.fail:
            raise RuntimeError("model broke")
        self.rows += len(x)
        p = np.tile(np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32), (len(x), 1))
        return p


class NoLeases:
    def lease_terms(self, slots, computed):
        return [b""] * len(slots)


def test_the_scorer_scores_a_batch_and_remembers_it_only_when_told():
    from workers.precompute.score.scorer import Scorer

    state = _state()
    scorer = Scorer(state, NoLeases(), HB)  # type: ignore[arg-type]
    tab = state.table
    tab.slots(["d1"], [0])
    tab.hb_time[tab.slot["d1"]] = T0
    model = FakeModel()
    r = scorer.compute([Pending("d1", 0, Reason.FIRST_SEEN)], model, T0 + 5)  # type: ignore[arg-type]
    assert model.rows == 1 and r.version == "9.9.9" and r.out.keys == [b"d1"]
    assert b'"strategy":"d"' in r.out.values[0]  # the top score first
    assert state.model_version == "9.9.9"  # primed on first use
    assert tab.valid_until[tab.slot["d1"]] == -1  # nothing remembered before it is published
    scorer.mark_predicted(r, T0 + 5)
    assert tab.valid_until[tab.slot["d1"]] == T0 + CFG.horizon_ms
    assert tab.predicted_at[tab.slot["d1"]] == T0 + 5


class FakeRegistry:
    def __init__(self, model) -> None:
        self.current = model

    def poll(self):
        return None


class DeadLetters(FakeSink):
    def __init__(self) -> None:
        super().__init__()
        self.dead: list[tuple[int, str]] = []

    def dead_letter(self, msg, reason, detail):
        self.dead.append((msg.offset(), reason))


def test_the_output_dead_letters_a_batch_the_model_fails_on_twice():
    pipe = build_pipeline(TOPICS, CFG, _no)
    pipe.ingest([record(HB, heartbeat("d1", T0), 3)], T0, 0.0)
    items, _ = pipe.next_batch(0.0, force=True)
    sink = DeadLetters()
    out = PredictionOutput(
        pipe,
        FakeRegistry(FakeModel(fail=True)),  # type: ignore[arg-type]
        sink,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        "preds",
        "state",
        LoopConfig(),
        lambda: T0,
        rewind=lambda: None,
    )
    assert out.run_batch(items, 0.0) is False
    assert sink.dead == [(3, DeadLetterReason.MODEL_FAILURE)] and out.batches == 0


class RecordingOutput:
    """Another output in the loop's seam: what the shadow run plugs in."""

    def __init__(self) -> None:
        self.batches, self.next_commit = 0, 0.0
        self.seen: list[list[str]] = []
        self.commits: list[tuple[bool, bool]] = []

    def run_batch(self, items, delay, latency=True):
        self.seen.append(sorted(it.device for it in items))
        self.batches += 1
        return True

    def reject(self, msg, reason, detail):
        pass

    def commit(self, sync=False, rewind=True):
        self.commits.append((sync, rewind))

    def discard(self):
        pass


def test_the_loop_sends_batches_and_commits_through_the_output_it_was_given():
    pipe = build_pipeline(TOPICS, CFG, _no)
    out = RecordingOutput()
    consumer, sink = FakeConsumer({}), FakeSink()
    rebalancer = Rebalancer(consumer, pipe, sink, CTX, Membership(), None)  # type: ignore[arg-type]
    worker = Worker(
        consumer,  # type: ignore[arg-type]
        list(input_topics(TOPICS)),
        pipe,
        FakeRegistry(FakeModel()),  # type: ignore[arg-type]
        sink,  # type: ignore[arg-type]
        out,
        rebalancer,
        LeasePublisher(pipe.lease_book, sink, "preds"),  # type: ignore[arg-type]
        Membership(),
        LoopConfig(),
        clock=lambda: T0,
    )
    pipe.ingest([record(HB, heartbeat("d1", T0), 0), record(HB, heartbeat("d2", T0), 1)], T0, 0.0)
    worker.drain()
    worker.commit(sync=True)
    assert out.seen == [["d1", "d2"]] and worker.batches == 1
    assert out.commits == [(True, True)]
