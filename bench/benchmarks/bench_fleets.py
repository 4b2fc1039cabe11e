"""Fleet specs: the spec-driven decode-and-features path against the hand-written numpy code of
the built-in fleet it replaced (bench/support/parts/reference_fleet.py) on the same records, in one process,
alternating; and worker events/s for both shipped fleets over a backlog on the real broker."""

from __future__ import annotations

import time

import numpy as np
import orjson

from bench.support.harness import Context, Figure, Report, progress
from bench.support.parts.worker_run import PARTITIONS, fleet_worker_rate

NAME = "fleets"
DESCRIPTION = (
    "spec-driven decode+features vs the hand-written built-in path; context fold cost by "
    "window size; worker events/s per shipped fleet"
)
# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = (
    "one core for this process: the decode ratio and the context-fold rows are CPU-bound runs "
    "in it, alternated, so their ratios hold on a busy machine better than their events/s; "
    "the worker rates need a second core for the broker and nothing else running."
)


def _records(fleet, n: int, seed: int = 3) -> list:
    from precast.kafka import Record
    from producers.simulator import Fleet

    sim = Fleet(max(2_000, n // 20), seed=seed, fleet=fleet)
    out: list = []
    t0 = 1_760_000_000_000
    while len(out) < n:
        for e in sim.heartbeats(2_000, t0 + len(out)):
            out.append(Record("hb", 0, len(out), e.device_id.encode(), orjson.dumps(e)))
    return out[:n]


def _spec_path(fleet, batches: list) -> float:
    from workers.precompute.ingest.decode import Decoder

    dec = Decoder(fleet)
    fm, ctx = fleet.features, fleet.context
    t0 = time.perf_counter()
    for b in batches:
        hb = dec.heartbeats(b, _no_reject)
        fm.build(hb.cols, ctx.columns([None] * len(hb), hb.event_time_ms))
    return time.perf_counter() - t0


def _reference_path(batches: list) -> float:
    from bench.support.parts import reference_fleet as ref

    empty = {k: None for k in ref.CONTEXT_COLUMNS}
    t0 = time.perf_counter()
    for b in batches:
        hb = ref.decode_heartbeats(b, _no_reject)
        n = len(hb)
        cols = {k: hb.cols[:, j] for j, k in enumerate(ref.HEARTBEAT_COLUMNS)}
        # the old worker's context columns: one Python loop over devices, none with context here
        cols.update({k: np.full(n, ref.EMPTY_CONTEXT[k]) for k in empty})
        ref.build_features(cols)
    return time.perf_counter() - t0


def _no_reject(*_: object) -> None:
    raise AssertionError("the benchmark's records are all valid")


def _decode_ratio(ctx: Context) -> tuple[list[list], list[Figure]]:
    from precast.fleet import load_fleet

    fleet = load_fleet()
    n = 20_000 if ctx.quick else 90_000
    progress(f"decode + features: {n:,} simulator heartbeats (the wire mix), batches of 2,000")
    recs = _records(fleet, n)
    batches = [recs[i : i + 2_000] for i in range(0, n, 2_000)]
    # same features both ways (the reference is main's code)
    from bench.support.parts import reference_fleet as ref
    from workers.precompute.ingest.decode import Decoder

    a = Decoder(fleet).heartbeats(batches[0], _no_reject)
    b = ref.decode_heartbeats(batches[0], _no_reject)
    assert np.array_equal(a.cols, b.cols) and a.device_ids == b.device_ids
    spec_t, ref_t = [], []
    for _ in range(3 if ctx.quick else 7):  # alternate, keep the best of each (shared machine)
        ref_t.append(_reference_path(batches))
        spec_t.append(_spec_path(fleet, batches))
    best_spec, best_ref = min(spec_t), min(ref_t)
    rows = [
        ["hand-written (main before the spec)", round(n / best_ref), round(1e6 * best_ref / n, 2)],
        ["spec-driven", round(n / best_spec), round(1e6 * best_spec / n, 2)],
    ]
    ratio = best_ref / best_spec
    figs = [
        Figure(
            "fleet_spec_vs_builtin",
            ratio,
            "x",
            "goal >= 0.9",
            f"{n:,} built-in-fleet heartbeats (simulator wire mix), decode + features, "
            f"best of {len(spec_t)} alternating runs, one process",
        )
    ]
    return rows, figs


def _fold_events(model, n: int, window_ms: int, t0: int) -> list[dict]:
    """`n` events of the first window group's stream that pass its first count's filter, one
    per `window_ms / n` ms, so a sliding window holds about `n` of them."""
    group = model.window_groups[0]
    base: dict = {"device_id": "d"}
    for og in model.open_groups:
        if og.stream == group.stream:  # read by the open groups of the stream: opens nothing
            base[og.entity], base[og.status] = "x", "-"
    for k, allowed in group.members[0][1].items():
        base[k] = sorted(allowed)[0]
    step, distinct = max(1, window_ms // n), group.distinct or "event_id"  # each one new
    return [
        {**base, "event_id": f"e{i}", distinct: f"e{i}", "event_time_ms": t0 + i * step}
        for i in range(4 * n + 20_000)
    ]


def _context_fold(ctx: Context) -> tuple[list[list], list[Figure]]:
    """Folding an event into a device's context and reading its values, with a window of a
    few entries and one at the group's limit: the cost must not grow with the entries."""
    from precast.fleet import load_fleet
    from schemas.spec import FLEETS

    model = load_fleet(FLEETS / "trailers.toml").context
    group = model.window_groups[0]
    sizes = (16, group.limit)
    progress(f"context fold: windows of {sizes[0]} and {sizes[1]:,} entries (trailers spec)")
    best: dict[int, float] = {}
    for _ in range(3 if ctx.quick else 5):  # alternate, keep the best of each
        for n in sizes:
            events = _fold_events(model, n, group.window_ms, 1_760_000_000_000)
            c = model.new("d")
            for e in events[: 4 * n]:  # fill the window, then slide it
                model.apply(c, group.stream, e)
            timed = events[4 * n :]
            t = time.perf_counter()
            for e in timed:
                model.apply(c, group.stream, e)
                model.values(c, e["event_time_ms"])
            best[n] = min(best.get(n, 1e9), (time.perf_counter() - t) / len(timed))
    rows = [[f"context fold + read, window of {n:,} entries", round(1 / best[n]),
             round(1e6 * best[n], 2)] for n in sizes]  # fmt: skip
    figs = [
        Figure(
            "context_fold_us_per_event_at_window_limit",
            1e6 * best[sizes[1]],
            "us",
            f"{1e6 * best[sizes[0]]:.2f} us with {sizes[0]} entries (ratio "
            f"{best[sizes[1]] / best[sizes[0]]:.2f})",
            f"trailers spec, `{group.stream}` stream: apply + values per event with a sliding "
            f"window of {sizes[1]:,} entries (the group's limit), best of alternating runs",
        )
    ]
    return rows, figs


def run(ctx: Context) -> Report:
    from precast.kafka import Admin

    rows, figs = _decode_ratio(ctx)
    fold_rows, fold_figs = _context_fold(ctx)
    rows, figs = rows + fold_rows, figs + fold_figs
    admin = Admin(ctx.kafka_settings())
    devices, rounds = (10_000, 3) if ctx.quick else (50_000, 3)
    for name in ("devices", "trailers"):
        progress(f"worker over a backlog of {devices * rounds:,} heartbeats of the {name} fleet")
        rate = fleet_worker_rate(ctx, admin, name, devices, rounds)
        rows.append([f"worker, {name} fleet (events/s)", round(rate), round(1e6 / rate, 2)])
        figs.append(
            Figure(
                f"fleet_worker_events_per_s_{name}",
                rate,
                "events/s",
                "one worker process, at-least-once",
                f"{devices * rounds:,} heartbeats of {devices:,} devices, {PARTITIONS} partitions, the shipped model",
            )
        )
    return Report(
        "Fleet specs: decode + features, and the worker per shipped fleet",
        ["path", "events/s", "us/event"],
        rows,
        figs,
        [
            "fleet_spec_vs_builtin = hand-written time / spec-driven time on the same records "
            "(above 1: the spec-driven path is faster)",
            "worker rates are the whole loop (consume, decode, policy, features, inference, encode, "
            "produce, commit) on the same machine one after the other; needs a quiet machine",
        ],
    )
