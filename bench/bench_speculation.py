"""What speculation buys: the worker's policy against predict-on-every-event, side by side on the
same event stream and the same reads (docs/workers.md, "The speculation trade-off").

Both arms run the real worker pipeline (decode, policy, features, the shipped ONNX model, top-K,
encode) in one process on a virtual clock, fed the same simulated fleet (`producers.simulator`,
per profile) and read by the same operators:
- Zipf reads over the fleet (a few devices are read all the time, most rarely),
- an operator paging through the device list, prefetching the next page before moving on.
Reads feed hotness back to the workers (as the read API does through the read-hints topic), a
read that finds no valid answer asks for one (as the API does), and at every read the served
answer is compared with a fresh on-demand inference on the device's newest data.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import orjson

from bench.harness import Context, Figure, Report, progress
from precast.kafka import Record
from producers.simulator import Fleet
from schemas.spec import load_spec
from schemas.topics import catalog
from workers.model.inference import ModelSession
from workers.precompute.pipeline import BatchResult, Pipeline, PipelineConfig
from workers.precompute.policy import PolicyConfig
from workers.settings import DEFAULT_MODEL_DIR

NAME = "speculation"
DESCRIPTION = "policy vs predict-on-every-event: inferences, hit ratio, answer quality"

# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = (
    "one core: a single process, no broker; the savings and agreements are counts and do not "
    "depend on CPU."
)
TOPICS = catalog("bench.", 1)
ROLE_TOPIC = {
    "heartbeat": TOPICS.heartbeats.name,
    "work_order": TOPICS.work_orders.name,
    "alarm": TOPICS.alarms.name,
}
TICK_MS = 100
HINT_EVERY_MS = 1_000  # the read API publishes read hints once a second
HOT_FOR_MS = 30_000  # a read keeps a device hot this long
T0 = 1_900_000_000_000
WARMUP_MS = 5_000  # reads in the first seconds (devices not heard from yet) are not counted
_SERVING = load_spec().serving
STRATEGIES = _SERVING.labels
FALLBACK = STRATEGIES.index(_SERVING.default_label)


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
    renewals: int = 0
    reads: int = 0
    hits: int = 0
    top1: int = 0
    top3: int = 0
    seconds: float = 0.0


class Arm:
    """One policy over the stream: its pipeline, its served answers, its counts."""

    def __init__(self, policy: PolicyConfig, model: ModelSession) -> None:
        self.pipe = Pipeline(TOPICS, PipelineConfig(policy=policy), lambda m, r, d: None)
        self.pipe.decisions = lambda reason, n: None
        self.model = model
        self.answers: dict[str, tuple[int, int, int, frozenset[int]]] = {}
        self.asked: dict[str, int] = {}
        self.out = Outcome()

    def ingest(self, recs: list[Record], now_ms: int) -> None:
        t = time.perf_counter()
        if recs:
            self.pipe.ingest(recs, now_ms, 0.0)
        self.pipe.release_deferred(now_ms, 0.0)
        while True:
            items, _ = self.pipe.next_batch(0.0, force=True)
            if not items:
                break
            r = self.pipe.compute(items, self.model, now_ms)
            self.pipe.mark_predicted(r, now_ms)
            self._serve(r)
        self.out.seconds += time.perf_counter() - t

    def _serve(self, r: BatchResult) -> None:
        assert r.idx is not None and r.inferred is not None
        n_inf = int(r.inferred.sum())
        self.out.inferences += n_inf
        self.out.renewals += len(r.items) - n_inf
        horizon = self.pipe.cfg.horizon_ms
        for j, it in enumerate(r.items):
            c = int(r.computed_at[j])
            old = self.answers.get(it.device)
            if old is None or c >= old[0]:  # newest computed_at wins, as the store does
                row = r.idx[j].tolist()
                self.answers[it.device] = (c, c + horizon, row[0], frozenset(row))

    def read(
        self, devices: list[str], truth1: np.ndarray, truth3: list[frozenset[int]], t_ms: int
    ) -> list[tuple[str, str]]:
        """Serve reads; returns the precompute requests the API would send for misses."""
        asks = []
        count = t_ms >= T0 + WARMUP_MS
        for j, d in enumerate(devices):
            a = self.answers.get(d)
            if a is not None and t_ms < a[1]:
                top1, top3 = a[2], a[3]
                self.out.hits += count
            else:
                top1, top3 = FALLBACK, frozenset((FALLBACK,))
                if self.asked.get(d, -1) < t_ms - 1_000:  # once per device per window
                    self.asked[d] = t_ms
                    asks.append((d, "expiry" if a is not None else "api_miss"))
            self.out.reads += count
            self.out.top1 += count and top1 == int(truth1[j])
            self.out.top3 += count and top3 == truth3[j]
        return asks


def _records(events: list, offsets: Iterator[int]) -> list[Record]:
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("kind") in ROLE_TOPIC:
            out.append(
                Record(
                    ROLE_TOPIC[e["kind"]],
                    0,
                    next(offsets),
                    e["device_id"].encode(),
                    orjson.dumps(e),
                )
            )
    return out


def _requests(asks: list[tuple[str, str]], t_ms: int, offsets: Iterator[int]) -> list[Record]:
    ids = itertools.count()
    return [
        Record(
            TOPICS.precompute_requests.name,
            0,
            next(offsets),
            d.encode(),
            orjson.dumps(
                {
                    "schema_version": 1,
                    "request_id": f"r{t_ms}-{next(ids)}",
                    "device_id": d,
                    "reason": reason,
                    "requested_at_ms": t_ms,
                }
            ),
        )
        for d, reason in asks
    ]


def simulate(
    profile: str,
    policies: dict[str, PolicyConfig],
    model: ModelSession,
    *,
    devices: int,
    seconds: int,
    read_rate: float,
    seed: int = 5,
) -> dict[str, Outcome]:
    """Run every policy over one and the same event stream and read sequence."""
    fleet = Fleet(devices, seed, profile=profile, drift_share=0.05, drift_s=120.0, run_id="bench")
    reads = Reads(fleet.ids, read_rate, seed)
    arms = {name: Arm(p, model) for name, p in policies.items()}
    ref = next(iter(arms.values())).pipe  # every arm holds the same newest data
    offsets = itertools.count()
    per_tick = devices * TICK_MS // 1000
    hot: set[str] = set()
    pending_asks: dict[str, list[tuple[str, str]]] = {name: [] for name in arms}
    prefetch_next: list[str] = []
    for tick in range(seconds * 1000 // TICK_MS):
        t = T0 + tick * TICK_MS
        recs = _records(fleet.step(per_tick, t), offsets)
        for name, arm in arms.items():
            arm.out.events += sum(r.topic_ == TOPICS.heartbeats.name for r in recs)
            arm.ingest(recs + _requests(pending_asks[name], t, offsets), t)
            pending_asks[name] = [(d, "prefetch") for d in prefetch_next]
        read, prefetch_next = reads.tick(t)
        hot.update(read)
        hot.update(prefetch_next)
        if (t - T0) % HINT_EVERY_MS == 0 and hot:
            for arm in arms.values():
                arm.pipe.mark_hot(sorted(hot), t + HOT_FOR_MS)
            hot.clear()
        if read:
            slots = np.fromiter((ref.table.slot.get(d, 0) for d in read), dtype=np.int64)
            x, _ = ref.features_of(read, slots, t)
            probs = model.predict(x)
            order = np.argsort(-probs, axis=1, kind="stable")
            truth1 = order[:, 0]
            truth3 = [frozenset(r) for r in order[:, :3].tolist()]
            for name, arm in arms.items():
                pending_asks[name] += arm.read(read, truth1, truth3, t)
    return {name: arm.out for name, arm in arms.items()}


def _row(profile: str, name: str, o: Outcome, base: Outcome) -> list:
    return [
        profile,
        name,
        o.events,
        o.inferences,
        round(o.inferences / max(o.events, 1), 4),
        round(base.inferences / max(o.inferences, 1), 2),
        o.renewals,
        round(o.hits / max(o.reads, 1), 5),
        round(o.top1 / max(o.reads, 1), 5),
        round(o.top3 / max(o.reads, 1), 5),
    ]


def run(ctx: Context) -> Report:
    model = ModelSession(DEFAULT_MODEL_DIR, provider="cpu")
    devices, seconds, read_rate = (500, 20, 20.0) if ctx.quick else (2_000, 60, 50.0)
    conditions = (
        f"{devices} devices, 1 heartbeat/s each for {seconds} s (virtual clock), Zipf(1.1) reads "
        f"at {read_rate:.0f}/s + a paging operator (25 rows per 2 s, next page prefetched), "
        f"hot = read in the last {HOT_FOR_MS // 1000} s; horizon 5 s; reads of the first "
        f"{WARMUP_MS // 1000} s not counted; model {model.version}"
    )
    rows, figures = [], []
    default = PolicyConfig()
    for profile in ("noisy", "steady", "iid"):
        progress(f"speculation: profile {profile}: every-event vs policy ...")
        res = simulate(
            profile,
            {"every event": PolicyConfig(every_event=True), "policy": default},
            model,
            devices=devices,
            seconds=seconds,
            read_rate=read_rate,
        )
        base, pol = res["every event"], res["policy"]
        rows.append(_row(profile, "every event", base, base))
        rows.append(
            _row(
                profile,
                f"policy (safety {default.safety:g}, hot {default.hot_safety:g})",
                pol,
                base,
            )
        )
        suffix = "" if profile == "noisy" else f"_{profile}"
        figures += [
            Figure(
                f"speculation_inference_savings{suffix}",
                round(base.inferences / max(pol.inferences, 1), 2),
                "ratio",
                "predict-on-every-event inferences / policy inferences",
                f"profile {profile}; {conditions}",
            ),
            Figure(
                f"speculation_hit_ratio{suffix}",
                round(pol.hits / max(pol.reads, 1), 5),
                "ratio",
                f"every event: {base.hits / max(base.reads, 1):.5f}",
                f"profile {profile}; reads served a valid precomputed answer; {conditions}",
            ),
            Figure(
                f"speculation_top1_agreement{suffix}",
                round(pol.top1 / max(pol.reads, 1), 5),
                "ratio",
                f"every event: {base.top1 / max(base.reads, 1):.5f}",
                f"profile {profile}; served top-1 == fresh inference on newest data at read "
                f"time; {conditions}",
            ),
            Figure(
                f"speculation_top3_agreement{suffix}",
                round(pol.top3 / max(pol.reads, 1), 5),
                "ratio",
                f"every event: {base.top3 / max(base.reads, 1):.5f}",
                f"profile {profile}; served top-3 set == fresh top-3 set; {conditions}",
            ),
        ]
    progress("speculation: the safety curve on the noisy profile ...")
    curve = {f"safety {c:g}, hot 2": PolicyConfig(safety=c) for c in (0.25, 0.5, 1, 2)}
    curve |= {f"safety 0.5, hot {h:g}": PolicyConfig(hot_safety=h) for h in (1, 4)}
    curve["safety 0.5, hot 2, hot top-K guarded"] = PolicyConfig(hot_top_k=True)
    res = simulate(
        "noisy",
        {"every event": PolicyConfig(every_event=True), **curve},
        model,
        devices=devices,
        seconds=seconds,
        read_rate=read_rate,
    )
    base = res.pop("every event")
    for name, o in res.items():
        rows.append(_row("noisy (curve)", name, o, base))
    return Report(
        "Speculation: policy vs predict-on-every-event, same events and reads (`python -m bench "
        "speculation`)",
        [
            "profile",
            "policy",
            "heartbeats",
            "inferences",
            "inferences/event",
            "savings",
            "renewals",
            "hit ratio",
            "top-1 agreement",
            "top-3 agreement",
        ],
        rows,
        figures,
        [
            conditions,
            "savings = every-event inferences / this policy's; agreement over all reads (a miss serves "
            "the fallback, compared like any answer)",
        ],
    )
