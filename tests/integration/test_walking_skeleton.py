"""Simulator events -> worker (batches, ONNX) -> predictions topic -> read API, end to end."""

import time

import orjson
from starlette.testclient import TestClient

from consumer_api.app import create_app
from consumer_api.materialize.materializer import Materializer
from consumer_api.read.service import Service
from consumer_api.settings import ApiOptions
from consumer_api.speculation.precompute_requests import PrecomputeAsker
from precast.kafka import Producer
from precast.serving import MemoryStore
from producers.publisher import EventPublisher
from producers.simulator import Fleet
from workers.model.inference import ModelSession
from workers.model.registry import ModelRegistry
from workers.precompute.assembly import assemble
from workers.precompute.loop import LoopConfig
from workers.precompute.pipeline import PipelineConfig
from workers.settings import DEFAULT_MODEL_DIR


def test_heartbeats_become_served_predictions(kafka_settings, topics, unique):
    fleet = Fleet(devices=50, seed=1)
    publisher = EventPublisher(Producer(kafka_settings), topics)
    sent_at = int(time.time() * 1000)
    for event in fleet.heartbeats(200, sent_at):
        publisher.publish(event)
    publisher.flush()

    model = ModelSession(DEFAULT_MODEL_DIR, provider="cpu")
    registry = ModelRegistry(lambda _p: model, path=DEFAULT_MODEL_DIR)
    worker = assemble(
        kafka_settings,
        topics,
        registry,
        PipelineConfig(max_batch=64),
        LoopConfig(group_id=unique("workers"), poll_timeout_s=0.2),
    )
    worker.start()
    deadline = time.monotonic() + 60
    while (
        worker.pipeline.positions.get((topics.heartbeats.name, 0), 0)
        + worker.pipeline.positions.get((topics.heartbeats.name, 1), 0)
        + worker.pipeline.positions.get((topics.heartbeats.name, 2), 0)
        < 200
        and time.monotonic() < deadline
    ):
        worker.step()
    done = sum(o for (t, _), o in worker.pipeline.positions.items() if t == topics.heartbeats.name)
    worker.drain()
    worker.commit(sync=True)
    worker.close()
    assert done == 200

    store = MemoryStore()
    mat = Materializer(
        kafka_settings,
        topics.predictions.name,
        topics.predictions.partitions,
        view=store,
        group_prefix=unique("api"),
    )
    mat.start()
    deadline = time.monotonic() + 30
    while not mat.ready and time.monotonic() < deadline:
        time.sleep(0.1)
    mat.stop()
    assert mat.ready and len(store) == 50

    svc = Service(
        ApiOptions(),
        store,
        None,
        PrecomputeAsker(None, topics.precompute_requests.name, 5000),
        readiness=lambda: (mat.ready, {}),
    )
    client = TestClient(create_app(svc))
    r = client.get("/v1/devices/dev-000007/prediction")
    assert r.status_code == 200
    body = r.json()
    assert body["source"] == "precomputed"
    assert len(body["candidates"]) == 3
    scores = [c["score"] for c in body["candidates"]]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1.0001
    assert body["model_version"] == model.version == r.headers["X-Model-Version"]
    assert body["computed_at_ms"] == sent_at
    assert body["lineage"][0]["topic"] == topics.heartbeats.name
    # every device's newest prediction came from its own heartbeats
    assert all(orjson.loads(store.get(d).body)["device_id"] == d for d in fleet.ids)
    assert client.get("/readyz").status_code == 200
