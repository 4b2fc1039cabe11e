"""The drift monitor calibrated on the simulator: false alarms over unshifted windows, detection
rate and delay once a fleet-wide drift starts, and KS throughput against scipy's ks_2samp.

Runs in simulated time (no broker): the simulator's heartbeats are encoded to the same bytes it
publishes, decoded by the worker's decoder and turned into features by the serving feature
function, so every step but the Kafka hop is the monitor's own."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import orjson

from bench.support.harness import Context, Figure, Report, progress
from precast.fleet import load_fleet
from precast.kafka import Record
from producers.simulator import Fleet
from workers.drift.monitor import DriftMonitor
from workers.drift.reference import Reference, load_reference
from workers.drift.stats import ks_pvalues, ks_statistics
from workers.settings import DEFAULT_MODEL_DIR, DriftOptions

NAME = "drift"
DESCRIPTION = (
    "drift monitor on the simulator: false alarms, detection rate and delay, KS values/s vs scipy"
)
# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = (
    "one core for the values/s figure; detection and false-alarm counts do not depend on CPU."
)

DEVICES = 2_000
HB_INTERVAL_S = 2.0  # 1,000 heartbeats per simulated second
DRIFT_SHARE = 0.25  # the drift event: a quarter of the fleet slides into a faulty condition ...
DRIFT_RAMP_S = 30.0  # ... over 30 s
DEADLINE_S = 60.0  # detection counts if a window flags within this long of the drift start
T0_MS = 1_800_000_000_000


@dataclass
class Trial:
    windows: int
    flagged: int
    delay_s: float | None  # first flagged window after the drift start


def _monitor(ref: Reference, opts: DriftOptions) -> DriftMonitor:
    return DriftMonitor(
        ref,
        window_s=opts.window_s,
        step_s=opts.step_s,
        min_rows=opts.min_rows,
        max_rows=opts.max_rows,
        alpha=opts.alpha,
        min_effect=opts.min_effect,
    )


def run_trial(
    ref: Reference,
    opts: DriftOptions,
    seed: int,
    *,
    duration_s: float,
    drift_at_s: float | None,
    warmup_s: float,
) -> Trial:
    """One fleet in simulated time; windows are tested once the window is full (warm-up)."""
    fleet = Fleet(
        DEVICES,
        seed,
        hb_interval_s=HB_INTERVAL_S,
        drift_share=DRIFT_SHARE if drift_at_s is not None else 0.0,
        drift_s=DRIFT_RAMP_S,
        drift_at_s=drift_at_s,
        run_id=f"b{seed}",
    )
    per_s = int(DEVICES / HB_INTERVAL_S)
    mon = _monitor(ref, opts)
    windows = flagged = 0
    delay: float | None = None
    while fleet.sim_s < duration_s:
        now_ms = T0_MS + int(fleet.sim_s * 1000)
        events = fleet.heartbeats(per_s, now_ms)
        msgs = [
            Record("hb", 0, i, e["device_id"].encode(), orjson.dumps(e))
            for i, e in enumerate(events)
        ]
        mon.add_records(msgs, fleet.sim_s)
        if fleet.sim_s >= warmup_s and mon.due(fleet.sim_s):
            r = mon.evaluate(fleet.sim_s)
            if r is None:
                continue
            windows += 1
            flagged += r.drifted
            if r.drifted and drift_at_s is not None and delay is None:
                delay = fleet.sim_s - drift_at_s if fleet.sim_s >= drift_at_s else None
    return Trial(windows, flagged, delay)


def _throughput(ref: Reference, rows: int, repeats: int) -> tuple[float, float]:
    """Feature values tested per second: this module's batched KS vs scipy's ks_2samp per
    feature (the same window, the same reference, asymptotic p-values both)."""
    from scipy import stats

    rng = np.random.default_rng(3)
    idx = rng.integers(0, ref.rows, rows)
    window = ref.sorted_values[:, idx].T + rng.normal(0, 0.01, (rows, len(ref.features)))
    t0 = time.perf_counter()
    for _ in range(repeats):
        d = ks_statistics(ref.sorted_values, window)
        p = ks_pvalues(d, rows, ref.rows)
    ours = window.size * repeats / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(repeats):
        sp = [
            stats.ks_2samp(ref.sorted_values[j], window[:, j], method="asymp")
            for j in range(window.shape[1])
        ]
    theirs = window.size * repeats / (time.perf_counter() - t0)
    if not np.allclose(d, [s.statistic for s in sp]):
        raise RuntimeError("KS statistics disagree with scipy")
    del p
    return ours, theirs


def _monitor_rate(ref: Reference, opts: DriftOptions, seconds: int) -> float:
    """Feature values/s through the whole monitor (decode, features, window, a test every
    step) on records encoded beforehand, as they would arrive from Kafka."""
    fleet = Fleet(DEVICES, 7, hb_interval_s=HB_INTERVAL_S, drift_share=0.0, run_id="rate")
    per_s = int(DEVICES / HB_INTERVAL_S)
    batches = []
    for s in range(seconds):
        events = fleet.heartbeats(per_s, T0_MS + s * 1000)
        batches.append(
            [
                Record("hb", 0, i, e["device_id"].encode(), orjson.dumps(e))
                for i, e in enumerate(events)
            ]
        )
    mon = _monitor(ref, opts)
    t0 = time.perf_counter()
    for s, msgs in enumerate(batches):
        mon.add_records(msgs, float(s))
        if mon.due(float(s)):
            mon.evaluate(float(s))
    return seconds * per_s * len(ref.features) / (time.perf_counter() - t0)


def run(ctx: Context) -> Report:
    opts = DriftOptions()
    ref = load_reference(DEFAULT_MODEL_DIR, load_fleet().features)
    warm = opts.window_s
    null_seeds = range(3 if ctx.quick else 6)
    null_windows_each = 12 if ctx.quick else 20
    trials = 8 if ctx.quick else 40
    progress(f"drift: {len(null_seeds)} unshifted fleets x {null_windows_each} windows")
    null = [
        run_trial(
            ref,
            opts,
            100 + s,
            duration_s=warm + null_windows_each * opts.step_s,
            drift_at_s=None,
            warmup_s=warm,
        )
        for s in null_seeds
    ]
    n_windows = sum(t.windows for t in null)
    false_alarm = sum(t.flagged for t in null) / n_windows
    progress(f"drift: {trials} drift trials")
    shifted = [
        run_trial(
            ref,
            opts,
            1_000 + s,
            duration_s=warm + 10 + DEADLINE_S,
            drift_at_s=warm + 10,
            warmup_s=warm,
        )
        for s in range(trials)
    ]
    delays = [t.delay_s for t in shifted if t.delay_s is not None and t.delay_s <= DEADLINE_S]
    detection = len(delays) / trials
    ours, theirs = _throughput(ref, 30_000, 3 if ctx.quick else 10)
    monitor_rate = _monitor_rate(ref, opts, seconds=30 if ctx.quick else 120)
    conditions = (
        f"{DEVICES} simulated devices, {DEVICES / HB_INTERVAL_S:,.0f} heartbeats/s, window "
        f"{opts.window_s:g} s every {opts.step_s:g} s, alpha {opts.alpha:g}, effect floor "
        f"D > {opts.min_effect:g}, {len(ref.features)} features, reference {ref.rows:,} rows"
    )
    drift_desc = (
        f"{DRIFT_SHARE:.0%} of devices slide into a faulty condition over {DRIFT_RAMP_S:g} s"
    )
    median_delay = float(np.median(delays)) if delays else float("nan")
    rows = [
        [
            "false alarm rate (unshifted windows)",
            false_alarm,
            f"{n_windows} windows, {len(null)} fleets",
        ],
        ["detection rate within 60 s", detection, f"{trials} trials: {drift_desc}"],
        ["detection delay, median", median_delay, "seconds from the drift start"],
        ["detection delay, max", max(delays) if delays else float("nan"), "seconds"],
        ["monitor values/s: decode, features, window, test", monitor_rate, "one process, 1 core"],
        ["KS test values/s, batched numpy", ours, "30,000-row window"],
        ["KS test values/s, scipy ks_2samp per feature", theirs, "same window"],
    ]
    return Report(
        title="Drift monitor: calibration on the simulator",
        columns=["measure", "value", "conditions"],
        rows=rows,
        figures=[
            Figure(
                "drift_false_alarm_rate",
                false_alarm,
                "share of windows",
                f"alpha {opts.alpha:g}",
                conditions,
            ),
            Figure(
                "drift_detection_rate",
                detection,
                "share of trials",
                "goal >= 0.95 within 60 s",
                f"{conditions}; {drift_desc}",
            ),
            Figure(
                "drift_detection_delay_s",
                median_delay,
                "s (median)",
                "goal <= 60 s",
                f"{conditions}; {drift_desc}",
            ),
            Figure(
                "drift_values_per_s",
                monitor_rate,
                "feature values/s",
                f"goal >= 1,000,000; KS step alone {ours:,.0f}/s vs scipy ks_2samp "
                f"{theirs:,.0f}/s ({ours / theirs:.1f}x)",
                conditions,
            ),
        ],
        notes=[
            f"Drift event: {drift_desc}, from a full window of unshifted heartbeats.",
            "Windows overlap (30 s width, 5 s step), so neighbouring windows are not independent.",
            "Heartbeat features only (7 metrics + 4 device-type one-hots); context features are not monitored.",
        ],
    )
