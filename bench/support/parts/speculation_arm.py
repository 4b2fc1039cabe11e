"""One arm of `python -m bench speculation`: a policy's pipeline on the virtual clock, the records
it publishes served the way the read API serves them (a `MemoryStore` with its validity leases),
and optionally every record appended to a real audit log (its bytes are the audit figure), plus
the read profile both arms share."""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from precast.audit.batch import append_records
from precast.audit.store import LogStore
from precast.fleet import Fleet as CompiledFleet
from precast.kafka import Record
from precast.serving import STORED, MemoryStore, lease_from_record, prediction_item
from schemas.predictions import OrderKey
from schemas.spec import load_spec
from schemas.topics import catalog
from workers.model.inference import ModelSession
from workers.precompute.config import LeaseConfig, PolicyConfig
from workers.precompute.items import Pending
from workers.precompute.pipeline import BatchResult, PipelineConfig, build_pipeline

TOPICS = catalog("bench.", 1)
TICK_MS = 100
T0 = 1_900_000_000_000
WARMUP_MS = 5_000  # reads in the first seconds (devices not heard from yet) are not counted
_SERVING = load_spec().serving
FALLBACK = _SERVING.labels.index(_SERVING.default_label)


@dataclass
class Reads:
    """The read profile: Zipf over devices plus one operator paging with prefetch."""

    devices: list[str]
    rate: float  # Zipf reads per second
    seed: int
    page: int = 25
    page_every_ms: int = 2_000
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        n = len(self.devices)
        w = 1.0 / np.arange(1, n + 1) ** 1.1
        self.p = w / w.sum()
        self.order = self.rng.permutation(n)  # rank -> device index

    def tick(self, t_ms: int) -> tuple[list[str], list[str]]:
        """(devices read, devices prefetched) during the tick starting at t_ms."""
        k = self.rng.poisson(self.rate * TICK_MS / 1000)
        ranks = self.rng.choice(len(self.devices), size=k, p=self.p)
        reads = [self.devices[i] for i in self.order[ranks].tolist()]
        prefetch: list[str] = []
        phase = (t_ms - T0) % self.page_every_ms
        page_no = (t_ms - T0) // self.page_every_ms
        if phase == 0:  # the operator opens the next page: reads each row
            reads += self._page(page_no)
        elif phase == self.page_every_ms // 2:  # halfway through: prefetch the next page
            prefetch = self._page(page_no + 1)
        return reads, prefetch

    def _page(self, no: int) -> list[str]:
        start = (no * self.page) % len(self.devices)
        return self.devices[start : start + self.page]


@dataclass
class Outcome:
    events: int = 0
    inferences: int = 0
    renewals: int = 0  # answers published again without an inference (renewed or lapsed)
    records: int = 0  # everything published to the predictions topic: answers and leases
    leases: int = 0
    reads: int = 0
    hits: int = 0
    top1: int = 0
    top3: int = 0
    seconds: float = 0.0
    audit_bytes: int = 0


