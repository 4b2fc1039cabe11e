"""Validity leases on the worker side, pure (no broker), with the real model: which answers get
lease terms, when a partition's lease is published and what it certifies, the lapse of a device
that stops sending (published before the lease that leaves it out), generations, and what it
all costs in records against republishing whole answers (docs/workers.md, "Validity leases")."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from schemas.leases import ValidityLease, is_lease_key, lease_key
from schemas.predictions import PredictionSet
from schemas.topics import catalog
from tests.worker_events import T0, heartbeat, record
from workers.model.inference import ModelSession
from workers.precompute.config import LeaseConfig, PolicyConfig
from workers.precompute.items import Reason
from workers.precompute.pipeline import PipelineConfig, build_pipeline
from workers.precompute.publish.lease_book import slack_ms
from workers.settings import DEFAULT_MODEL_DIR

TOPICS = catalog("u.", 3)
HB = TOPICS.heartbeats.name
HORIZON, INTERVAL, LEAD = 5_000, 1_000, 1_000
SLACK = HORIZON - INTERVAL - LEAD


@pytest.fixture(scope="module")
def model():
    return ModelSession(DEFAULT_MODEL_DIR, provider="cpu")


class Run:
    """A pipeline on a virtual clock that publishes what the worker loop would, in its order."""

    def __init__(self, model, *, enabled=True, partitions=(0,), max_extension_ms=900_000):
        cfg = PipelineConfig(
            policy=PolicyConfig(throttle_ms=0, refresh_lead_ms=LEAD),
            horizon_ms=HORIZON,
            lease=LeaseConfig(enabled, INTERVAL, max_extension_ms),
        )
        self.p = build_pipeline(TOPICS, cfg, lambda m, r, d: None)
        self.decisions: list[Reason] = []
        self.p.decisions = lambda reason, n: self.decisions.extend([reason] * n)
        self.model = model
        self.offset = 0
        self.records: list[tuple[int, bytes, bytes]] = []  # (partition, key, value) in order
        self.inferences = 0
        self.state: dict[bytes, bytes] = {}
        self.p.assign_leases(list(partitions), T0)

    def beat(self, devices, t, partition=0, **metrics) -> None:
        recs = []
        for d in devices:
            recs.append(record(HB, heartbeat(d, t, **metrics), self.offset, partition))
            self.offset += 1
        self.p.ingest(recs, t, 0.0)
        self.flush(t)

    def flush(self, t: int, items=None) -> None:
        while True:
            if items is None:
                items, _ = self.p.next_batch(0.0, force=True)
            if not items:
                return
            r = self.p.compute(items, self.model, t)
            self.p.mark_predicted(r, t)
            # the worker-state changelog, as the loop writes it (newest per device)
            self.state.update(zip(r.out.keys, self.p.state_records(r), strict=True))
            self.inferences += int(r.inferred.sum())
            self.records += [
                (it.partition, k, v)
                for it, k, v in zip(r.items, r.out.keys, r.out.values, strict=True)
            ]
            items = None

    def tick(self, t: int) -> None:
        """What `LeasePublisher.publish` does: lapsed answers first, then the leases."""
        tick = self.p.lease_tick(t)
        if tick.lapsed:
            self.flush(t, tick.lapsed)
        self.records += tick.records

    def answers(self, device: str | None = None) -> list[PredictionSet]:
        return [
            PredictionSet.model_validate_json(v)
            for _, k, v in self.records
            if not is_lease_key(k) and (device is None or k == device.encode())
        ]

    def leases(self) -> list[ValidityLease]:
        return [ValidityLease.model_validate_json(v) for _, k, v in self.records if is_lease_key(k)]


def test_slack_is_what_is_left_of_the_horizon():
    cfg = PipelineConfig(horizon_ms=HORIZON, lease=LeaseConfig(True, INTERVAL))
    assert slack_ms(cfg) == SLACK == 3_000


def test_a_quiet_device_is_kept_valid_by_leases_not_by_republishing(model):
    run = Run(model)
    for s in range(12):  # stable heartbeats every second for 12 s
        run.beat(["d1", "d2"], T0 + s * 1_000)
        run.tick(T0 + s * 1_000)
    first = run.answers("d1")
    assert len(first) == 1, "one answer, no renewal records"
    a = first[0]
    assert a.lease is not None and a.lease.partition == 0
    assert a.lease.until_ms == a.computed_at_ms + 900_000
    assert a.valid_until_ms == a.computed_at_ms + HORIZON  # its own validity is unchanged
    assert Reason.RENEWED not in run.decisions
    leases = run.leases()
    # none while the generation warms up (3 s of the partition's data), then one a second
    assert leases and leases[0].certified_at_ms == T0 + SLACK - SLACK
    assert len(leases) == 12 - 3
    for x in leases:
        assert x.generation == a.lease.generation and x.partition == 0
        assert x.valid_until_ms == x.certified_at_ms + HORIZON and x.devices == 2
    w = [x.certified_at_ms for x in leases]
    assert w == sorted(w) and w[-1] == T0 + 11_000 - SLACK
    # continuous: each lease ends after the next one was published
    for prev, nxt in zip(leases, leases[1:], strict=False):
        assert prev.valid_until_ms > nxt.produced_at_ms
    # what it cost: 2 inferences, 2 answer records and one lease per second
    assert run.inferences == 2 and len(run.records) == 2 + len(leases)


def test_whole_renewals_republish_every_answer_before_its_horizon(model):
    run = Run(model, enabled=False)
    for s in range(12):
        run.beat(["d1", "d2"], T0 + s * 1_000)
        run.tick(T0 + s * 1_000)
    assert run.leases() == []
    renewed = [a for a in run.answers("d1") if a.trigger == "expiry"]
    assert len(renewed) >= 3 and all(a.lease is None for a in run.answers())
    assert run.inferences == 2  # renewals are not inferences either: they are records


def test_a_device_that_stops_sending_lapses_before_the_lease_that_leaves_it_out(model):
    run = Run(model)
    for s in range(6):
        run.beat(["d1", "d2"], T0 + s * 1_000)
        run.tick(T0 + s * 1_000)
    silent_since = T0 + 5_000
    for s in range(6, 12):  # d2 stops sending
        run.beat(["d1"], T0 + s * 1_000)
        run.tick(T0 + s * 1_000)
    lapsed = [a for a in run.answers("d2") if a.lease is None]
    assert len(lapsed) == 1, "exactly one last record for the silent device"
    last = lapsed[0]
    assert last.computed_at_ms == silent_since and last.valid_until_ms == silent_since + HORIZON
    assert last.trigger == "expiry" and last.inference_ms == 0
    assert [r.state for r in last.lineage] == [True]  # it names the heartbeat it stands on
    # every lease before the lapse covered d2 with an end within its own data time + horizon;
    # the first lease after it no longer counts it
    i_lapse = next(
        i for i, (_, k, v) in enumerate(run.records) if k == b"d2" and b'"lease"' not in v
    )
    before = [
        ValidityLease.model_validate_json(v) for _, k, v in run.records[:i_lapse] if is_lease_key(k)
    ]
    after = [
        ValidityLease.model_validate_json(v) for _, k, v in run.records[i_lapse:] if is_lease_key(k)
    ]
    assert all(x.valid_until_ms <= silent_since + HORIZON for x in before if x.devices == 2)
    assert after and all(x.devices == 1 for x in after)
    assert after[0].certified_at_ms > silent_since  # it would have reached past d2's data
    assert run.decisions.count(Reason.LAPSED) == 0  # a tick's own reason, not a policy decision
    # d2 comes back: published again at once (its own validity: the gap was long), then with
    # terms once its cadence is known again, and leases cover it
    for s in range(20, 25):
        run.beat(["d1", "d2"], T0 + s * 1_000)
        run.tick(T0 + s * 1_000)
    back = run.answers("d2")[-2:]
    assert back[0].computed_at_ms == T0 + 20_000 and back[0].lease is None
    assert back[1].trigger == "expiry" and back[1].lease is not None
    assert run.leases()[-1].devices == 2


def test_a_device_beating_slower_than_leases_allow_is_renewed_per_answer(model):
    run = Run(model)
    gap = SLACK + 500  # a lease could not keep it valid from one beat to the next
    for s in range(10):
        run.beat(["slow"], T0 + s * gap)
        run.tick(T0 + s * gap)
    answers = run.answers("slow")
    assert answers[0].lease is not None  # the first: cadence unknown, taken as fitting
    assert answers[1].lease is None and answers[1].computed_at_ms == T0 + gap  # lapsed
    assert all(a.lease is None for a in answers[1:])  # then renewed per answer, no churn
    renewed = [a for a in answers[2:] if a.trigger == "expiry"]
    assert len(renewed) >= 4
    for a, b in zip(answers[1:], answers[2:], strict=False):
        assert b.computed_at_ms - a.computed_at_ms <= gap  # valid from one beat to the next


def test_an_answer_is_renewed_once_per_max_extension(model):
    run = Run(model, max_extension_ms=8_000)
    for s in range(20):
        run.beat(["d1"], T0 + s * 1_000)
        run.tick(T0 + s * 1_000)
    answers = run.answers("d1")
    renewed = [a for a in answers if a.trigger == "expiry"]
    # renewed when the next heartbeat would come within the refresh lead of the terms' end
    assert [a.computed_at_ms - T0 for a in renewed] == [6_000, 12_000, 18_000]
    assert all(a.lease is not None for a in answers) and run.inferences == 1
    for a, b in zip(answers, answers[1:], strict=False):
        assert b.computed_at_ms <= a.lease.until_ms  # renewed before its terms ran out


def test_generations_grow_across_owners_and_a_whole_renewing_owner_clamps_leased_state(model):
    run = Run(model)
    for s in range(5):
        run.beat(["d1"], T0 + s * 1_000)
    gen1 = run.p.leases[0].generation
    run.p.forget_leases([0])
    # a new owner whose clock is behind: still a higher generation than what it restored
    run.p.assign_leases([0], T0 - 60_000)
    assert run.p.leases[0].generation > gen1
    slot = run.p.table.slot["d1"]
    assert run.p.table.valid_until[slot] - run.p.table.computed_at[slot] > HORIZON
    whole = Run(model, enabled=False, partitions=())
    whole.p.table = run.p.table
    whole.p.assign_leases([0], T0)
    assert whole.p.table.valid_until[slot] == whole.p.table.computed_at[slot] + HORIZON


def test_a_partition_behind_publishes_no_lease_that_would_end_before_the_next(model):
    run = Run(model)
    for s in range(6):
        run.beat(["d1"], T0 + s * 1_000)
    run.tick(T0 + 5_000 + 3_000)  # the clock 3 s past the partition's newest data
    assert run.leases() == []
    run.tick(T0 + 5_000 + 500)
    assert run.leases() == [] or run.leases()[-1].valid_until_ms > T0 + 5_500 + INTERVAL


def test_leases_go_to_their_own_partition_with_its_key(model):
    run = Run(model, partitions=(0, 1))
    for s in range(6):
        run.beat(["a"], T0 + s * 1_000, partition=0)
        run.beat(["b"], T0 + s * 1_000, partition=1)
        run.tick(T0 + s * 1_000)
    keys = {(p, k) for p, k, _ in run.records if is_lease_key(k)}
    assert keys == {(0, lease_key(0)), (1, lease_key(1))}
    for p, k, v in run.records:
        if is_lease_key(k):
            assert orjson.loads(v)["partition"] == p


def test_records_per_inference_stay_bounded_where_whole_renewals_grow(model):
    """40 stable devices for 60 s: with leases, records ~ inferences + one lease a second; the
    older way adds about one whole answer per device and horizon (bench speculation measures the
    same on a noisy fleet)."""

    def cost(enabled: bool) -> tuple[int, int]:
        run = Run(model, enabled=enabled)
        devices = [f"d{i}" for i in range(40)]
        for s in range(60):
            run.beat(devices, T0 + s * 1_000)
            run.tick(T0 + s * 1_000)
        return len(run.records), run.inferences

    leased, inf_l = cost(True)
    whole, inf_w = cost(False)
    assert inf_l == inf_w == 40
    assert leased / inf_l <= 1 + 60 / 40  # one answer each + at most one lease a second
    assert whole / inf_w > 10  # ~ 60 s / 3 s renewals per device
    assert np.isclose(leased, 40 + 57, atol=2)


def test_a_new_owner_restores_leased_answers_and_keeps_them_valid_without_republishing(model):
    """A rebalance: the new owner restores the changelog (written when each answer was
    published, so its heartbeat times are old), warms up, and leases the restored answers under
    a higher generation; the stale heartbeat time is not taken for a slow cadence."""
    old = Run(model)
    for s in range(6):
        old.beat(["d1", "d2"], T0 + s * 1_000)
        old.tick(T0 + s * 1_000)
    gen1 = old.p.leases[0].generation
    new = Run(model, partitions=())
    devices, rec, bad, foreign = new.p.scorer.layout.decode(
        list(old.state), list(old.state.values())
    )
    assert (len(devices), bad, foreign) == (2, 0, 0)
    new.p.table.restore(devices, [0] * len(devices), rec)
    new.p.assign_leases([0], T0 + 6_000)
    new.tick(T0 + 6_000)  # a tick before any input: the restored state alone proves nothing
    for s in range(6, 14):
        new.beat(["d1", "d2"], T0 + s * 1_000)
        new.tick(T0 + s * 1_000)
    assert new.answers() == []  # nothing republished, no lapse: the restored answers stand
    leases = new.leases()
    assert leases and all(x.generation > gen1 and x.devices == 2 for x in leases)
    # only after a slack of the new owner's own data (every live device heard from again)
    assert leases[0].certified_at_ms >= T0 + 6_000 and len(leases) >= 14 - 6 - 4

    # a backlog: the first poll after the takeover holds only some devices' heartbeats; the
    # others, alive, are not taken for silent (their state is the restored one)
    late = Run(model, partitions=())
    late.p.table.restore(devices, [0] * len(devices), rec)
    late.p.assign_leases([0], T0 + 6_000)
    late.beat(["d1"], T0 + 6_000)
    late.tick(T0 + 6_000)
    for s in range(7, 14):
        late.beat(["d1", "d2"], T0 + s * 1_000)
        late.tick(T0 + s * 1_000)
    assert late.answers() == [] and late.leases()[-1].devices == 2
