"""One precompute worker over a bounded backlog, in this process, as `python -m bench worker`
measures it and `bench shadow`, `bench freshness` and `bench floor` reuse it: the topic catalog,
the worker assembled as precast-worker assembles it (stopping at given offsets), a timed run
with the worker's own per-stage seconds, and its capacity in events/s on this process's CPUs."""

from __future__ import annotations

import time
from typing import Any

from bench.support.harness import Context

PARTITIONS = 6


def worker_catalog(ctx: Context, admin):
    from schemas.topics import catalog

    topics = catalog(ctx.unique("w") + ".", PARTITIONS)
    admin.ensure_topics(list(topics))
    return topics


def bounded_worker(
    ctx: Context,
    topics,
    *,
    exactly_once=False,
    max_batch=2_000,
    end=None,
    group=None,
    predecoded=None,
):
    from precast.kafka import TopicPartitionOffset
    from workers.model.inference import ModelSession
    from workers.model.registry import ModelRegistry
    from workers.precompute.assembly import assemble
    from workers.precompute.loop import LoopConfig
    from workers.precompute.pipeline import PipelineConfig
    from workers.settings import DEFAULT_MODEL_DIR

    hb = topics.heartbeats.name
    registry = ModelRegistry(lambda p: ModelSession(p, provider="cpu"), path=DEFAULT_MODEL_DIR)
    w = assemble(
        ctx.kafka_settings(),
        topics,
        registry,
        PipelineConfig(max_batch=max_batch),
        LoopConfig(
            group_id=group or ctx.unique("g"),
            exactly_once=exactly_once,
            transactional_id=ctx.unique("tx"),
        ),
        assignment=[TopicPartitionOffset(hb, p, 0) for p in range(PARTITIONS)],
        stop_at={(hb, p): end[p] for p in range(PARTITIONS)},
    )
    if predecoded is not None:  # bench.support.parts.worker_bound: decoding done before the run
        w.pipeline.decoder.heartbeats = predecoded.heartbeats  # type: ignore[method-assign]
    return w


def _count(c: Any) -> float:
    """A prometheus_client counter's value, read in process (no scrape in the timing)."""
    return float(c._value.get())


def _stage_seconds() -> dict[str, float]:
    from workers.precompute import metrics as worker_metrics

    return {name: _count(c) for name, c in worker_metrics.STAGE.items()}


def run_worker(ctx, topics, ends, **kw) -> tuple[float, int, dict[str, float]]:
    """(events/s, predictions, seconds per stage) for one bounded run over the backlog."""
    from workers.precompute import metrics as worker_metrics
    from workers.precompute.loop import tune_gc

    w = bounded_worker(ctx, topics, end=ends, **kw)
    tune_gc()  # as precast-worker does at start
    before, preds0 = (
        _stage_seconds(),
        sum(map(_count, worker_metrics.PREDICTIONS._metrics.values())),
    )
    t0, cpu0 = time.perf_counter(), time.process_time()
    w.run()
    el, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    w.close()
    after = _stage_seconds()
    preds = sum(map(_count, worker_metrics.PREDICTIONS._metrics.values())) - preds0
    return (
        sum(ends.values()) / el,
        int(preds),
        {k: after[k] - before[k] for k in after} | {"total": el, "cpu": cpu},
    )


def worker_capacity(ctx: Context, admin, devices: int) -> float:
    """Events/s of one worker over a backlog of the fleet's heartbeats, on this process's CPUs."""
    from bench.support.loads.fleet_load import produce_heartbeats
    from precast.kafka import Consumer

    topics = worker_catalog(ctx, admin)
    try:
        hb = topics.heartbeats.name
        produce_heartbeats(ctx.kafka_settings(), hb, devices, 2)
        c = Consumer(ctx.kafka_settings(), ctx.unique("wm"))
        ends = {p: c.watermarks(hb, p)[1] for p in range(PARTITIONS)}
        c.close()
        return max(run_worker(ctx, topics, ends)[0] for _ in range(2))
    finally:
        admin.delete_topics([t.name for t in topics])
