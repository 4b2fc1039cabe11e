"""Bad records and model failures become dead letters with their reason, the worker keeps
going; context restored from the compacted topic reaches the features."""

import time

import orjson

from precast.deadletter import dead_letter_info
from precast.fleet import load_fleet, snapshot
from precast.kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartitionOffset
from schemas.leases import is_lease_key
from tests.worker_events import heartbeat, work_order
from workers.model.inference import ModelSession
from workers.model.registry import ModelRegistry
from workers.precompute.assembly import assemble
from workers.precompute.config import PolicyConfig
from workers.precompute.loop import LoopConfig
from workers.precompute.pipeline import PipelineConfig
from workers.settings import DEFAULT_MODEL_DIR


class Flaky:
    """The real model, except that it raises on any batch holding the device `poison`."""

    def __init__(self):
        self.m = ModelSession(DEFAULT_MODEL_DIR, provider="cpu")
        self.version, self.labels, self.calls = self.m.version, self.m.labels, 0
        self.poisoned = False

    def predict(self, x):
        self.calls += 1
        if self.poisoned:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return self.m.predict(x)


def read_all(kafka_settings, topic, group, n, timeout=20):
    c = Consumer(kafka_settings, group)
    c.assign([TopicPartitionOffset(topic, p, OFFSET_BEGINNING) for p in range(3)])
    out, deadline = [], time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out += c.consume(1000, 0.2)
    c.close()
    return out


def run_until(worker, cond, timeout=30):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        worker.step()
    worker.drain()
    worker.commit(sync=True)


def test_bad_records_and_model_failures_are_dead_lettered_and_the_worker_goes_on(
    kafka_settings, topics, unique
):
    model = Flaky()
    worker = assemble(
        kafka_settings,
        topics,
        ModelRegistry(lambda _p: model, path=DEFAULT_MODEL_DIR),
        PipelineConfig(policy=PolicyConfig(throttle_ms=0)),
        LoopConfig(group_id=unique("f")),
    )
    p = Producer(kafka_settings)
    hb = topics.heartbeats.name
    p.produce(hb, b"d1", orjson.dumps(heartbeat("d1")))
    p.produce(hb, b"d2", b"{not json")
    p.produce(hb, b"d3", orjson.dumps(heartbeat("other")))
    p.produce(hb, b"d4", orjson.dumps({**heartbeat("d4"), "metrics": {"cpu_pct": "hot"}}))
    p.flush()
    worker.start()
    run_until(
        worker, lambda: sum(o for (t, _), o in worker.pipeline.positions.items() if t == hb) >= 4
    )
    model.poisoned = True
    p.produce(hb, b"d5", orjson.dumps(heartbeat("d5")))
    p.flush()
    run_until(worker, lambda: model.calls >= 3)
    model.poisoned = False
    p.produce(hb, b"d6", orjson.dumps(heartbeat("d6")))
    p.flush()
    run_until(worker, lambda: model.calls >= 4)
    worker.close()

    dead = read_all(kafka_settings, topics.dead_letters.name, unique("dl"), 4)
    reasons = {m.key(): dead_letter_info(m.headers())["reason"] for m in dead}
    assert reasons == {
        b"d2": "not_json",
        b"d3": "key_mismatch",
        b"d4": "invalid",
        b"d5": "model_failure",
    }
    d5 = next(m for m in dead if m.key() == b"d5")
    assert orjson.loads(d5.value())["device_id"] == "d5"  # original bytes kept
    assert "illegal memory access" in dead_letter_info(d5.headers())["detail"]
    assert model.calls == 4  # first batch, the failing one twice (one retry), then the next batch
    preds = read_all(kafka_settings, topics.predictions.name, unique("p"), 2)
    assert sorted(m.key() for m in preds if not is_lease_key(m.key())) == [b"d1", b"d6"]


def test_context_restored_from_the_compacted_topic_and_from_work_orders(
    kafka_settings, topics, unique
):
    p = Producer(kafka_settings)
    model = load_fleet().context
    ctx = model.new("d1")
    model.apply(
        ctx, "work_orders", work_order("d1", 1_700_000_000_000, "w-old", priority="critical")
    )
    p.produce(topics.device_context.name, b"d1", snapshot.to_json(model, ctx, 0))
    p.flush()
    worker = assemble(
        kafka_settings,
        topics,
        ModelRegistry(lambda path: ModelSession(path, provider="cpu"), path=DEFAULT_MODEL_DIR),
        PipelineConfig(policy=PolicyConfig(throttle_ms=0)),
        LoopConfig(group_id=unique("c")),
    )
    worker.start()
    run_until(worker, lambda: worker.ready and "d1" in worker.pipeline.table.contexts)
    p.produce(topics.heartbeats.name, b"d1", orjson.dumps(heartbeat("d1", 1_700_000_001_000)))
    p.produce(
        topics.work_orders.name, b"d1", orjson.dumps(work_order("d1", 1_700_000_002_000, "w-new"))
    )
    p.flush()
    from prometheus_client import REGISTRY

    from schemas.partitioning import partition_for

    part = str(partition_for(b"d1", 3))
    read = (topics.heartbeats.name, topics.work_orders.name)

    def read_to_the_end():
        # The two topics are fetched apart: the work order can be applied before the heartbeat's
        # fetch returns (and its cached high watermark is known), so wait for both.
        known = {
            tp.topic: lag
            for tp, lag in worker.consumer.lag(worker.assigned)
            if str(tp.partition) == part and tp.topic in read
        }
        return known == dict.fromkeys(read, 0)

    run_until(
        worker,
        lambda: (
            worker.batches >= 1
            and not worker.pipeline.pending
            and len(worker.pipeline.table.contexts["d1"].open[0]) == 2
            and read_to_the_end()
        ),
    )
    worker._update_lag()  # from cached high watermarks: everything read, so no lag
    lag = {
        s.labels["topic"]: s.value
        for m in REGISTRY.collect()
        if m.name == "precast_worker_consumer_lag"
        for s in m.samples
        if s.labels["partition"] == part and s.labels["topic"] in read
    }
    assert lag == {topics.heartbeats.name: 0.0, topics.work_orders.name: 0.0}
    worker.close()
    preds = [
        orjson.loads(m.value())
        for m in read_all(kafka_settings, topics.predictions.name, unique("p"), 1)
        if not is_lease_key(m.key())
    ]
    assert preds and preds[-1]["computed_at_ms"] == 1_700_000_002_000
    assert {r["topic"] for pr in preds for r in pr["lineage"]} == {
        topics.heartbeats.name,
        topics.work_orders.name,
    }
