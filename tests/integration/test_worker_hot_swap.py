"""Hot swap under load: a new model version is switched in without a restart, between batches:
no batch mixes versions, and per partition the predictions switch version exactly once."""

import shutil
import threading
import time
from itertools import groupby

import orjson

from tests.integration.worker_support import Load, read_predictions
from workers.model.inference import ModelSession
from workers.model.registry import ModelRegistry
from workers.precompute.assembly import assemble
from workers.precompute.config import PolicyConfig
from workers.precompute.loop import LoopConfig
from workers.precompute.pipeline import PipelineConfig
from workers.settings import DEFAULT_MODEL_DIR


def test_versions_switch_once_per_partition_and_never_inside_a_batch(
    kafka_settings, topics, unique, tmp_path
):
    for v in ("1.0.0", "1.1.0"):
        shutil.copytree(DEFAULT_MODEL_DIR.parent / v, tmp_path / v)
    (tmp_path / "ACTIVE").write_text("1.0.0")
    registry = ModelRegistry(
        lambda p: ModelSession(p, provider="cpu"), registry=tmp_path, poll_s=0.05
    )
    worker = assemble(
        kafka_settings,
        topics,
        registry,
        PipelineConfig(policy=PolicyConfig(every_event=True, throttle_ms=0), max_batch=256),
        LoopConfig(group_id=unique("swap")),
    )
    batches: list[set[str]] = []
    produced = [0]
    produce = worker.sink.produce

    def record_batch(topic, keys, values):  # the real produce, plus what each batch carried
        if topic == topics.predictions.name:  # (the worker-state changelog goes along)
            batches.append({orjson.loads(v)["model_version"] for v in values})
            produced[0] += len(values)
        produce(topic, keys, values)

    worker.sink.produce = record_batch
    load = Load(kafka_settings, topics, seconds=4.0, rate=3_000)
    load.start()
    swapper = threading.Timer(2.0, lambda: (tmp_path / "ACTIVE").write_text("1.1.0"))
    swapper.start()
    worker.start()
    deadline = time.monotonic() + 60
    while (
        load.is_alive() or worker.pipeline.pending or not batches
    ) and time.monotonic() < deadline:
        worker.step()
    for _ in range(20):
        worker.step()
    worker.drain()
    worker.commit(sync=True)
    worker.close()
    assert load.error is None and registry.swaps == 1

    assert all(len(b) == 1 for b in batches), "a batch mixed model versions"
    flat = [next(iter(b)) for b in batches]
    assert [k for k, _ in groupby(flat)] == ["1.0.0", "1.1.0"]
    preds = read_predictions(
        kafka_settings,
        topics.predictions.name,
        3,
        unique("r"),
        committed_only=False,
        until=lambda p: len(p) >= produced[0],
        timeout=30,
        quiet_s=0.5,
    )
    assert len(preds) == produced[0]
    for part in range(3):
        seq = [
            p["model_version"]
            for p in sorted(preds, key=lambda p: p["_offset"])
            if p["_partition"] == part
        ]
        assert [k for k, _ in groupby(seq)] == ["1.0.0", "1.1.0"], f"partition {part}"
