"""Sizing inputs, measured: Redis memory per stored device (single Redis and Redis Cluster
master), and Kafka log bytes per heartbeat and per prediction on disk (lz4 batches as precast's
producer writes them). docs/cluster.md turns them into per-million-devices and per-day figures."""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

import orjson
from redis.cluster import RedisCluster

from bench.support.harness import Context, Figure, Report, progress

NAME = "sizing"
DESCRIPTION = "Redis bytes per device (single, cluster) and Kafka bytes per event on disk"
# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = "none: bytes per device and per record do not depend on CPU."
PARTITIONS = 6


def _prediction(device: str, now: int, offset: int) -> bytes:
    """Shaped like a worker's record: three candidates and one lineage reference, with scores
    and times that vary per record as real ones do (constant ones would compress unrealistically
    well)."""
    rng = random.Random(offset)
    top = round(rng.uniform(0.4, 0.99), 6)
    second = round(rng.uniform(0.0, 1 - top), 6)
    now += rng.randrange(0, 60_000)
    return orjson.dumps(
        {
            "schema_version": 1,
            "device_id": device,
            "candidates": [
                {"strategy": "firmware_rollback", "score": top},
                {"strategy": "monitor_only", "score": second},
                {"strategy": "dispatch_technician", "score": round(1 - top - second, 6)},
            ],
            "model_version": "1.0.0",
            "computed_at_ms": now,
            "valid_until_ms": now + 3_600_000,
            "produced_at_ms": now + rng.randrange(2, 400),
            "trigger": "heartbeat",
            "lineage": [
                {
                    "topic": "precast.heartbeats",
                    "partition": offset % PARTITIONS,
                    "offset": offset,
                    "event_id": f"{offset:08x}-1",
                    "trace_id": f"{offset:032x}",
                }
            ],
            "backfill": False,
            "inference_ms": 0,
        }
    )


def _redis_bytes_per_device(store, memory, n: int) -> float:
    from precast.serving import entry_from_prediction

    now = int(time.time() * 1000)
    before = memory()
    for start in range(0, n, 5_000):
        items = []
        for i in range(start, min(n, start + 5_000)):
            d = f"dev-{i:07d}"
            items.append((d, entry_from_prediction(_prediction(d, now, i), received_at_ms=now)))
        store.put_many_if_newer(items, now_ms=now, ids_checked=True)
    used = memory() - before
    store.clear()
    return used / n


def _redis(n: int) -> tuple[float, float]:
    from opsctl.settings import StackSettings
    from opsctl.stack import LocalStack
    from opsctl.stack.process import free_port, free_port_block
    from opsctl.stack.redis_node import RedisNode
    from precast.serving import RedisStore
    from precast.settings import RedisSettings

    home = Path(tempfile.mkdtemp(prefix="precast-bench-sizing-"))
    single = RedisNode(StackSettings(home=home, redis_port=free_port()))
    single.start()
    single.wait_ready(30)
    stack = LocalStack(
        StackSettings(
            home=home,
            redis_cluster=True,
            redis_cluster_port=free_port_block(6, bus_offset=10_000, low=11_000),
        )
    )
    assert stack.redis_cluster is not None
    try:
        store = RedisStore.from_settings(RedisSettings(url=single.url, key_prefix="s:"))
        one = _redis_bytes_per_device(store, lambda: store.client.info("memory")["used_memory"], n)
        stack.redis_cluster.start()
        stack.redis_cluster.wait_ready(60)
        cs = RedisStore.from_settings(
            RedisSettings(url=stack.redis_url, cluster=True, key_prefix="s:")
        )

        def masters_memory() -> int:
            client = cs.client
            assert isinstance(client, RedisCluster)  # from_settings(cluster=True)
            return sum(
                node.redis_connection.info("memory")["used_memory"]
                for node in client.get_primaries()
            )

        cluster = _redis_bytes_per_device(cs, masters_memory, n)
    finally:
        single.stop(hard=True)
        stack.redis_cluster.stop(hard=True)
    return one, cluster


def _kafka_bytes(ctx: Context, n: int) -> tuple[float, float]:
    from opsctl.settings import StackCliSettings
    from opsctl.stack import LocalStack
    from precast.kafka import Admin, Producer
    from precast.settings import load
    from producers.simulator import Fleet

    data = LocalStack(load(StackCliSettings).stack).kafka.data
    settings = ctx.kafka_settings()
    admin = Admin(settings)
    hb, pr = ctx.unique("size-hb"), ctx.unique("size-pred")
    for t in (hb, pr):
        admin.create_topic(t, PARTITIONS)
    try:
        p, fleet, now = Producer(settings), Fleet(10_000, seed=1), int(time.time() * 1000)
        sent = 0
        while sent < n:
            for e in fleet.heartbeats(1_000, now + sent):
                p.produce(hb, e["device_id"].encode(), orjson.dumps(e))
                p.produce(pr, e["device_id"].encode(), _prediction(e["device_id"], now, sent))
            p.poll(0)
            sent += 1_000
        p.flush(60)
        time.sleep(1.0)

        def on_disk(topic: str) -> int:
            # .log segments only: the index files are preallocated sparse files
            return sum(f.stat().st_size for f in data.glob(f"{topic}-*/*.log"))

        return on_disk(hb) / sent, on_disk(pr) / sent
    finally:
        admin.delete_topics([hb, pr])


def run(ctx: Context) -> Report:
    n_redis = 20_000 if ctx.quick else 100_000
    n_kafka = 50_000 if ctx.quick else 200_000
    progress(f"Redis: {n_redis:,} devices, single and cluster ...")
    single, cluster = _redis(n_redis)
    progress(f"Kafka: {n_kafka:,} heartbeats and predictions ...")
    hb, pred = _kafka_bytes(ctx, n_kafka)
    mb = 1_000_000 / 2**20
    return Report(
        title="Sizing inputs: Redis memory per device, Kafka bytes per event",
        columns=["measure", "bytes", "per million (MiB)"],
        rows=[
            ["Redis, one entry per device (single)", round(single), round(single * mb)],
            ["Redis Cluster, one entry per device (masters)", round(cluster), round(cluster * mb)],
            ["Kafka log, one heartbeat (lz4, RF 1)", round(hb), round(hb * mb)],
            ["Kafka log, one prediction (lz4, RF 1)", round(pred), round(pred * mb)],
        ],
        figures=[
            Figure(
                "redis_bytes_per_device",
                round(single),
                "bytes",
                "-",
                f"{n_redis} entries of a 3-candidate prediction, used_memory delta, Redis 7.0",
            ),
            Figure(
                "redis_cluster_bytes_per_device",
                round(cluster),
                "bytes",
                "-",
                f"{n_redis} entries, sum of the 3 masters' used_memory delta (replicas add as much)",
            ),
            Figure(
                "kafka_bytes_per_heartbeat",
                round(hb),
                "bytes",
                "-",
                f"{n_kafka} simulator heartbeats, lz4 batches, .log segment bytes per record",
            ),
            Figure(
                "kafka_bytes_per_prediction",
                round(pred),
                "bytes",
                "-",
                f"{n_kafka} predictions shaped like a worker's (3 candidates, 1 lineage ref)",
            ),
        ],
        notes=["Multiply the Kafka figures by the replication factor for disk across brokers."],
    )
