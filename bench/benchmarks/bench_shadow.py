"""`precast shadow`'s run (`workers.shadow.run`: one pipeline, two models, candidate outputs to the
shadow topic, the comparison) against the precompute worker itself on the same range of the
same topic, in one run: events/s of each and their ratio.

Then (not with --quick) the memory bound on a long range: 10M heartbeats of the same 40k
devices (`PRECAST_BENCH_SHADOW_LONG_EVENTS` sets another count; 0 skips it) through
`python -m workers.shadow.run` in its own process, its RSS sampled every second from
/proc/PID/status: RSS after warm-up against RSS at the end, and the peak."""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.support.harness import ROOT, Context, Figure, Report, progress
from bench.support.loads.fleet_load import produce_heartbeats
from bench.support.parts.worker_run import PARTITIONS, bounded_worker, worker_catalog

NAME = "shadow"
DESCRIPTION = "shadow run (live + candidate model, comparison) events/s vs the worker's, same range"
# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = "one core for the run and one for the broker; the RSS figures do not depend on CPU."
REPS = 2  # interleaved worker/shadow runs; the best of each is reported
LONG_DEVICES = 40_000
LONG_EVENTS = int(os.environ.get("PRECAST_BENCH_SHADOW_LONG_EVENTS", "10000000"))
WARM_SHARE = 0.1  # RSS "after warm-up": the sample at this share of the run's wall time


def _worker_run(ctx: Context, topics, ends: dict[int, int]) -> tuple[float, int]:
    from workers.precompute import metrics as worker_metrics
    from workers.precompute.loop import tune_gc

    w = bounded_worker(ctx, topics, end=ends)
    tune_gc()
    preds0 = _predictions(worker_metrics.PREDICTIONS)
    t0 = time.perf_counter()
    w.run()
    el = time.perf_counter() - t0
    w.close()
    return sum(ends.values()) / el, int(_predictions(worker_metrics.PREDICTIONS) - preds0)


def _predictions(counter: Any) -> float:
    """Sum over the labelled children of a prometheus Counter (the worker counts per version)."""
    return sum(c._value.get() for c in counter._metrics.values())


def _shadow_run(ctx: Context, topics, ends: dict[int, int], out: Path) -> dict:
    from precast.kafka import TopicPartitionOffset
    from precast.settings import TopicSettings
    from workers.settings import DEFAULT_MODEL_DIR, ModelOptions, WorkerSettings
    from workers.shadow.run import ShadowArgs, run

    hb = topics.heartbeats.name
    settings = WorkerSettings(
        kafka=ctx.kafka_settings(),
        topics=TopicSettings(prefix=hb.removesuffix("heartbeats"), partitions=PARTITIONS),
        model=ModelOptions(provider="cpu"),
    )
    args = ShadowArgs(
        live=DEFAULT_MODEL_DIR.parent / "1.0.0",
        candidate=DEFAULT_MODEL_DIR.parent / "1.1.0",
        assignment=[TopicPartitionOffset(hb, p, 0) for p in range(PARTITIONS)],
        stop_at={(hb, p): ends[p] for p in range(PARTITIONS)},
        summary=out,
        checkpoint=None,
        job="bench",
        fresh=True,
        all_triggers=False,
        truth=None,
        truth_file=None,
        progress=False,
    )
    run(settings, args)
    return json.loads(out.read_text())


def _spawn_shadow(ctx: Context, hb: str, ends: dict[int, int], out: Path) -> subprocess.Popen:
    """`python -m workers.shadow.run` (1.0.0 vs 1.1.0) over [0, ends) of `hb`, in its own process."""
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": ctx.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": hb.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": str(PARTITIONS),
        "PRECAST_MODEL__PROVIDER": "cpu",
        "PRECAST_LOG_LEVEL": "WARNING",
    }
    ranges = json.dumps({hb: [[p, 0, e] for p, e in ends.items()]})
    cmd = [sys.executable, "-m", "workers.shadow.run", "--live", "1.0.0", "--candidate", "1.1.0"]
    cmd += ["--ranges", ranges, "--summary", str(out), "--no-progress"]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stderr=subprocess.DEVNULL)


def _shadow_rss(ctx: Context, hb: str, ends: dict[int, int], out: Path) -> tuple[int, float]:
    """(records, peak RSS in MiB) of `python -m workers.shadow.run` over [0, ends) in its own process.
    The peak is the child's own VmHWM, sampled every 0.2 s until it exits: `wait4`'s ru_maxrss
    would also count the forked child's copy of this (large) process before its exec."""
    proc = _spawn_shadow(ctx, hb, ends, out)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _rss_kib(proc.pid, "VmHWM") or 0)
        time.sleep(0.2)
    if proc.returncode:
        raise RuntimeError(f"shadow run exited {proc.returncode}")
    return sum(ends.values()), peak / 1024