class Arm:
    """One policy over the stream: its pipeline, the answers a read API would serve, its counts."""

    def __init__(
        self,
        policy: PolicyConfig,
        model: ModelSession,
        lease: LeaseConfig | None = None,
        audit_dir: Path | None = None,
        fleet: CompiledFleet | None = None,
    ) -> None:
        cfg = PipelineConfig(policy=policy, lease=lease or LeaseConfig())
        if fleet is not None:  # another fleet than the built-in one: its own serving settings
            serving = fleet.spec.serving
            cfg = dataclasses.replace(
                cfg, top_k=serving.top_k, horizon_ms=int(serving.horizon_s * 1000)
            )
        self.pipe = build_pipeline(TOPICS, cfg, lambda m, r, d: None, fleet)
        self.fallback = (
            FALLBACK if fleet is None else fleet.spec.labels.index(fleet.spec.serving.default_label)
        )
        self.pipe.decisions = lambda reason, n: None
        self.pipe.assign_leases([0], T0)  # the one partition, as a group assignment would
        self.model = model
        self.store = MemoryStore()
        self.top: dict[str, tuple[OrderKey, int, frozenset[int]]] = {}  # served answers' top-K
        self.asked: dict[str, int] = {}
        self.out = Outcome()
        self._offsets = itertools.count()
        self._log = LogStore(audit_dir / "log.db") if audit_dir is not None else None
        self._audit_dir = audit_dir
        self._unlogged: list[Record] = []

    def ingest(self, recs: list[Record], now_ms: int) -> None:
        t = time.perf_counter()
        if recs:
            self.pipe.ingest(recs, now_ms, 0.0)
        self.pipe.release_deferred(now_ms, 0.0)
        while True:
            items, _ = self.pipe.next_batch(0.0, force=True)
            if not items:
                break
            self._run(items, now_ms)
        tick = self.pipe.lease_tick(now_ms)  # as the worker loop: lapsed answers, then leases
        if tick.lapsed:
            self._run(tick.lapsed, now_ms)
        for _p, key, value in tick.records:
            off = next(self._offsets)
            self.store.put_leases([lease_from_record(value, key, now_ms, off)], now_ms)
            self._publish(key, value, off)
            self.out.leases += 1
        self.out.seconds += time.perf_counter() - t
        if self._log is not None and self._unlogged:
            append_records(self._log, TOPICS.predictions.name, self._unlogged)
            self._unlogged = []

    def _run(self, items: list[Pending], now_ms: int) -> None:
        r = self.pipe.compute(items, self.model, now_ms)
        self.pipe.mark_predicted(r, now_ms)
        self._serve(r, now_ms)

    def _publish(self, key: bytes, value: bytes, offset: int) -> None:
        self.out.records += 1
        if self._log is not None:
            self._unlogged.append(Record(TOPICS.predictions.name, 0, offset, key, value))

    def _serve(self, r: BatchResult, now_ms: int) -> None:
        assert r.idx is not None and r.inferred is not None
        n_inf = int(r.inferred.sum())
        self.out.inferences += n_inf
        self.out.renewals += len(r.items) - n_inf
        items = [
            prediction_item(v, now_ms, k) for k, v in zip(r.out.keys, r.out.values, strict=True)
        ]
        results = self.store.put_many_if_newer(items, now_ms, ids_checked=True)
        for j, ((d, e), res) in enumerate(zip(items, results, strict=True)):
            self._publish(r.out.keys[j], r.out.values[j], next(self._offsets))
            if res == STORED:  # newest-wins, as the store decided
                row = r.idx[j].tolist()
                self.top[d] = (e.key, row[0], frozenset(row))

    def read(
        self, devices: list[str], truth1: np.ndarray, truth3: list[frozenset[int]], t_ms: int
    ) -> list[tuple[str, str]]:
        """Serve reads as the API does (valid under leases included); returns the precompute
        requests the API would send for misses."""
        asks = []
        count = t_ms >= T0 + WARMUP_MS
        for j, d in enumerate(devices):
            e = self.store.get(d, t_ms)
            if e is not None and not e.purge and t_ms < e.valid_until_ms:
                key, top1, top3 = self.top[d]
                assert key == e.key
                self.out.hits += count
            else:
                top1, top3 = self.fallback, frozenset((self.fallback,))
                if self.asked.get(d, -1) < t_ms - 1_000:  # once per device per window
                    self.asked[d] = t_ms
                    asks.append((d, "expiry" if self.store.peek(d) is not None else "api_miss"))
            self.out.reads += count
            self.out.top1 += count and top1 == int(truth1[j])
            self.out.top3 += count and top3 == truth3[j]
        return asks

    def close(self) -> None:
        """Close the audit log (its WAL folded back) and measure what it holds on disk."""
        if self._log is None or self._audit_dir is None:
            return
        self._log.close()
        self._log = None
        self.out.audit_bytes = sum(p.stat().st_size for p in self._audit_dir.glob("log.db*"))
