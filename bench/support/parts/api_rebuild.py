"""`python -m bench api`, rebuild: predictions of N devices published, then the time from a
read API's start to ready, for the in-process view and for Redis."""

from __future__ import annotations

import resource
import time
from typing import Any

import orjson

from bench.support.harness import Context, progress


def prediction_value(device: str, computed: int, produced: int, horizon_ms: int) -> bytes:
    return orjson.dumps(
        {
            "schema_version": 1,
            "device_id": device,
            "candidates": [
                {"strategy": "remote_restart", "score": 0.71},
                {"strategy": "monitor_only", "score": 0.2},
                {"strategy": "firmware_rollback", "score": 0.05},
            ],
            "model_version": "1.0.0",
            "computed_at_ms": computed,
            "valid_until_ms": computed + horizon_ms,
            "produced_at_ms": produced,
            "trigger": "heartbeat",
            "lineage": [{"topic": "precast.heartbeats", "partition": 0, "offset": 1}],
        }
    )


def publish(ctx: Context, topic: str, devices: list[str], horizon_ms: int) -> None:
    from precast.kafka import Producer

    p = Producer(ctx.kafka_settings())
    now = int(time.time() * 1000)
    for i, d in enumerate(devices):
        p.produce(topic, d.encode(), prediction_value(d, now - 200, now - 150, horizon_ms))
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(120)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _time_to_ready(mat: Any) -> float:
    """Seconds from a materializer's start to ready (it is stopped after)."""
    t0 = time.perf_counter()
    mat.start()
    while not mat.ready:
        time.sleep(0.01)
    took = time.perf_counter() - t0
    mat.stop()
    return took


def rebuild(ctx: Context, topics, n: int) -> tuple[list[list], dict[str, float]]:
    """Time from start to ready: the in-process view, and Redis (view off, Lua CAS batches)."""
    import redis as redis_lib

    from consumer_api.materialize.gate import GateConfig
    from consumer_api.materialize.gated import GateSource
    from consumer_api.materialize.materializer import Materializer
    from precast.serving import MemoryStore, RedisStore

    progress(f"rebuild: publishing {n:,} predictions")
    devices = [f"dev-{i:07d}" for i in range(n)]
    publish(ctx, topics.predictions.name, devices, horizon_ms=300_000)
    del devices
    rows, figs = [], {}
    rss0 = _rss_mb()
    view = MemoryStore(30_000)
    mat = Materializer(
        ctx.kafka_settings(),
        topics.predictions.name,
        topics.predictions.partitions,
        view=view,
        group_prefix=ctx.unique("rebuild"),
        batch=10_000,
    )
    s = _time_to_ready(mat)
    mb = _rss_mb() - rss0
    progress(f"rebuild: view {len(view):,} devices in {s:.2f}s, +{mb:,.0f} MB RSS")
    rows.append(
        [
            "rebuild: in-process view",
            f"{len(view):,} devices",
            f"{s:.2f} s",
            f"{len(view) / s:,.0f}/s",
            f"+{mb:,.0f} MB RSS",
        ]
    )
    figs["view"], figs["view_mb"] = s, mb
    del view

    # The same topic into a view with the gate process on (PRECAST_API__GATE, the default): the
    # replica catches up in its own process and hands over to the gate once ready; side by side
    # with the replica's own consumer above, what starting a gate costs a start.
    gated_view = MemoryStore(30_000)
    mat = Materializer(
        ctx.kafka_settings(),
        topics.predictions.name,
        topics.predictions.partitions,
        view=gated_view,
        batch=10_000,
        live_source=GateSource(
            GateConfig(
                ctx.kafka_settings(),
                topics.predictions.name,
                ctx.unique("rebuild-gate"),
                None,
                10_000,
                0.2,
            ),
            topics.predictions.partitions,
        ),
    )
    gs = _time_to_ready(mat)
    progress(f"rebuild: view with the gate on {len(gated_view):,} devices in {gs:.2f}s")
    rows.append(
        [
            "rebuild: in-process view, gate process on",
            f"{len(gated_view):,} devices",
            f"{gs:.2f} s",
            f"{len(gated_view) / gs:,.0f}/s",
            f"{gs / s:.2f}x the replica's own consumer",
        ]
    )
    figs["gate"] = gs
    del gated_view

    client = redis_lib.Redis.from_url(ctx.redis_url)
    used0 = client.info("memory")["used_memory"]
    store = RedisStore(client, ctx.unique("rebuild") + ":", grace_ms=30_000)
    mat = Materializer(
        ctx.kafka_settings(),
        topics.predictions.name,
        topics.predictions.partitions,
        view=None,
        shared=store,
        group_prefix=ctx.unique("rebuild"),
        batch=10_000,
    )
    t0 = time.perf_counter()
    mat.start()
    while not store.loaded():
        time.sleep(0.05)
    s = time.perf_counter() - t0
    mat.stop()
    used = (client.info("memory")["used_memory"] - used0) / 2**20
    for i, keys in enumerate(store._scan(10_000)):  # the shared Redis: leave nothing behind
        client.unlink(*keys)
        if i % 20 == 0:
            progress(f"rebuild: cleaning Redis ({i * 10_000:,} keys)")
    client.delete(store._loaded)
    progress(f"rebuild: Redis {n:,} devices in {s:.2f}s, +{used:,.0f} MB used_memory")
    rows.append(
        [
            "rebuild: Redis (Lua CAS, 500/call)",
            f"{n:,} devices",
            f"{s:.2f} s",
            f"{n / s:,.0f}/s",
            f"+{used:,.0f} MB Redis",
        ]
    )
    figs["redis"], figs["redis_mb"] = s, used
    return rows, figs
