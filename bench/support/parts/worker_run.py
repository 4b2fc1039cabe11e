"""One precompute worker over a bounded backlog, in this process, as `python -m bench worker`
measures it and `bench shadow`, `bench freshness` and `bench floor` reuse it: the topic catalog,
the worker assembled as precast-worker assembles it (stopping at given offsets), a timed run
with the worker's own per-stage seconds, and its capacity in events/s on this process's CPUs."""

from __future__ import annotations

import time
from typing import Any

import orjson

from bench.support.harness import Context

PARTITIONS = 6
# The model each shipped fleet's worker serves, under the models folder.
ROOT_MODELS = {"devices": "fleet-strategy/1.0.0", "trailers": "reefer-service/1.0.0"}


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
    tracing=None,
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
        tracing=tracing,
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


def fleet_worker_rate(
    ctx: Context, admin, fleet_name: str, devices: int, rounds: int, model=None
) -> float:
    """Worker events/s over a backlog of the fleet's heartbeats, with its shipped model or the
    model folder `model` (`bench fleets`; `bench slim`: a teacher against its student)."""
    from precast.fleet import load_fleet
    from precast.kafka import Consumer, Producer, TopicPartitionOffset
    from schemas.spec import FLEETS
    from schemas.topics import catalog
    from workers.model.inference import ModelSession
    from workers.model.registry import ModelRegistry
    from workers.precompute.assembly import assemble
    from workers.precompute.loop import LoopConfig, tune_gc
    from workers.precompute.pipeline import PipelineConfig
    from workers.settings import DEFAULT_MODEL_DIR

    fleet = load_fleet(FLEETS / f"{fleet_name}.toml")
    topics = catalog(ctx.unique("fl") + ".", PARTITIONS)
    admin.ensure_topics(list(topics))
    hb = topics.heartbeats.name
    try:
        from producers.simulator import Fleet

        sim, p = Fleet(devices, seed=3, fleet=fleet), Producer(ctx.kafka_settings())
        t0 = int(time.time() * 1000) - 1000 * rounds
        for r in range(rounds):
            for start in range(0, devices, 2_000):
                for e in sim.heartbeats(min(2_000, devices - start), t0 + 1000 * r):
                    p.produce(hb, e.device_id.encode(), orjson.dumps(e))
                p.poll(0)
        p.flush()
        c = Consumer(ctx.kafka_settings(), ctx.unique("wm"))
        ends = {q: c.watermarks(hb, q)[1] for q in range(PARTITIONS)}
        c.close()
        model = model or DEFAULT_MODEL_DIR.parent.parent / ROOT_MODELS[fleet_name]
        registry = ModelRegistry(
            lambda path: ModelSession(path, fleet=fleet, provider="cpu"), path=model
        )
        w = assemble(
            ctx.kafka_settings(),
            topics,
            registry,
            PipelineConfig(
                top_k=fleet.spec.serving.top_k, horizon_ms=int(fleet.spec.serving.horizon_s * 1000)
            ),
            LoopConfig(group_id=ctx.unique("g")),
            assignment=[TopicPartitionOffset(hb, q, 0) for q in range(PARTITIONS)],
            stop_at={(hb, q): ends[q] for q in range(PARTITIONS)},
            fleet=fleet,
        )
        tune_gc()
        t = time.perf_counter()
        w.run()
        el = time.perf_counter() - t
        w.close()
        return sum(ends.values()) / el
    finally:
        admin.delete_topics([t.name for t in topics])
