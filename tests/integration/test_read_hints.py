"""Read hints end to end on the real broker: the read API notes which devices clients read,
prefetch or watch and publishes them; a worker pipeline fed from that topic holds exactly those
devices to its stricter check. Unknown devices never leave the API."""

from __future__ import annotations

import time

from starlette.testclient import TestClient

from consumer_api.cli import build
from schemas.hints import ReadHint
from tests.integration.api_helpers import api_settings, prediction_value, publish, wait_for
from tests.integration.test_api_pipeline import read_all
from tests.worker_events import heartbeat, record
from workers.precompute.pipeline import PipelineConfig, build_pipeline


def test_reads_and_prefetches_become_hints_and_hints_make_devices_hot(
    kafka_settings, topics, unique
):
    now = int(time.time() * 1000)
    publish(
        kafka_settings,
        topics.predictions.name,
        [(d, prediction_value(d, now, now + 5)) for d in ("dev-read", "dev-pre", "dev-quiet")],
    )
    built = build(api_settings(kafka_settings, topics, hint_interval_s=0.2, hot_for_s=30))
    built.materializer.start()
    try:
        with TestClient(built.app) as client:
            wait_for(lambda: client.get("/readyz").status_code == 200, what="ready")
            wait_for(
                lambda: (
                    client.get("/v1/devices/dev-quiet/prediction").json()["source"] == "precomputed"
                ),
                what="answers materialized",
            )
            built.service.hints.flush(now)  # start clean: dev-quiet was read while waiting
            assert client.get("/v1/devices/dev-read/prediction").json()["source"] == "precomputed"
            assert client.get("/v1/devices/unknown-1/prediction").json()["source"] == "fallback"
            r = client.post("/v1/prefetch", json={"device_ids": ["dev-pre", "unknown-2"]})
            assert r.status_code == 202
            # the hint task's next interval has sent them (however late a busy machine runs it)
            wait_for(lambda: built.service.hints.pending == 0, what="hints flushed")
    finally:
        built.materializer.stop()
    msgs = read_all(
        kafka_settings, topics.read_hints.name, topics.read_hints.partitions, unique("chk")
    )
    hints = [ReadHint.model_validate_json(m.value()) for m in msgs]
    sources = {h.device_id: h.source for h in hints if h.hinted_at_ms > now}
    assert sources.get("dev-read") == "read" and sources.get("dev-pre") == "prefetch"
    assert not any(h.device_id.startswith("unknown") for h in hints)
    assert all(m.key() == h.device_id.encode() for m, h in zip(msgs, hints, strict=True))
    assert all(h.hot_until_ms == h.hinted_at_ms + 30_000 for h in hints)

    # A worker's pipeline consuming the same records marks those devices hot, and only those.
    p = build_pipeline(topics, PipelineConfig(), lambda m, r, d: None)
    p.ingest(
        [
            record(topics.heartbeats.name, heartbeat(d, now), i)
            for i, d in enumerate(("dev-read", "dev-pre", "dev-cold"))
        ],
        now,
        0.0,
    )
    p.ingest(msgs, now, 0.0)
    hot = {
        d for d in ("dev-read", "dev-pre", "dev-cold") if p.table.hot_until[p.table.slot[d]] > now
    }
    assert {"dev-read", "dev-pre"} <= hot and "dev-cold" not in hot
