"""`precast shadow`'s run (`workers.shadow`: one pipeline, two models, candidate outputs to the
shadow topic, the comparison) against the precompute worker itself on the same range of the
same topic, in one run: events/s of each and their ratio."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_worker import PARTITIONS, _catalog, _produce_heartbeats, _worker
from bench.harness import Context, Figure, Report, progress

NAME = "shadow"
DESCRIPTION = "shadow run (live + candidate model, comparison) events/s vs the worker's, same range"
REPS = 2  # interleaved worker/shadow runs; the best of each is reported


def _worker_run(ctx: Context, topics, ends: dict[int, int]) -> tuple[float, int]:
    from workers import metrics as M
    from workers.loop import tune_gc

    w = _worker(ctx, topics, end=ends)
    tune_gc()
    preds0 = _predictions(M.PREDICTIONS)
    t0 = time.perf_counter()
    w.run()
    el = time.perf_counter() - t0
    w.close()
    return sum(ends.values()) / el, int(_predictions(M.PREDICTIONS) - preds0)


def _predictions(counter: Any) -> float:
    """Sum over the labelled children of a prometheus Counter (the worker counts per version)."""
    return sum(c._value.get() for c in counter._metrics.values())


def _shadow_run(ctx: Context, topics, ends: dict[int, int], out: Path) -> dict:
    from precast.kafka import TopicPartitionOffset
    from precast.settings import TopicSettings
    from workers.settings import DEFAULT_MODEL_DIR, ModelOptions, WorkerSettings
    from workers.shadow import ShadowArgs, run

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
        progress=False,
    )
    run(settings, args)
    return json.loads(out.read_text())


def run(ctx: Context) -> Report:
    from precast.kafka import Admin, Consumer

    admin = Admin(ctx.kafka_settings())
    devices, rounds = (10_000, 3) if ctx.quick else (40_000, 5)
    topics = _catalog(ctx, admin)
    hb = topics.heartbeats.name
    try:
        progress(f"producing {devices * rounds:,} heartbeats ({devices:,} devices x {rounds})")
        _produce_heartbeats(ctx.kafka_settings(), hb, devices, rounds)
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
    finally:
        admin.delete_topics([t.name for t in topics])
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
    ]
    return Report(
        title="Shadow run vs worker (same range, same topic)",
        columns=["run", "events/s (best)", "predictions", "events/s (mean)"],
        rows=rows,
        figures=[
            Figure("shadow_events_per_s", round(s_best), "events/s", "-", cond),
            Figure(
                "shadow_vs_worker",
                round(s_best / w_best, 3),
                "x",
                f"worker {w_best:,.0f} events/s on the same range (goal >= 0.5)",
                cond,
            ),
        ],
        notes=[
            f"top-1 agreement 1.0.0 vs 1.1.0 on this range: {cmp['overall']['top1_agreement']:.4f}",
            f"model time per batch: live {timing['live']['ms_per_batch_mean']:.2f} ms, candidate "
            f"{timing['candidate']['ms_per_batch_mean']:.2f} ms "
            f"({timing['live']['batches']} batches each)",
            "the shadow run reads the same records through the same pipeline and policy; it runs "
            "a second model per batch, compares, and writes only the candidate's outputs",
        ],
    )