def _rss_kib(pid: int, field: str = "VmRSS") -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def long_run(ctx: Context, events: int, devices: int = LONG_DEVICES) -> dict[str, Any]:
    """`events` heartbeats of `devices` devices on a topic of its own (deleted after), run
    through `python -m workers.shadow.run` in its own process with its RSS sampled every second."""
    from precast.kafka import Admin, Consumer

    admin = Admin(ctx.kafka_settings())
    topics = worker_catalog(ctx, admin)
    hb = topics.heartbeats.name
    rounds = max(1, events // devices)
    try:
        progress(f"long range: producing {devices * rounds:,} heartbeats ({devices:,} x {rounds})")
        t0 = time.monotonic()
        produce_heartbeats(ctx.kafka_settings(), hb, devices, rounds)
        produce_s = time.monotonic() - t0
        c = Consumer(ctx.kafka_settings(), ctx.unique("wm"))
        ends = {p: c.watermarks(hb, p)[1] for p in range(PARTITIONS)}
        c.close()
        total = sum(ends.values())
        progress(f"long range: shadow run over {total:,} events, RSS sampled every second")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "summary.json"
            proc = _spawn_shadow(ctx, hb, ends, out)
            start, samples, hwm = time.monotonic(), [], None
            while proc.poll() is None:
                kib = _rss_kib(proc.pid)
                peak = _rss_kib(proc.pid, "VmHWM")
                if kib is not None:
                    samples.append((time.monotonic() - start, kib / 1024))
                if peak is not None:
                    hwm = peak / 1024
                time.sleep(1.0)
            if proc.returncode:
                raise RuntimeError(f"long shadow run exited {proc.returncode}")
            summary = json.loads(out.read_text())
    finally:
        admin.delete_topics([t.name for t in topics])
    wall = samples[-1][0] if samples else 0.0
    warm = next((mib for t, mib in samples if t >= WARM_SHARE * wall), samples[0][1])
    end = samples[-1][1]
    after = [mib for t, mib in samples if t >= WARM_SHARE * wall]
    # between warm-up and the last 5 % (the end drains every throttled device at once)
    steady = [mib for t, mib in samples if WARM_SHARE * wall <= t <= 0.95 * wall] or after
    cmp = summary["comparison"]
    return {
        "events": total,
        "devices": devices,
        "rounds": rounds,
        "produce_s": produce_s,
        "elapsed_s": summary["elapsed_s"],
        "events_per_s": summary["records_per_s"],
        "predictions": cmp["overall"]["predictions"],
        "changed_devices": cmp["changed_devices"],
        "samples": samples,
        "warm_mib": warm,
        "end_mib": end,
        "max_after_warm_mib": max(after) if after else end,
        "steady_mib": (min(steady), max(steady)) if steady else (end, end),
        "peak_mib": max(hwm or 0.0, max((m for _, m in samples), default=0.0)),
        "growth_pct": 100.0 * (end - warm) / warm,
    }


def _timeline(samples: list[tuple[float, float]], points: int = 6) -> str:
    """RSS at evenly spaced moments of the run, `t s: MiB`."""
    if not samples:
        return "-"
    wall = samples[-1][0]
    picks = [next(s for s in samples if s[0] >= wall * i / (points - 1)) for i in range(points)]
    return ", ".join(f"{t:.0f} s {mib:.0f}" for t, mib in picks)


def _shadow_heap(ctx: Context, topics, ends: dict[int, int], out: Path) -> tuple[int, float]:
    """(records, peak Python heap in MiB, tracemalloc) of a shadow run in this process: the
    device table, the comparison and every Python object; not librdkafka's own buffers."""
    gc.collect()
    tracemalloc.start()
    try:
        _shadow_run(ctx, topics, ends, out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return sum(ends.values()), peak / 2**20


def run(ctx: Context) -> Report:
    from precast.kafka import Admin, Consumer

    admin = Admin(ctx.kafka_settings())
    devices, rounds = (10_000, 3) if ctx.quick else (40_000, 5)
    topics = worker_catalog(ctx, admin)
    hb = topics.heartbeats.name
    try:
        progress(f"producing {devices * rounds:,} heartbeats ({devices:,} devices x {rounds})")
        produce_heartbeats(ctx.kafka_settings(), hb, devices, rounds)
        c = Consumer(ctx.kafka_settings(), ctx.unique("wm"))
        ends = {p: c.watermarks(hb, p)[1] for p in range(PARTITIONS)}
        c.close()
        total = sum(ends.values())
        worker, shadow, summaries = [], [], []
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(REPS):
                progress(f"rep {rep + 1}/{REPS}: worker over {total:,} events")
                worker.append(_worker_run(ctx, topics, ends))
                progress(f"rep {rep + 1}/{REPS}: shadow run over the same {total:,} events")
                s = _shadow_run(ctx, topics, ends, Path(tmp) / f"summary-{rep}.json")
                summaries.append(s)
                shadow.append(total / s["elapsed_s"])
            # Memory: the same fleet over a 1x and a 4x longer range, each in its own process.
            progress(f"producing {3 * devices * rounds:,} more heartbeats for the memory check")
            produce_heartbeats(ctx.kafka_settings(), hb, devices, 3 * rounds)
            c = Consumer(ctx.kafka_settings(), ctx.unique("wm"))
            ends4 = {p: c.watermarks(hb, p)[1] for p in range(PARTITIONS)}
            c.close()
            rss = [
                _shadow_rss(ctx, hb, e, Path(tmp) / f"rss-{i}.json")
                for i, e in enumerate((ends, ends4))
            ]
            heap = [
                _shadow_heap(ctx, topics, e, Path(tmp) / f"heap-{i}.json")
                for i, e in enumerate((ends, ends4))
            ]
    finally:
        admin.delete_topics([t.name for t in topics])
    long = long_run(ctx, LONG_EVENTS) if LONG_EVENTS > 0 and not ctx.quick else None
    w_best = max(r for r, _ in worker)
    s_best = max(shadow)
    s = summaries[-1]
    cmp, timing = s["comparison"], s["comparison"]["timing"]
    cond = (
        f"{total:,} heartbeats ({devices:,} devices x {rounds}) on {PARTITIONS} partitions, "
        f"live 1.0.0 vs candidate 1.1.0 on CPU, live policy, best of {REPS} interleaved runs"
    )
    rows = [
        [
            "worker (1.0.0, predictions topic)",
            round(w_best),
            worker[-1][1],
            statistics.mean(r for r, _ in worker),
        ],
        [
            "shadow run (1.0.0 + 1.1.0, shadow topic, comparison)",
            round(s_best),
            cmp["overall"]["predictions"],
            statistics.mean(shadow),
        ],
        *[
            [f"shadow run, own process, {n:,} events: peak RSS {mib:,.0f} MiB", "", "", ""]
            for n, mib in rss
        ],
        *[
            [f"shadow run, {n:,} events: peak Python heap {mib:,.1f} MiB", "", "", ""]
            for n, mib in heap
        ],
    ]
    figures = [
        Figure("shadow_events_per_s", round(s_best), "events/s", "-", cond),
        Figure(
            "shadow_vs_worker",
            round(s_best / w_best, 3),
            "x",
            f"worker {w_best:,.0f} events/s on the same range (goal >= 0.5)",
            cond,
        ),
    ]
    notes = []
    if long is not None:
        lcond = (
            f"{long['events']:,} heartbeats ({long['devices']:,} devices x {long['rounds']}) "
            f"on {PARTITIONS} partitions, live 1.0.0 vs candidate 1.1.0 on CPU, live policy, "
            "`python -m workers.shadow.run` in its own process, RSS from /proc every second"
        )
        rows.append(
            [
                f"shadow run, own process, {long['events']:,} events: RSS "
                f"{long['warm_mib']:,.0f} MiB after warm-up, {long['end_mib']:,.0f} MiB at "
                f"the end, peak {long['peak_mib']:,.0f} MiB",
                round(long["events_per_s"]),
                long["predictions"],
                "",
            ]
        )
        if long["events"] >= 10_000_000:
            figures += [
                Figure(
                    "shadow_10m_rss_growth_pct",
                    round(long["growth_pct"], 1),
                    "%",
                    f"RSS {long['warm_mib']:,.0f} MiB at {WARM_SHARE:.0%} of the run "
                    f"-> {long['end_mib']:,.0f} MiB at its end",
                    lcond,
                ),
                Figure(
                    "shadow_10m_peak_rss_mib",
                    round(long["peak_mib"]),
                    "MiB",
                    f"{long['devices']:,} devices, {long['events']:,} events",
                    lcond,
                ),
            ]
        notes.append(
            f"long range: {long['events']:,} events in {long['elapsed_s']:,.0f} s "
            f"({long['events_per_s']:,.0f} events/s; producing them took "
            f"{long['produce_s']:,.0f} s, lz4, topic deleted after); RSS over the run "
            f"(seconds, MiB): {_timeline(long['samples'])}; from warm-up to the last 5 % of "
            f"the run {long['steady_mib'][0]:,.0f}-{long['steady_mib'][1]:,.0f} MiB (the end "
            "drains every throttled device at once)"
        )
    return Report(
        title="Shadow run vs worker (same range, same topic)",
        columns=["run", "events/s (best)", "predictions", "events/s (mean)"],
        rows=rows,
        figures=figures,
        notes=notes
        + [
            f"top-1 agreement 1.0.0 vs 1.1.0 on this range: {cmp['overall']['top1_agreement']:.4f}",
            f"model time per batch: live {timing['live']['ms_per_batch_mean']:.2f} ms, candidate "
            f"{timing['candidate']['ms_per_batch_mean']:.2f} ms "
            f"({timing['live']['batches']} batches each)",
            f"memory, the same {devices:,} devices over {rss[0][0]:,} and {rss[1][0]:,} events: "
            f"process peak RSS {rss[0][1]:,.0f} -> {rss[1][1]:,.0f} MiB; peak Python heap "
            f"(tracemalloc, in-process) {heap[0][1]:,.1f} -> {heap[1][1]:,.1f} MiB",
            "the shadow run reads the same records through the same pipeline and policy; it runs "
            "a second model per batch, compares, and writes only the candidate's outputs",
        ],
    )
