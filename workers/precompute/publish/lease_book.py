"""Validity leases on the worker side (`LeaseBook`, a part of `Pipeline`; contract in
schemas.leases, design in docs/workers.md "Validity leases"). Pure: the loop produces what
`lease_tick` returns.

Every heartbeat still goes through the speculation policy; what changes is how an answer the
policy certified unchanged stays valid. Instead of publishing it again before its horizon runs
out (a whole PredictionSet per device and horizon), the worker publishes per partition and
interval one lease: "generation g checked every device it holds on partition p against data up
to at least W (certified_at); their answers stay valid until W + horizon". So:

- W = the partition's newest heartbeat time minus `slack` (horizon - interval - refresh lead:
  what is left of the horizon once the next lease and a margin are accounted for), never lower
  than the last W; a device is covered when its newest heartbeat is at least W, i.e. it sent
  one within `slack` of the partition's newest. Lease ends are then never later than a covered
  device's own data time + horizon, exactly what republishing its answer would give.
- A leased answer (one published with `LeaseTerms`) whose device is no longer covered (it
  stopped sending) is published once more without terms, valid until its own data time +
  horizon (`Reason.LAPSED`), *before* the lease that leaves it out. Stores apply records in
  order, so no lease ever extends it; its next heartbeat publishes it again with terms.
- An answer gets terms only when its device's cadence fits (its last heartbeat interval at most
  half of `slack`; unknown counts as fitting), it has a heartbeat, and it was seen within the
  current W. A leased device found beating slower lapses like a silent one: from then on it is
  renewed per answer, as before leases, without churning between leases and lapses (a lease
  could not keep it valid between its beats).
- Terms end `max_extension_ms` after the answer's data time: the policy's refresh rule counts
  from there for a leased answer, so a quiet device is republished once per max extension
  (15 min by default), which bounds anything a lease could wrongly extend.
- A generation is the worker's for a partition from one assignment to its revocation: the
  wall clock at assignment, and above every restored device's last production time (so it grows
  across owners even when their clocks disagree). A new generation publishes no lease until it
  has seen `slack` of the partition's data (every live device has been heard from again), and
  only while caught up (a lease that would end before the next one is not published).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from schemas.leases import lease_key
from workers.precompute import metrics
from workers.precompute.config import PipelineConfig
from workers.precompute.items import Pending, Reason
from workers.precompute.state.shared import PipelineState


@dataclass
class PartitionLease:
    generation: int
    certified_at_ms: int = -1  # W of the last lease published (never goes down)
    start_wm_ms: int = -1  # the partition's newest heartbeat time when this generation began
    next_at_ms: int = 0  # worker clock: the next tick
    restored_wm_ms: int = -1  # the newest heartbeat time in the state it restored


@dataclass
class LeaseTick:
    """What a tick asks the loop to publish, in this order: the lapsed answers (through the
    usual compute path, no inference), then the lease records."""

    lapsed: list[Pending] = field(default_factory=list)
    records: list[tuple[int, bytes, bytes]] = field(default_factory=list)  # partition, key, value


def slack_ms(cfg: PipelineConfig) -> int:
    """How long a device may stay silent and still be covered (0: leases cannot work)."""
    return cfg.horizon_ms - cfg.lease.interval_ms - cfg.policy.refresh_lead_ms


class LeaseBook:
    """The lease generation and state of each assigned partition, over the shared device table
    (`state.table`) under the shared config (`state.cfg`)."""

    def __init__(self, state: PipelineState) -> None:
        self.state = state
        self.leases: dict[int, PartitionLease] = {}
        self._last_generation = 0

    @property
    def leasing(self) -> bool:
        c = self.state.cfg
        return c.lease.enabled and not c.backfill and not c.policy.always and slack_ms(c) > 0

    def assign_leases(self, partitions: list[int], now_ms: int) -> None:
        """A new generation for each gained partition (after its state was restored)."""
        tab = self.state.table
        if not self.leasing:
            # a state written under leases (terms until a long max extension) must not keep a
            # worker that renews whole answers from renewing them
            cap = tab.computed_at + self.state.cfg.horizon_ms
            mine = np.isin(tab.partition, partitions) & (tab.valid_until > cap)
            tab.valid_until[mine] = cap[mine]
            return
        restored = np.isin(tab.partition, partitions)
        last = int(tab.predicted_at[restored].max()) if restored.any() else 0
        gen = max(now_ms, last + 1, self._last_generation + 1)
        self._last_generation = gen
        for p in partitions:
            mine = tab.partition == p
            wm = int(tab.hb_time[mine].max()) if mine.any() else -1
            self.leases[p] = PartitionLease(gen, next_at_ms=now_ms, restored_wm_ms=wm)

    def forget_leases(self, partitions: list[int] | set[int]) -> None:
        for p in partitions:
            self.leases.pop(p, None)

    def rewarm_leases(self) -> None:
        """After the state was reset and restored again (an aborted transaction): warm up on
        the input read again, as a new owner would (the generation stays: same owner)."""
        tab = self.state.table
        for p, st in self.leases.items():
            mine = tab.partition == p
            st.start_wm_ms = -1
            st.restored_wm_ms = int(tab.hb_time[mine].max()) if mine.any() else -1

    def lease_terms(self, slots: np.ndarray, computed: np.ndarray) -> list[bytes]:
        """Per item: the `"lease"` member of its PredictionSet (b"" for an answer leases must
        not extend), and which items got one (`leased_of`)."""
        if not self.leases or not self.leasing:
            return [b""] * len(slots)
        tab, cfg = self.state.table, self.state.cfg
        max_gap = slack_ms(cfg) // 2
        gap, hb = tab.hb_gap[slots], tab.hb_time[slots]
        part = tab.partition[slots].tolist()
        until = (computed + cfg.lease.max_extension_ms).tolist()
        ok = ((gap < 0) | (gap <= max_gap)) & (hb >= 0)
        out = []
        for j, fits in enumerate(ok.tolist()):
            st = self.leases.get(part[j])
            if not fits or st is None or hb[j] < st.certified_at_ms:
                out.append(b"")
                continue
            out.append(
                b',"lease":{"partition":%d,"generation":%d,"until_ms":%d}'
                % (part[j], st.generation, until[j])
            )
        return out

    def lease_tick(self, now_ms: int) -> LeaseTick:
        """Leases due now; the lapsed answers first (see the module docstring)."""
        out = LeaseTick()
        due = [p for p, st in self.leases.items() if now_ms >= st.next_at_ms]
        if not due or not self.leasing:
            return out
        cfg, tab = self.state.cfg, self.state.table
        interval, slack, horizon = cfg.lease.interval_ms, slack_ms(cfg), cfg.horizon_ms
        n = len(tab.partition)
        part, hb = tab.partition[:n], tab.hb_time[:n]
        live = (part >= 0) & (hb >= 0)
        width = int(part.max()) + 1 if n else 0
        wm = np.full(max(width, max(due) + 1), -1, dtype=np.int64)
        np.maximum.at(wm, part[live], hb[live])
        leased = live & (tab.valid_until[:n] - tab.computed_at[:n] > horizon)
        gap, max_gap = tab.hb_gap[:n], slack // 2
        for p in sorted(due):
            st = self.leases[p]
            st.next_at_ms = now_ms + interval
            w = int(wm[p])
            if w <= st.restored_wm_ms:  # nothing consumed yet beyond the restored state
                continue
            if st.start_wm_ms < 0:  # the warm-up counts this generation's own data only
                st.start_wm_ms = w
            certified = max(st.certified_at_ms, w - slack)
            # warming up (not every live device heard from since this generation began), or
            # behind (the lease would end before the next one): nothing to promise yet
            if w - st.start_wm_ms < slack or certified + horizon <= now_ms + interval:
                metrics.LEASES_SKIPPED.inc()
                continue
            mine = leased & (part == p)
            # stopped sending, or beating too slowly for leases to keep it valid between beats
            gone = np.flatnonzero(mine & ((hb < certified) | (gap > max_gap)))
            covered = int(mine.sum()) - len(gone)
            if len(gone):
                devices = self._devices_of(gone)
                out.lapsed += [Pending(d, p, Reason.LAPSED) for d in devices]
            st.certified_at_ms = certified
            if covered:
                out.records.append((p, lease_key(p), _lease_value(p, st, horizon, now_ms, covered)))
        return out

    def _devices_of(self, slots: np.ndarray) -> list[str]:
        wanted = set(slots.tolist())
        return [d for d, s in self.state.table.slot.items() if s in wanted]


def _lease_value(p: int, st: PartitionLease, horizon_ms: int, now_ms: int, n: int) -> bytes:
    return (
        b'{"schema_version":1,"kind":"validity_lease","partition":%d,"generation":%d,'
        b'"certified_at_ms":%d,"valid_until_ms":%d,"produced_at_ms":%d,"devices":%d}'
        % (p, st.generation, st.certified_at_ms, st.certified_at_ms + horizon_ms, now_ms, n)
    )
